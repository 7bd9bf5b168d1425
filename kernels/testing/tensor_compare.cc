// tensor_compare.cc: the comparisons of tensor_compare.h (the reports and
// their text), the test properties and summary lines of every comparison, and
// the dump of a failing comparison's tensors to PARAPLAN_TEST_DUMP_DIR.
#include "kernels/testing/tensor_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>

namespace paraplan::kernels::tensor_compare {
namespace {

// ---- formatting -----------------------------------------------------------------------------

// Shortest text that reads back as `value` ("0.1", "1e-30", "nan", "-inf").
template <typename T>
std::string shortest(T value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

// Scientific: with the fewest digits that read back (tolerances: "5e-03",
// "2e-05"), or with `digits` after the point ("3.10e-04").
std::string scientific(double value, int digits = -1) {
  char buffer[64];
  const auto result = digits < 0 ? std::to_chars(buffer, buffer + sizeof buffer, value,
                                                 std::chars_format::scientific)
                                 : std::to_chars(buffer, buffer + sizeof buffer, value,
                                                 std::chars_format::scientific, digits);
  return std::string(buffer, result.ptr);
}

std::string hex_bits(uint32_t bits, int width) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, width == 16 ? "0x%04x" : "0x%08x", bits);
  return buffer;
}

// A JSON number, or null where JSON has none (NaN, infinities).
std::string json_number(double value) {
  return std::isfinite(value) ? shortest(value) : "null";
}

std::string json_string(std::string_view text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
      quoted += buffer;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

uint32_t float_bits(float value) {
  return std::bit_cast<uint32_t>(value);
}

float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(uint32_t{bits} << 16);
}

// Counts NaN and Inf in `values` and returns max |value| over the finite ones.
double count_nonfinite(std::span<const float> values, size_t& nan, size_t& inf) {
  double scale = 0.0;
  for (float value : values) {
    if (std::isnan(value)) {
      nan++;
    } else if (std::isinf(value)) {
      inf++;
    } else {
      scale = std::max(scale, std::fabs(double{value}));
    }
  }
  return scale;
}

std::string sizes_text(size_t actual, size_t expected) {
  return "actual has " + std::to_string(actual) + " elements, expected " +
         std::to_string(expected) + "; compared the first " +
         std::to_string(std::min(actual, expected));
}

// ---- which test is running, and which comparison of it --------------------------------------

std::mutex state_mutex;
std::map<std::string, int> seen_keys;  // this test's comparisons, by sanitized what

// Forgets the previous test's comparisons when the next one starts.
class ResetOnTestStart : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override {
    const std::lock_guard<std::mutex> lock(state_mutex);
    seen_keys.clear();
  }
};

std::string current_test_name() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (test == nullptr) return "no_test";
  return std::string(test->test_suite_name()) + "." + test->name();
}

// sanitize(what), with ".2", ".3"... when this test already compared that name.
std::string comparison_key(std::string_view what) {
  static const bool registered = [] {
    ::testing::UnitTest::GetInstance()->listeners().Append(new ResetOnTestStart);
    return true;
  }();
  (void)registered;
  const std::lock_guard<std::mutex> lock(state_mutex);
  std::string key = sanitize(what);
  const int occurrence = ++seen_keys[key];
  if (occurrence > 1) key += "." + std::to_string(occurrence);
  return key;
}

// ---- the dump -------------------------------------------------------------------------------

bool write_float32(const std::filesystem::path& path, std::span<const float> values,
                   std::string& error) {
  std::vector<uint32_t> words(values.size());
  for (size_t i = 0; i < values.size(); i++) {
    words[i] = float_bits(values[i]);
    if constexpr (std::endian::native == std::endian::big) {  // the files are little-endian
      words[i] = (words[i] >> 24) | ((words[i] >> 8) & 0xff00u) | ((words[i] << 8) & 0xff0000u) |
                 (words[i] << 24);
    }
  }
  errno = 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (file) {
    file.write(reinterpret_cast<const char*>(words.data()),
               static_cast<std::streamsize>(words.size() * sizeof(uint32_t)));
    file.close();
  }
  if (!file) {
    error = "cannot write " + path.string() + " (" +
            (errno != 0 ? std::strerror(errno) : "stream error") + ")";
    return false;
  }
  return true;
}

