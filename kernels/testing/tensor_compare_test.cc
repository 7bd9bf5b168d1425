// tensor_compare_test.cc: the comparisons of tensor_compare.h on planted
// mismatches: the tolerance report (count outside, the first elements outside
// and their values, NaN and Inf counts, the max error and where, the listing
// capped at 10), the failure's gtest message and the caller's line, the
// bitwise reports (first differing index, bits in hex, -0 and NaN under
// either rule, bf16), the summary line and test property of a passing
// comparison, and the dump to PARAPLAN_TEST_DUMP_DIR (the files' bytes, the
// sidecar, a directory that cannot be made). Runs without a GPU.
#include "kernels/testing/tensor_compare.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

namespace paraplan::kernels::tensor_compare {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// 100 values in [-0.5, 0.49]: scale 0.5.
std::vector<float> ramp() {
  std::vector<float> values(100);
  for (size_t i = 0; i < values.size(); i++) values[i] = static_cast<float>(i) * 0.01f - 0.5f;
  return values;
}

// The gtest failures `run` reports (intercepted: they do not fail this test).
template <typename Run>
std::vector<::testing::TestPartResult> failures_of(Run run) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    run();
  }
  std::vector<::testing::TestPartResult> failures;
  for (int i = 0; i < results.size(); i++) failures.push_back(results.GetTestPartResult(i));
  return failures;
}

// The value of this test's property `key` ("" if it has none).
std::string property(const std::string& key) {
  const ::testing::TestResult* result =
      ::testing::UnitTest::GetInstance()->current_test_info()->result();
  for (int i = 0; i < result->test_property_count(); i++) {
    if (result->GetTestProperty(i).key() == key) return result->GetTestProperty(i).value();
  }
  return "";
}

// Sets PARAPLAN_TEST_DUMP_DIR for its lifetime, then unsets it.
class ScopedDumpDir {
 public:
  explicit ScopedDumpDir(const std::string& path) { setenv(kDumpDirVariable, path.c_str(), 1); }
  ~ScopedDumpDir() { unsetenv(kDumpDirVariable); }
};

// A fresh directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/tensor_compare_test_XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// Raw little-endian float32 bytes, as the dump must write them.
std::string little_endian_bytes(const std::vector<float>& values) {
  std::string bytes;
  for (float value : values) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    for (int shift = 0; shift < 32; shift += 8) bytes += static_cast<char>((bits >> shift) & 0xff);
  }
  return bytes;
}

TEST(TensorCompare, PlantedMismatchGivesCountIndicesValuesAndMaxError) {
  const std::vector<float> expected = ramp();
  std::vector<float> actual = expected;
  actual[3] += 0.25f;   // abs error 0.25: rel 0.5
  actual[7] -= 0.125f;  // 0.125
  actual[50] += 0.01f;  // 0.01: rel 0.02
  actual[90] += 1e-5f;  // within 1e-3 * 0.5
  const CloseReport r = compare_close(actual, expected, 1e-3, "planted");
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.count, 100u);
  EXPECT_EQ(r.scale, 0.5);
  EXPECT_EQ(r.outside, 3u);
  ASSERT_EQ(r.first_outside.size(), 3u);
  EXPECT_EQ(r.first_outside[0].index, 3u);
  EXPECT_EQ(r.first_outside[0].actual, actual[3]);
  EXPECT_EQ(r.first_outside[0].expected, expected[3]);
  EXPECT_EQ(r.first_outside[1].index, 7u);
  EXPECT_EQ(r.first_outside[2].index, 50u);
  EXPECT_EQ(r.max_abs_error_index, 3u);
  EXPECT_NEAR(r.max_abs_error, 0.25, 1e-6);
  EXPECT_EQ(r.max_abs_error_actual, actual[3]);
  EXPECT_NEAR(r.max_rel_error, 0.5, 1e-6);
  EXPECT_EQ(r.actual_nan + r.actual_inf + r.expected_nan + r.expected_inf, 0u);
  // Just inside the tolerance passes, with the measured error.
  const CloseReport loose = compare_close(actual, expected, 0.5, "planted");
  EXPECT_TRUE(loose.passed());
  EXPECT_NEAR(loose.max_rel_error, 0.5, 1e-6);
}

