// plan_report_text.h: how the planner's reports write numbers (plan_report.cc
// and plan_report_context_parallel.cc), in one place.
#pragma once

#include <cstdio>
#include <string>

namespace paraplan::report_text {

inline constexpr double kBytesPerGigabyte = 1024.0 * 1024.0 * 1024.0;

// One number through a printf format.
inline std::string printf_string(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// "812 ms", "3.42 s".
inline std::string duration(double seconds) {
  if (seconds < 1) return printf_string("%.3g ms", seconds * 1e3);
  return printf_string("%.3g s", seconds);
}

// "61.89": bytes in GB, no unit.
inline std::string gigabytes(double bytes) {
  return printf_string("%.2f", bytes / kBytesPerGigabyte);
}

}  // namespace paraplan::report_text