// Writes actual, expected and the sidecar (`fields`: the JSON members after
// test, what and the file names) when PARAPLAN_TEST_DUMP_DIR is set; returns
// the message line saying where, or why not ("" when the variable is unset).
std::string dump(const std::string& key, std::string_view what, std::span<const float> actual,
                 std::span<const float> expected, const std::string& fields) {
  const char* variable = std::getenv(kDumpDirVariable);
  if (variable == nullptr || *variable == '\0') return "";
  const std::string directory = variable;
  try {
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (error) {
      return "dump: nothing written: cannot create " + std::string(kDumpDirVariable) + "=" +
             directory + " (" + error.message() + ")";
    }
    const std::string test = current_test_name();
    const std::string stem = sanitize(test) + "." + key;
    const std::filesystem::path base = std::filesystem::path(directory) / stem;
    const std::string actual_name = stem + ".actual.f32", expected_name = stem + ".expected.f32";
    std::string problem;
    if (!write_float32(std::filesystem::path(directory) / actual_name, actual, problem) ||
        !write_float32(std::filesystem::path(directory) / expected_name, expected, problem)) {
      return "dump: failed: " + problem;
    }
    const std::string json = "{\n  \"test\": " + json_string(test) +
                             ",\n  \"what\": " + json_string(what) +
                             ",\n  \"actual_file\": " + json_string(actual_name) +
                             ",\n  \"expected_file\": " + json_string(expected_name) +
                             ",\n  \"format\": \"raw little-endian float32\",\n" + fields + "}\n";
    errno = 0;
    std::ofstream sidecar(base.string() + ".json", std::ios::trunc);
    if (sidecar) {
      sidecar << json;
      sidecar.close();
    }
    if (!sidecar) {
      return "dump: failed: cannot write " + base.string() + ".json (" +
             (errno != 0 ? std::strerror(errno) : "stream error") + ")";
    }
    return "dump: wrote " + base.string() + ".actual.f32, .expected.f32 and .json";
  } catch (const std::exception& exception) {
    return "dump: failed: " + std::string(exception.what());
  } catch (...) {
    return "dump: failed";
  }
}

std::string close_fields(const CloseReport& r) {
  return "  \"comparison\": \"close\",\n  \"count\": " + std::to_string(r.count) +
         ",\n  \"actual_count\": " + std::to_string(r.actual_size) +
         ",\n  \"expected_count\": " + std::to_string(r.expected_size) +
         ",\n  \"tolerance\": " + json_number(r.tolerance) +
         ",\n  \"scale\": " + json_number(r.scale) +
         ",\n  \"max_abs_error\": " + json_number(r.max_abs_error) +
         ",\n  \"max_abs_error_index\": " + std::to_string(r.max_abs_error_index) +
         ",\n  \"max_rel_error\": " + json_number(r.max_rel_error) +
         ",\n  \"outside\": " + std::to_string(r.outside) +
         ",\n  \"actual_nan\": " + std::to_string(r.actual_nan) +
         ",\n  \"actual_inf\": " + std::to_string(r.actual_inf) +
         ",\n  \"expected_nan\": " + std::to_string(r.expected_nan) +
         ",\n  \"expected_inf\": " + std::to_string(r.expected_inf) + "\n";
}

