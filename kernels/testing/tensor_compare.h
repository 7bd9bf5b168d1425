// tensor_compare.h: comparisons of a computed tensor (the CUDA backend's
// output) with a reference (the CPU backend's) for GoogleTest tests that run
// rarely (GPU time is scarce), so one failing run must carry all the evidence:
// within a tolerance relative to the reference's largest magnitude (element
// count, scale, max absolute and relative error and where, how many elements
// are outside, NaN and Inf counts, the first 10 outside), or bitwise (how many
// differ, the first 10 with their bits in hex). Every comparison prints one
// `[ compare ]` line and records its measurement as a test property (JUnit
// XML); a failing one, when PARAPLAN_TEST_DUMP_DIR is set, also writes both
// tensors there as raw little-endian float32 with a JSON sidecar. No CUDA
// needed; test code only (links GTest). Tests: tensor_compare_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace paraplan::kernels::tensor_compare {

// How many elements outside tolerance (or differing) a report lists.
inline constexpr size_t kListedElements = 10;
// The environment variable naming the directory failing comparisons dump to.
inline constexpr const char* kDumpDirVariable = "PARAPLAN_TEST_DUMP_DIR";

// Tolerance comparison: element i is within tolerance when actual[i] ==
// expected[i] (identical infinities included) or |actual[i] - expected[i]| <=
// tolerance * max(scale, 1e-30), scale = max |expected| over its finite
// elements. A NaN on either side is outside. It passes when the sizes agree
// and no element is outside: for finite tensors, max abs error <= tolerance
// * scale.
struct CloseReport {
  struct Element {
    size_t index;
    float actual, expected;
  };
  std::string what;
  size_t actual_size = 0, expected_size = 0;
  size_t count = 0;  // elements compared: the smaller size
  double tolerance = 0;
  double scale = 0;  // max |expected| over finite elements
  // Over elements whose error is a number (Inf included, NaN not); 0 at 0 if none.
  double max_abs_error = 0;
  size_t max_abs_error_index = 0;
  float max_abs_error_actual = 0, max_abs_error_expected = 0;  // the elements there
  double max_rel_error = 0;                                    // max_abs_error / max(scale, 1e-30)
  size_t outside = 0;
  size_t actual_nan = 0, actual_inf = 0, expected_nan = 0, expected_inf = 0;
  std::vector<Element> first_outside;  // the first kListedElements, in index order
  bool passed() const { return actual_size == expected_size && outside == 0; }
};

CloseReport compare_close(std::span<const float> actual, std::span<const float> expected,
                          double tolerance, std::string_view what);
// `[ compare ] <what>: max rel err 3.10e-04 (tolerance 5e-03), 0 of 4096 outside, 0 NaN, 0 Inf`
// (NaN, Inf: in actual; the reference's are added when it has any; " FAILED" when failed).
std::string summary_line(const CloseReport& report);
// Several lines: everything the report holds.
std::string failure_message(const CloseReport& report);

// Bitwise comparison of floats: kValue compares as operator== does (so as
// EXPECT_EQ on vectors: -0 == +0, a NaN never equal); kBits compares the bits,
// with every NaN alike (a GPU's NaN payload is its own).
enum class FloatEquality { kValue, kBits };

struct EqualReport {
  struct Difference {
    size_t index;
    float actual, expected;  // bf16: widened (exactly)
    uint32_t actual_bits, expected_bits;
  };
  std::string what;
  std::string kind;  // what was compared: "float32 values", "float32 bits", "bf16 bits"
  int bits_width = 32;
  size_t actual_size = 0, expected_size = 0;
  size_t count = 0;  // elements compared: the smaller size
  size_t differing = 0;
  double scale = 0;               // max |expected| over finite elements
  double max_abs_difference = 0;  // over differing elements whose difference is a number
  size_t max_abs_difference_index = 0;
  float max_abs_difference_actual = 0, max_abs_difference_expected = 0;
  size_t actual_nan = 0, actual_inf = 0, expected_nan = 0, expected_inf = 0;
  std::vector<Difference> first_differences;  // the first kListedElements
  bool passed() const { return actual_size == expected_size && differing == 0; }
};

EqualReport compare_equal(std::span<const float> actual, std::span<const float> expected,
                          std::string_view what, FloatEquality equality = FloatEquality::kValue);
// bf16 tensors as their bit patterns (uint16), compared bitwise.
EqualReport compare_bf16_bits(std::span<const uint16_t> actual, std::span<const uint16_t> expected,
                              std::string_view what);
// `[ compare ] <what>: equal as float32 values, 0 of 4099 differ, 0 NaN, 0 Inf`.
std::string summary_line(const EqualReport& report);
std::string failure_message(const EqualReport& report);

// ---- GoogleTest assertions ------------------------------------------------------------------
// Each compares, prints its summary line to stdout, records a test property
// (`max_rel_err.<what>`, or `differing.<what>` for equality: `<what>`
// sanitized to [A-Za-z0-9._-], `.2`, `.3`... appended when a test compares
// the same `what` again) and, when it fails, adds a nonfatal failure at the
// caller's line carrying failure_message() and, with PARAPLAN_TEST_DUMP_DIR
// set, writes <dir>/<test>.<what>.actual.f32, .expected.f32 and .json (test
// and what sanitized the same way; `dump: ...` in the message says where, or
// why nothing could be written). The report is returned.

CloseReport expect_close(std::span<const float> actual, std::span<const float> expected,
                         double tolerance, std::string_view what,
                         std::source_location where = std::source_location::current());
// Tensor t within tolerances[t] (the last tolerance for the rest), named
// "<what> output <t>"; a differing number of tensors fails.
void expect_all_close(const std::vector<std::vector<float>>& actual,
                      const std::vector<std::vector<float>>& expected,
                      const std::vector<double>& tolerances, std::string_view what,
                      std::source_location where = std::source_location::current());
void expect_all_close(const std::vector<std::vector<float>>& actual,
                      const std::vector<std::vector<float>>& expected, double tolerance,
                      std::string_view what,
                      std::source_location where = std::source_location::current());

EqualReport expect_equal(std::span<const float> actual, std::span<const float> expected,
                         std::string_view what, FloatEquality equality = FloatEquality::kValue,
                         std::source_location where = std::source_location::current());
EqualReport expect_bf16_bits_equal(std::span<const uint16_t> actual,
                                   std::span<const uint16_t> expected, std::string_view what,
                                   std::source_location where = std::source_location::current());
// Every tensor equal (kValue), named "<what> output <t>".
void expect_all_equal(const std::vector<std::vector<float>>& actual,
                      const std::vector<std::vector<float>>& expected, std::string_view what,
                      std::source_location where = std::source_location::current());

// A scalar (a mean loss, in double): |actual - expected| <= tolerance *
// |expected|, as EXPECT_NEAR(actual, expected, tolerance * |expected|);
// printed and recorded (`max_rel_err.<what>`) as the tensors are. Not dumped.
void expect_scalar_close(double actual, double expected, double tolerance, std::string_view what,
                         std::source_location where = std::source_location::current());

// `name` with every character outside [A-Za-z0-9._-] made '_' (runs of them
// one '_'), trimmed of '_', at most 100 characters; "tensor" when empty.
std::string sanitize(std::string_view name);

}  // namespace paraplan::kernels::tensor_compare