TEST(TensorCompare, NanAndInfAreCountedAndOutside) {
  const std::vector<float> expected = ramp();
  std::vector<float> actual = expected;
  actual[10] = kNaN;
  actual[20] = kInf;
  actual[30] = -kInf;
  std::vector<float> reference = expected;
  reference[40] = kNaN;
  const CloseReport r = compare_close(actual, reference, 1e-3, "nonfinite");
  EXPECT_EQ(r.actual_nan, 1u);
  EXPECT_EQ(r.actual_inf, 2u);
  EXPECT_EQ(r.expected_nan, 1u);
  EXPECT_EQ(r.expected_inf, 0u);
  EXPECT_EQ(r.outside, 4u);  // both NaNs and both infinities
  ASSERT_EQ(r.first_outside.size(), 4u);
  EXPECT_EQ(r.first_outside[0].index, 10u);
  EXPECT_TRUE(std::isnan(r.first_outside[0].actual));
  EXPECT_EQ(r.first_outside[3].index, 40u);
  EXPECT_EQ(r.max_abs_error, INFINITY);
  EXPECT_EQ(r.max_abs_error_index, 20u);
  // The same infinity on both sides is equal; the scale is over finite values.
  std::vector<float> with_inf = expected;
  with_inf[5] = kInf;
  const CloseReport same = compare_close(with_inf, with_inf, 1e-6, "same infinity");
  EXPECT_TRUE(same.passed());
  EXPECT_EQ(same.scale, 0.5);
  EXPECT_EQ(same.expected_inf, 1u);
}

TEST(TensorCompare, ListsTheFirstTenAndCountsAll) {
  const std::vector<float> expected(1000, 1.0f);
  std::vector<float> actual = expected;
  for (size_t i = 100; i < 1000; i += 7) actual[i] = 2.0f;  // 129 elements
  const CloseReport r = compare_close(actual, expected, 1e-2, "many");
  EXPECT_EQ(r.outside, 129u);
  ASSERT_EQ(r.first_outside.size(), kListedElements);
  EXPECT_EQ(r.first_outside[9].index, 163u);
}

TEST(TensorCompare, DifferentSizesFail) {
  const CloseReport r =
      compare_close(std::vector<float>(5, 1.0f), std::vector<float>(7, 1.0f), 1e-3, "sizes");
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.count, 5u);
  EXPECT_EQ(r.outside, 0u);
  EXPECT_NE(failure_message(r).find("actual has 5 elements, expected 7"), std::string::npos);
}

TEST(TensorCompare, FailureMessageCarriesTheReportAtTheCallersLine) {
  const std::vector<float> expected = ramp();
  std::vector<float> actual = expected;
  actual[3] = 0.5f;  // expected -0.47
  actual[8] = kNaN;
  int line = 0;
  const std::vector<::testing::TestPartResult> failures = failures_of([&] {
    line = __LINE__ + 1;
    expect_close(actual, expected, 2e-5, "out B=2 T=33");
  });
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_TRUE(failures[0].nonfatally_failed());
  EXPECT_EQ(failures[0].line_number(), line);
  EXPECT_NE(std::string(failures[0].file_name()).find("tensor_compare_test.cc"), std::string::npos);
  const std::string message = failures[0].message();
  for (const char* part :
       {"out B=2 T=33: 2 of 100 elements outside tolerance 2e-05", "scale (max |expected|) 0.5",
        "max abs error 9.700e-01 at [3] (actual 0.5, expected -0.47)", "max rel error 1.940e+00",
        "actual: 1 NaN, 0 Inf; expected: 0 NaN, 0 Inf", "first 2 outside",
        "[3] 0.5 vs -0.47, 9.700e-01", "[8] nan vs -0.42"}) {
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in\n" << message;
  }
  EXPECT_EQ(message.find("dump:"), std::string::npos);  // PARAPLAN_TEST_DUMP_DIR unset
  // The same through gtest's own check.
  EXPECT_NONFATAL_FAILURE(expect_close(actual, expected, 2e-5, "again"),
                          "again: 2 of 100 elements outside tolerance 2e-05");
}

TEST(TensorCompare, PassingComparisonPrintsAndRecordsItsMaxError) {
  const std::vector<float> expected = ramp();
  std::vector<float> actual = expected;
  actual[17] += 1e-4f;  // rel error ~2e-4
  ::testing::internal::CaptureStdout();
  const CloseReport r = expect_close(actual, expected, 5e-3, "gelu output 0");
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_TRUE(r.passed());
  EXPECT_EQ(printed,
            "[ compare ] gelu output 0: max rel err 2.00e-04 (tolerance 5e-03), 0 of 100 "
            "outside, 0 NaN, 0 Inf\n");
  EXPECT_EQ(property("max_rel_err.gelu_output_0"), "2.000e-04");
  // The same name again in this test: its own property.
  expect_close(expected, expected, 5e-3, "gelu output 0");
  EXPECT_EQ(property("max_rel_err.gelu_output_0.2"), "0.000e+00");
  EXPECT_EQ(property("max_rel_err.gelu_output_0"), "2.000e-04");
}