std::string equal_fields(const EqualReport& r) {
  return "  \"comparison\": " + json_string("bitwise, " + r.kind) +
         ",\n  \"count\": " + std::to_string(r.count) +
         ",\n  \"actual_count\": " + std::to_string(r.actual_size) +
         ",\n  \"expected_count\": " + std::to_string(r.expected_size) +
         ",\n  \"tolerance\": 0,\n  \"scale\": " + json_number(r.scale) +
         ",\n  \"max_abs_error\": " + json_number(r.max_abs_difference) +
         ",\n  \"max_abs_error_index\": " + std::to_string(r.max_abs_difference_index) +
         ",\n  \"differing\": " + std::to_string(r.differing) +
         ",\n  \"actual_nan\": " + std::to_string(r.actual_nan) +
         ",\n  \"actual_inf\": " + std::to_string(r.actual_inf) +
         ",\n  \"expected_nan\": " + std::to_string(r.expected_nan) +
         ",\n  \"expected_inf\": " + std::to_string(r.expected_inf) + "\n";
}

void print_line(const std::string& line) {
  std::cout << line << std::endl;  // flushed: the line survives a crash that follows
}

// The shared part of the bitwise comparisons: `widen` gives an element's
// value, `bits` its bit pattern, `equal` whether two elements are equal.
template <typename T, typename Widen, typename Bits, typename Equal>
EqualReport compare_bitwise(std::span<const T> actual, std::span<const T> expected,
                            std::string_view what, std::string kind, int bits_width, Widen widen,
                            Bits bits, Equal equal) {
  EqualReport r;
  r.what = std::string(what);
  r.kind = std::move(kind);
  r.bits_width = bits_width;
  r.actual_size = actual.size();
  r.expected_size = expected.size();
  r.count = std::min(actual.size(), expected.size());
  for (size_t i = 0; i < r.count; i++) {
    const float a = widen(actual[i]), e = widen(expected[i]);
    if (std::isnan(a)) r.actual_nan++;
    if (std::isinf(a)) r.actual_inf++;
    if (std::isnan(e)) r.expected_nan++;
    if (std::isinf(e)) r.expected_inf++;
    if (std::isfinite(e)) r.scale = std::max(r.scale, std::fabs(double{e}));
    if (equal(actual[i], expected[i])) continue;
    r.differing++;
    const double difference = std::fabs(double{a} - double{e});
    if (difference > r.max_abs_difference) {  // false for NaN
      r.max_abs_difference = difference;
      r.max_abs_difference_index = i;
      r.max_abs_difference_actual = a;
      r.max_abs_difference_expected = e;
    }
    if (r.first_differences.size() < kListedElements) {
      r.first_differences.push_back({i, a, e, bits(actual[i]), bits(expected[i])});
    }
  }
  return r;
}

// The test property, the stdout line and, on failure, the dump and the gtest failure.
template <typename Report>
void report(const Report& r, const std::string& property, const std::string& value,
            std::span<const float> actual, std::span<const float> expected,
            const std::string& fields, std::source_location where) {
  const std::string key = comparison_key(r.what);
  ::testing::Test::RecordProperty(property + "." + key, value);
  print_line(summary_line(r));
  if (r.passed()) return;
  std::string message = failure_message(r);
  const std::string dumped = dump(key, r.what, actual, expected, fields);
  if (!dumped.empty()) message += "  " + dumped + "\n";
  ADD_FAILURE_AT(where.file_name(), static_cast<int>(where.line())) << message;
}

std::vector<float> widen_bf16(std::span<const uint16_t> values) {
  std::vector<float> widened(values.size());
  for (size_t i = 0; i < values.size(); i++) widened[i] = bf16_to_float(values[i]);
  return widened;
}

}  // namespace

std::string sanitize(std::string_view name) {
  std::string out;
  for (char c : name) {
    const bool kept = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '-' || c == '_';
    if (kept) {
      out += c;
    } else if (out.empty() || out.back() != '_') {
      out += '_';
    }
  }
  const size_t first = out.find_first_not_of('_');
  if (first == std::string::npos) return "tensor";
  out = out.substr(first, out.find_last_not_of('_') - first + 1);
  if (out.size() > 100) out.resize(100);
  return out;
}

// ---- the tolerance comparison ---------------------------------------------------------------

