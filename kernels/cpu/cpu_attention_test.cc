// cpu_attention_test.cc: the CPU attention (kernels/cpu/cpu_attention.cc)
// against a plain double-precision reference at sequence lengths that span
// several blocks of its block-triangular GEMMs, with a partial last block:
// forward output, probabilities (exactly zero above the diagonal), and the
// accumulated backward; plus independence of the batch size, bit for bit.
// The small-T hand-computed and finite-difference checks are in
// cpu_ops_test.cc and cpu_ops_gradcheck_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

std::vector<float> pseudo_random(size_t n, uint32_t seed, float scale) {
  std::vector<float> values(n);
  uint32_t state = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    values[i] = (static_cast<float>(state >> 8) / 8388608.0f - 1.0f) * scale;
  }
  return values;
}

struct Reference {
  std::vector<double> out, att, dqkv;
};

// Causal attention and its gradient in double, the textbook way (llm.c's loops).
Reference reference_attention(const std::vector<float>& qkv, const std::vector<float>& dout, int B,
                              int T, int H, int D) {
  const int C = H * D, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Reference ref{std::vector<double>(static_cast<size_t>(B) * T * C, 0.0),
                std::vector<double>(static_cast<size_t>(B) * H * T * T, 0.0),
                std::vector<double>(qkv.size(), 0.0)};
  std::vector<double> dp(T);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < H; h++) {
      auto q = [&](int t, int d) { return double{qkv[(size_t(b) * T + t) * C3 + h * D + d]}; };
      auto k = [&](int t, int d) { return double{qkv[(size_t(b) * T + t) * C3 + C + h * D + d]}; };
      auto v = [&](int t, int d) {
        return double{qkv[(size_t(b) * T + t) * C3 + 2 * C + h * D + d]};
      };
      auto dq = [&](int t, int d) -> double& {
        return ref.dqkv[(size_t(b) * T + t) * C3 + h * D + d];
      };
      for (int t = 0; t < T; t++) {
        double* p = &ref.att[((size_t(b) * H + h) * T + t) * T];
        double max_score = -1e300;
        for (int j = 0; j <= t; j++) {
          double s = 0.0;
          for (int d = 0; d < D; d++) s += q(t, d) * k(j, d);
          p[j] = s * scale;
          max_score = std::max(max_score, p[j]);
        }
        double sum = 0.0;
        for (int j = 0; j <= t; j++) sum += (p[j] = std::exp(p[j] - max_score));
        for (int j = 0; j <= t; j++) p[j] /= sum;
        const size_t out_row = (size_t(b) * T + t) * C + h * D;
        for (int d = 0; d < D; d++) {
          for (int j = 0; j <= t; j++) ref.out[out_row + d] += p[j] * v(j, d);
        }
        // Backward.
        double weighted = 0.0;
        for (int j = 0; j <= t; j++) {
          dp[j] = 0.0;
          for (int d = 0; d < D; d++) dp[j] += dout[out_row + d] * v(j, d);
          weighted += p[j] * dp[j];
          for (int d = 0; d < D; d++) dq(j, 2 * C + d) += p[j] * dout[out_row + d];
        }
        for (int j = 0; j <= t; j++) {
          const double ds = p[j] * (dp[j] - weighted) * scale;
          for (int d = 0; d < D; d++) {
            dq(t, d) += ds * k(j, d);
            dq(j, C + d) += ds * q(t, d);
          }
        }
      }
    }
  }
  return ref;
}