TEST(TensorCompare, AllCloseNamesEachOutputWithItsTolerance) {
  const std::vector<std::vector<float>> expected = {ramp(), ramp(), ramp()};
  std::vector<std::vector<float>> actual = expected;
  actual[1][4] += 1e-3f;  // rel 2e-3: outside 1e-4, inside 1e-2
  actual[2][4] += 1e-3f;
  const auto failures = failures_of([&] {
    expect_all_close(actual, expected, {1e-6, 1e-4, 1e-2}, "layernorm");
  });
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(std::string(failures[0].message()).find("layernorm output 1: 1 of 100"),
            std::string::npos);
  EXPECT_EQ(failures_of([&] { expect_all_close(actual, expected, 1e-2, "loose"); }).size(), 0u);
  EXPECT_EQ(failures_of([&] { expect_all_close(actual, {ramp()}, 1e-2, "count"); }).size(), 1u);
}

TEST(TensorCompare, BitwiseNamesTheFirstDifference) {
  const std::vector<float> expected = ramp();
  std::vector<float> actual = expected;
  actual[5] = std::nextafter(expected[5], 1.0f);  // one ulp
  actual[9] = 3.0f;
  const EqualReport r = compare_equal(actual, expected, "residual");
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.differing, 2u);
  ASSERT_EQ(r.first_differences.size(), 2u);
  EXPECT_EQ(r.first_differences[0].index, 5u);
  EXPECT_EQ(r.first_differences[0].actual_bits + 1, r.first_differences[0].expected_bits);
  EXPECT_EQ(r.max_abs_difference_index, 9u);
  const auto failures = failures_of([&] { expect_equal(actual, expected, "residual"); });
  ASSERT_EQ(failures.size(), 1u);
  const std::string message = failures[0].message();
  // expected[5] = -0.45 (0xbee66666), one ulp towards zero: 0xbee66665.
  EXPECT_NE(message.find("residual: 2 of 100 elements differ, compared as float32 values"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("first difference at [5]: actual -0.44999996 (0xbee66665), expected "
                         "-0.45 (0xbee66666)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("[9] 3 (0x40400000) vs -0.41 (0xbed1eb85)"), std::string::npos) << message;
}

TEST(TensorCompare, BitwiseRulesForSignedZeroAndNan) {
  const std::vector<float> a = {0.0f, kNaN, 1.0f}, b = {-0.0f, kNaN, 1.0f};
  // As operator== (EXPECT_EQ on vectors): -0 == +0, NaN never equal.
  const EqualReport values = compare_equal(a, b, "values");
  EXPECT_EQ(values.differing, 1u);
  EXPECT_EQ(values.first_differences[0].index, 1u);
  EXPECT_EQ(values.actual_nan, 1u);
  // Bits: the zeros differ, any NaN equals any NaN.
  std::vector<float> other_nan = b;
  other_nan[1] = -kNaN;
  const EqualReport bits = compare_equal(a, other_nan, "bits", FloatEquality::kBits);
  EXPECT_EQ(bits.differing, 1u);
  EXPECT_EQ(bits.first_differences[0].index, 0u);
  EXPECT_EQ(bits.first_differences[0].expected_bits, 0x80000000u);
  EXPECT_EQ(failures_of([&] { expect_equal(a, a, "same", FloatEquality::kBits); }).size(), 0u);
}

TEST(TensorCompare, Bf16BitsNameTheFirstDifference) {
  const std::vector<uint16_t> expected = {0x3f80, 0x4000, 0x7fc0, 0xbf80};  // 1, 2, NaN, -1
  std::vector<uint16_t> actual = expected;
  actual[1] = 0x4001;
  actual[2] = 0x7fc1;  // another NaN: alike
  const EqualReport r = compare_bf16_bits(actual, expected, "bf16 out");
  EXPECT_EQ(r.differing, 1u);
  ASSERT_EQ(r.first_differences.size(), 1u);
  EXPECT_EQ(r.first_differences[0].index, 1u);
  EXPECT_EQ(r.first_differences[0].expected, 2.0f);
  EXPECT_NE(failure_message(r).find("first difference at [1]: actual 2.015625 (0x4001), "
                                    "expected 2 (0x4000)"),
            std::string::npos)
      << failure_message(r);
}

TEST(TensorCompare, FailingComparisonDumpsFloat32AndSidecar) {
  TempDir temp;
  const std::filesystem::path directory = temp.path() / "created" / "here";
  const ScopedDumpDir dump(directory.string());
  const std::vector<float> expected = ramp();
  std::vector<float> actual = expected;
  actual[3] = kNaN;
  // A passing comparison writes nothing.
  EXPECT_EQ(failures_of([&] { expect_close(expected, expected, 1e-3, "dqkv B=1"); }).size(), 0u);
  EXPECT_FALSE(std::filesystem::exists(directory));
  const auto failures = failures_of([&] { expect_close(actual, expected, 1e-3, "dqkv B=1"); });
  ASSERT_EQ(failures.size(), 1u);
  // The second comparison named "dqkv B=1" in this test: ".2".
  const std::string stem = "TensorCompare.FailingComparisonDumpsFloat32AndSidecar.dqkv_B_1.2";
  EXPECT_NE(std::string(failures[0].message())
                .find("dump: wrote " + (directory / stem).string() +
                      ".actual.f32, .expected.f32 and .json"),
            std::string::npos)
      << failures[0].message();
  EXPECT_EQ(read_file(directory / (stem + ".actual.f32")), little_endian_bytes(actual));
  EXPECT_EQ(read_file(directory / (stem + ".expected.f32")), little_endian_bytes(expected));
  const std::string json = read_file(directory / (stem + ".json"));
  for (const std::string& part : std::vector<std::string>{
           std::string("\"test\": \"TensorCompare.FailingComparisonDumpsFloat32AndSidecar\""),
           "\"what\": \"dqkv B=1\"", "\"count\": 100", "\"tolerance\": 0.001", "\"scale\": 0.5",
           "\"outside\": 1", "\"actual_nan\": 1", "\"comparison\": \"close\"",
           "\"actual_file\": \"" + stem + ".actual.f32\""}) {
    EXPECT_NE(json.find(part), std::string::npos) << "missing " << part << " in\n" << json;
  }
  // Bitwise comparisons dump too (bf16 widened to float32).
  const std::vector<uint16_t> bits = {0x3f80, 0x4000};
  failures_of([&] { expect_bf16_bits_equal(bits, std::vector<uint16_t>{0x3f80, 0x4040}, "w"); });
  const std::string bf16_stem = "TensorCompare.FailingComparisonDumpsFloat32AndSidecar.w";
  EXPECT_EQ(read_file(directory / (bf16_stem + ".actual.f32")), little_endian_bytes({1.0f, 2.0f}));
  EXPECT_EQ(read_file(directory / (bf16_stem + ".expected.f32")),
            little_endian_bytes({1.0f, 3.0f}));
  EXPECT_NE(read_file(directory / (bf16_stem + ".json")).find("\"differing\": 1"),
            std::string::npos);
}

TEST(TensorCompare, UnwritableDumpDirectoryIsReportedNotFatal) {
  TempDir temp;
  std::ofstream(temp.path() / "a_file") << "not a directory";
  const ScopedDumpDir dump((temp.path() / "a_file" / "dumps").string());
  const auto failures = failures_of(
      [&] { expect_close(std::vector<float>{1.0f}, std::vector<float>{2.0f}, 1e-3, "x"); });
  ASSERT_EQ(failures.size(), 1u);
  const std::string message = failures[0].message();
  EXPECT_NE(message.find("x: 1 of 1 elements outside"), std::string::npos) << message;
  EXPECT_NE(message.find("dump: nothing written: cannot create PARAPLAN_TEST_DUMP_DIR="),
            std::string::npos)
      << message;
}

TEST(TensorCompare, ScalarCloseIsExpectNearRelative) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(failures_of([] { expect_scalar_close(4.5601, 4.56, 1e-4, "fp32 mean loss"); }).size(),
            0u);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(printed.find("[ compare ] fp32 mean loss: max rel err 2.19e-05 (tolerance 1e-04)"),
            std::string::npos)
      << printed;
  EXPECT_EQ(property("max_rel_err.fp32_mean_loss"), "2.193e-05");
  const auto failures = failures_of([] { expect_scalar_close(4.6, 4.56, 1e-4, "loss"); });
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(std::string(failures[0].message()).find("loss: actual 4.6, expected 4.56"),
            std::string::npos);
  EXPECT_EQ(failures_of([] { expect_scalar_close(NAN, 4.56, 1e-4, "nan loss"); }).size(), 1u);
}

TEST(TensorCompare, SanitizeKeepsFileNameCharacters) {
  EXPECT_EQ(sanitize("out B=2 T=33 H=3 Hkv=3 D=8"), "out_B_2_T_33_H_3_Hkv_3_D_8");
  EXPECT_EQ(sanitize("Storage/CudaOps.GeluMatchesCpu/bf16"), "Storage_CudaOps.GeluMatchesCpu_bf16");
  EXPECT_EQ(sanitize("  ../x y  "), ".._x_y");
  EXPECT_EQ(sanitize("///"), "tensor");
  EXPECT_EQ(sanitize(std::string(300, 'a')).size(), 100u);
}

}  // namespace
}  // namespace paraplan::kernels::tensor_compare