CloseReport compare_close(std::span<const float> actual, std::span<const float> expected,
                          double tolerance, std::string_view what) {
  CloseReport r;
  r.what = std::string(what);
  r.tolerance = tolerance;
  r.actual_size = actual.size();
  r.expected_size = expected.size();
  r.count = std::min(actual.size(), expected.size());
  actual = actual.first(r.count);
  expected = expected.first(r.count);
  count_nonfinite(actual, r.actual_nan, r.actual_inf);
  r.scale = count_nonfinite(expected, r.expected_nan, r.expected_inf);
  const double bound = tolerance * std::max(r.scale, 1e-30);
  for (size_t i = 0; i < r.count; i++) {
    const bool identical = actual[i] == expected[i];  // also identical infinities
    const double error = identical ? 0.0 : std::fabs(double{actual[i]} - double{expected[i]});
    if (error > r.max_abs_error) {  // false for NaN
      r.max_abs_error = error;
      r.max_abs_error_index = i;
      r.max_abs_error_actual = actual[i];
      r.max_abs_error_expected = expected[i];
    }
    if (!(error <= bound)) {  // NaN is outside
      r.outside++;
      if (r.first_outside.size() < kListedElements) {
        r.first_outside.push_back({i, actual[i], expected[i]});
      }
    }
  }
  r.max_rel_error = r.max_abs_error / std::max(r.scale, 1e-30);
  return r;
}

// What both kinds of summary line end with: the reference's non-finite
// counts and a size mismatch where there are any, and FAILED.
template <typename Report>
std::string summary_tail(const Report& r) {
  std::string tail;
  if (r.expected_nan + r.expected_inf > 0) {
    tail += "; expected has " + std::to_string(r.expected_nan) + " NaN, " +
            std::to_string(r.expected_inf) + " Inf";
  }
  if (r.actual_size != r.expected_size) {
    tail += "; sizes differ: " + std::to_string(r.actual_size) + " vs " +
            std::to_string(r.expected_size);
  }
  return r.passed() ? tail : tail + "  FAILED";
}

std::string summary_line(const CloseReport& r) {
  std::string line = "[ compare ] " + r.what + ": max rel err " + scientific(r.max_rel_error, 2) +
                     " (tolerance " + scientific(r.tolerance) + "), " + std::to_string(r.outside) +
                     " of " + std::to_string(r.count) + " outside, " +
                     std::to_string(r.actual_nan) + " NaN, " + std::to_string(r.actual_inf) +
                     " Inf";
  return line + summary_tail(r);
}

std::string failure_message(const CloseReport& r) {
  std::string text = r.what + ": " + std::to_string(r.outside) + " of " + std::to_string(r.count) +
                     " elements outside tolerance " + scientific(r.tolerance) +
                     " (|actual - expected| <= tolerance * scale = " +
                     scientific(r.tolerance * std::max(r.scale, 1e-30), 3) + ")\n";
  if (r.actual_size != r.expected_size) {
    text += "  sizes differ: " + sizes_text(r.actual_size, r.expected_size) + "\n";
  }
  text += "  scale (max |expected|) " + shortest(r.scale) + "; max abs error " +
          scientific(r.max_abs_error, 3) + " at [" + std::to_string(r.max_abs_error_index) +
          "] (actual " + shortest(r.max_abs_error_actual) + ", expected " +
          shortest(r.max_abs_error_expected) + "); max rel error " +
          scientific(r.max_rel_error, 3) + "\n";
  text += "  actual: " + std::to_string(r.actual_nan) + " NaN, " + std::to_string(r.actual_inf) +
          " Inf; expected: " + std::to_string(r.expected_nan) + " NaN, " +
          std::to_string(r.expected_inf) + " Inf\n";
  if (!r.first_outside.empty()) {
    text += "  first " + std::to_string(r.first_outside.size()) +
            " outside ([index] actual vs expected, abs error):\n";
    for (const CloseReport::Element& element : r.first_outside) {
      text += "    [" + std::to_string(element.index) + "] " + shortest(element.actual) + " vs " +
              shortest(element.expected) + ", " +
              scientific(std::fabs(double{element.actual} - double{element.expected}), 3) + "\n";
    }
  }
  return text;
}