// |actual - expected| <= tolerance * (1 + |expected|), elementwise; returns the
// largest scaled error for the failure message.
template <typename Actual>
void expect_close(const std::vector<Actual>& actual, const std::vector<double>& expected,
                  double tolerance, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double worst = 0.0;
  size_t worst_index = 0;
  for (size_t i = 0; i < actual.size(); i++) {
    const double error = std::fabs(actual[i] - expected[i]) / (1.0 + std::fabs(expected[i]));
    if (!(error <= worst)) {
      worst = error;
      worst_index = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << "[" << worst_index << "]: " << actual[worst_index]
                              << " vs " << expected[worst_index];
}

void check_against_reference(int B, int T, int H, int D) {
  SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " H=" << H << " D=" << D);
  auto ops = make_cpu_ops();
  const int C = H * D;
  const auto qkv = pseudo_random(static_cast<size_t>(B) * T * 3 * C, 1, 1.5f);
  const auto dout = pseudo_random(static_cast<size_t>(B) * T * C, 2, 1.0f);
  const Reference ref = reference_attention(qkv, dout, B, T, H, D);

  // NaN in the outputs and the scratch: every entry must be written, and the
  // backward must not read scratch it did not write.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(dout.size(), nan), att(static_cast<size_t>(B) * H * T * T, nan);
  ops->attention_forward(out.data(), att.data(), qkv.data(), B, T, H, D);
  expect_close(out, ref.out, 2e-6, "out");
  expect_close(att, ref.att, 2e-6, "att");
  for (size_t row = 0; row < att.size() / T; row++) {
    const int t = static_cast<int>(row % T);
    for (int j = t + 1; j < T; j++) ASSERT_EQ(att[row * T + j], 0.0f) << row << ", " << j;
  }

  std::vector<float> scratch(att.size(), nan);
  const auto dqkv_before = pseudo_random(qkv.size(), 3, 1.0f);
  std::vector<float> dqkv = dqkv_before;
  ops->attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, H,
                          D);
  std::vector<double> added(dqkv.size());
  for (size_t i = 0; i < dqkv.size(); i++) added[i] = double{dqkv[i]} - dqkv_before[i];
  expect_close(added, ref.dqkv, 5e-6, "dqkv");
}

TEST(CpuAttention, MatchesReferenceAcrossBlocks) {
  check_against_reference(2, 200, 2, 8);   // blocks of 64: 64, 64, 64, 8
  check_against_reference(1, 600, 1, 16);  // blocks of 128: 4 x 128, 88
  check_against_reference(1, 64, 3, 4);    // exactly one block
}

TEST(CpuAttention, BatchElementsAreIndependentBitwise) {
  // Batch 1 of a B = 3 call gives bitwise the B = 1 result on that slice.
  auto ops = make_cpu_ops();
  const int B = 3, T = 130, H = 2, D = 8, C = H * D;
  const auto qkv = pseudo_random(static_cast<size_t>(B) * T * 3 * C, 4, 1.0f);
  const auto dout = pseudo_random(static_cast<size_t>(B) * T * C, 5, 1.0f);
  std::vector<float> out(dout.size()), att(static_cast<size_t>(B) * H * T * T), scratch(att.size());
  std::vector<float> dqkv(qkv.size(), 0.0f);
  ops->attention_forward(out.data(), att.data(), qkv.data(), B, T, H, D);
  ops->attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, H,
                          D);

  const size_t qkv_slice = static_cast<size_t>(T) * 3 * C, out_slice = static_cast<size_t>(T) * C;
  const std::vector<float> qkv1(qkv.begin() + qkv_slice, qkv.begin() + 2 * qkv_slice);
  const std::vector<float> dout1(dout.begin() + out_slice, dout.begin() + 2 * out_slice);
  std::vector<float> out1(out_slice), att1(static_cast<size_t>(H) * T * T), scratch1(att1.size());
  std::vector<float> dqkv1(qkv_slice, 0.0f);
  ops->attention_forward(out1.data(), att1.data(), qkv1.data(), 1, T, H, D);
  ops->attention_backward(dqkv1.data(), scratch1.data(), dout1.data(), qkv1.data(), att1.data(), 1,
                          T, H, D);
  EXPECT_TRUE(std::equal(out1.begin(), out1.end(), out.begin() + out_slice));
  EXPECT_TRUE(std::equal(att1.begin(), att1.end(), att.begin() + att1.size()));
  EXPECT_TRUE(std::equal(dqkv1.begin(), dqkv1.end(), dqkv.begin() + qkv_slice));
}

}  // namespace
}  // namespace paraplan::kernels
