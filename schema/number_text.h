// number_text.h: shortest round-trip text for floating-point values, used by plan
// messages and tables (internal to schema/).
//
// std::to_chars alone picks whichever of fixed and scientific is shorter, which
// prints 3e-4 as "3e-04"; people read "0.0003" faster, so fixed is used for
// ordinary magnitudes, as printf's %g does.
#pragma once

#include <charconv>
#include <concepts>
#include <cstdlib>
#include <string>

namespace paraplan::schema_text {

template <std::floating_point Float>
std::string number(Float value) {
  char text[128];
  auto result = std::to_chars(text, text + sizeof(text), value, std::chars_format::scientific);
  const std::string scientific(text, result.ptr);
  const size_t e = scientific.find('e');
  if (e == std::string::npos) return scientific;  // inf, nan
  const int exponent = std::atoi(scientific.c_str() + e + 1);
  if (exponent < -5 || exponent >= 16) return scientific;
  result = std::to_chars(text, text + sizeof(text), value, std::chars_format::fixed);
  return std::string(text, result.ptr);
}

}  // namespace paraplan::schema_text