// ---- the bitwise comparisons ----------------------------------------------------------------

EqualReport compare_equal(std::span<const float> actual, std::span<const float> expected,
                          std::string_view what, FloatEquality equality) {
  const auto identity = [](float value) { return value; };
  if (equality == FloatEquality::kValue) {
    return compare_bitwise(actual, expected, what, "float32 values", 32, identity, float_bits,
                           [](float a, float e) { return a == e; });
  }
  const auto canonical = [](float value) {
    return std::isnan(value) ? 0x7fc00000u : float_bits(value);
  };
  return compare_bitwise(actual, expected, what, "float32 bits", 32, identity, float_bits,
                         [&](float a, float e) { return canonical(a) == canonical(e); });
}

EqualReport compare_bf16_bits(std::span<const uint16_t> actual, std::span<const uint16_t> expected,
                              std::string_view what) {
  const auto canonical = [](uint16_t bits) {
    return (bits & 0x7fffu) > 0x7f80u ? uint16_t{0x7fc0} : bits;  // every NaN alike
  };
  return compare_bitwise(
      actual, expected, what, "bf16 bits", 16, bf16_to_float,
      [](uint16_t bits) { return uint32_t{bits}; },
      [&](uint16_t a, uint16_t e) { return canonical(a) == canonical(e); });
}

std::string summary_line(const EqualReport& r) {
  std::string line = "[ compare ] " + r.what + ": " + (r.passed() ? "equal" : "not equal") +
                     " as " + r.kind + ", " + std::to_string(r.differing) + " of " +
                     std::to_string(r.count) + " differ, " + std::to_string(r.actual_nan) +
                     " NaN, " + std::to_string(r.actual_inf) + " Inf";
  return line + summary_tail(r);
}

std::string failure_message(const EqualReport& r) {
  const char* rule =
      r.kind == "float32 values" ? " (-0 == +0, a NaN never equal)" : " (every NaN alike)";
  std::string text = r.what + ": " + std::to_string(r.differing) + " of " +
                     std::to_string(r.count) + " elements differ, compared as " + r.kind + rule +
                     "\n";
  if (r.actual_size != r.expected_size) {
    text += "  sizes differ: " + sizes_text(r.actual_size, r.expected_size) + "\n";
  }
  if (!r.first_differences.empty()) {
    const EqualReport::Difference& first = r.first_differences.front();
    text += "  first difference at [" + std::to_string(first.index) + "]: actual " +
            shortest(first.actual) + " (" + hex_bits(first.actual_bits, r.bits_width) +
            "), expected " + shortest(first.expected) + " (" +
            hex_bits(first.expected_bits, r.bits_width) + ")\n";
  }
  text += "  scale (max |expected|) " + shortest(r.scale) + "; max abs difference " +
          scientific(r.max_abs_difference, 3) + " at [" +
          std::to_string(r.max_abs_difference_index) + "] (actual " +
          shortest(r.max_abs_difference_actual) + ", expected " +
          shortest(r.max_abs_difference_expected) + ")\n";
  text += "  actual: " + std::to_string(r.actual_nan) + " NaN, " + std::to_string(r.actual_inf) +
          " Inf; expected: " + std::to_string(r.expected_nan) + " NaN, " +
          std::to_string(r.expected_inf) + " Inf\n";
  if (!r.first_differences.empty()) {
    text += "  first " + std::to_string(r.first_differences.size()) +
            " differences ([index] actual (bits) vs expected (bits)):\n";
    for (const EqualReport::Difference& d : r.first_differences) {
      text += "    [" + std::to_string(d.index) + "] " + shortest(d.actual) + " (" +
              hex_bits(d.actual_bits, r.bits_width) + ") vs " + shortest(d.expected) + " (" +
              hex_bits(d.expected_bits, r.bits_width) + ")\n";
    }
  }
  return text;
}

