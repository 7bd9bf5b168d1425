// job_config_internal.h: helpers shared by the job_config*.cc files; not part of
// the planner's interface.
#pragma once

#include <cstdio>
#include <string>

namespace paraplan {

// 15 significant digits: exact for every value a user types, and lr / 10 of 6e-4
// prints as 6e-05 rather than 5.9999999999999995e-05.
inline std::string format_double(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.15g", value);
  return buffer;
}

}  // namespace paraplan
