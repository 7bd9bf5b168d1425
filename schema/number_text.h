// number_text.h: shortest round-trip text for floating-point values, and
// products of a plan's int32 fields that may overflow int64, used by plan
// messages and tables (internal to schema/).
//
// std::to_chars alone picks whichever of fixed and scientific is shorter, which
// prints 3e-4 as "3e-04"; people read "0.0003" faster, so fixed is used for
// ordinary magnitudes, as printf's %g does.
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
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

// a x b x c, or nullopt when it overflows int64 (an invalid plan may hold any
// int32 in each).
inline std::optional<int64_t> checked_product(int64_t a, int64_t b, int64_t c) {
  int64_t ab = 0, abc = 0;
  if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc)) return std::nullopt;
  return abc;
}

// a x b x c x d, or nullopt when it overflows int64.
inline std::optional<int64_t> checked_product(int64_t a, int64_t b, int64_t c, int64_t d) {
  const std::optional<int64_t> abc = checked_product(a, b, c);
  int64_t abcd = 0;
  if (!abc || __builtin_mul_overflow(*abc, d, &abcd)) return std::nullopt;
  return abcd;
}

// The product, or "more than 9223372036854775807".
inline std::string product_text(std::optional<int64_t> product) {
  return product ? std::to_string(*product)
                 : "more than " + std::to_string(std::numeric_limits<int64_t>::max());
}

}  // namespace paraplan::schema_text