// ---- GoogleTest assertions ------------------------------------------------------------------

CloseReport expect_close(std::span<const float> actual, std::span<const float> expected,
                         double tolerance, std::string_view what, std::source_location where) {
  const CloseReport r = compare_close(actual, expected, tolerance, what);
  report(r, "max_rel_err", scientific(r.max_rel_error, 3), actual, expected, close_fields(r),
         where);
  return r;
}

void expect_all_close(const std::vector<std::vector<float>>& actual,
                      const std::vector<std::vector<float>>& expected,
                      const std::vector<double>& tolerances, std::string_view what,
                      std::source_location where) {
  if (actual.size() != expected.size()) {
    ADD_FAILURE_AT(where.file_name(), static_cast<int>(where.line()))
        << what << ": " << actual.size() << " tensors, expected " << expected.size();
  }
  for (size_t t = 0; t < std::min(actual.size(), expected.size()); t++) {
    expect_close(actual[t], expected[t], tolerances.at(std::min(t, tolerances.size() - 1)),
                 std::string(what) + " output " + std::to_string(t), where);
  }
}

void expect_all_close(const std::vector<std::vector<float>>& actual,
                      const std::vector<std::vector<float>>& expected, double tolerance,
                      std::string_view what, std::source_location where) {
  expect_all_close(actual, expected, std::vector<double>{tolerance}, what, where);
}

EqualReport expect_equal(std::span<const float> actual, std::span<const float> expected,
                         std::string_view what, FloatEquality equality,
                         std::source_location where) {
  const EqualReport r = compare_equal(actual, expected, what, equality);
  report(r, "differing", std::to_string(r.differing), actual, expected, equal_fields(r), where);
  return r;
}

EqualReport expect_bf16_bits_equal(std::span<const uint16_t> actual,
                                   std::span<const uint16_t> expected, std::string_view what,
                                   std::source_location where) {
  const EqualReport r = compare_bf16_bits(actual, expected, what);
  report(r, "differing", std::to_string(r.differing), widen_bf16(actual), widen_bf16(expected),
         equal_fields(r), where);
  return r;
}

void expect_all_equal(const std::vector<std::vector<float>>& actual,
                      const std::vector<std::vector<float>>& expected, std::string_view what,
                      std::source_location where) {
  if (actual.size() != expected.size()) {
    ADD_FAILURE_AT(where.file_name(), static_cast<int>(where.line()))
        << what << ": " << actual.size() << " tensors, expected " << expected.size();
  }
  for (size_t t = 0; t < std::min(actual.size(), expected.size()); t++) {
    expect_equal(actual[t], expected[t], std::string(what) + " output " + std::to_string(t),
                 FloatEquality::kValue, where);
  }
}

void expect_scalar_close(double actual, double expected, double tolerance, std::string_view what,
                         std::source_location where) {
  const double error = std::fabs(actual - expected), bound = tolerance * std::fabs(expected);
  const double relative = error / std::max(std::fabs(expected), 1e-30);
  const bool passed = error <= bound;
  ::testing::Test::RecordProperty("max_rel_err." + comparison_key(what), scientific(relative, 3));
  print_line("[ compare ] " + std::string(what) + ": max rel err " + scientific(relative, 2) +
             " (tolerance " + scientific(tolerance) + "), actual " + shortest(actual) +
             ", expected " + shortest(expected) + (passed ? "" : "  FAILED"));
  if (!passed) {
    ADD_FAILURE_AT(where.file_name(), static_cast<int>(where.line()))
        << what << ": actual " << shortest(actual) << ", expected " << shortest(expected)
        << ": |actual - expected| = " << scientific(error, 3) << " > tolerance "
        << scientific(tolerance) << " * |expected| = " << scientific(bound, 3) << " (rel err "
        << scientific(relative, 3) << ")";
  }
}

}  // namespace paraplan::kernels::tensor_compare
