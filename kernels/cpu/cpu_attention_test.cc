// cpu_attention_test.cc: the CPU flash attention (kernels/cpu/cpu_attention.cc)
// against a plain double-precision reference that materialises the
// probabilities, at sequence lengths that span several query blocks and key
// chunks, with a partial last tile: forward output, logsumexp, and the
// accumulated backward; large scores (the online softmax's rescaling);
// independence of the batch size and determinism, bit for bit.
// The small-T hand-computed and finite-difference checks are in
// cpu_ops_test.cc and cpu_ops_gradcheck_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
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
  std::vector<double> out, logsumexp, dqkv;
};

// Causal attention and its gradient in double, the textbook way (llm.c's
// loops), with Hkv KV heads: query head h reads KV head h / (H / Hkv).
Reference reference_attention(const std::vector<float>& qkv, const std::vector<float>& dout, int B,
                              int T, int H, int Hkv, int D) {
  const int C = H * D, C3 = C + 2 * Hkv * D, K = Hkv * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Reference ref{std::vector<double>(static_cast<size_t>(B) * T * C, 0.0),
                std::vector<double>(static_cast<size_t>(B) * H * T, 0.0),
                std::vector<double>(qkv.size(), 0.0)};
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < H; h++) {
      const int kv = h / (H / Hkv);
      auto q = [&](int t, int d) { return double{qkv[(size_t(b) * T + t) * C3 + h * D + d]}; };
      auto k = [&](int t, int d) { return double{qkv[(size_t(b) * T + t) * C3 + C + kv * D + d]}; };
      auto v = [&](int t, int d) {
        return double{qkv[(size_t(b) * T + t) * C3 + C + K + kv * D + d]};
      };
      auto dq = [&](int t, int d) -> double& {
        return ref.dqkv[(size_t(b) * T + t) * C3 + h * D + d];
      };
      auto dk = [&](int t, int d) -> double& {
        return ref.dqkv[(size_t(b) * T + t) * C3 + C + kv * D + d];
      };
      auto dv = [&](int t, int d) -> double& {
        return ref.dqkv[(size_t(b) * T + t) * C3 + C + K + kv * D + d];
      };
      for (int t = 0; t < T; t++) {
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
        ref.logsumexp[(size_t(b) * H + h) * T + t] = max_score + std::log(sum);
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
          for (int d = 0; d < D; d++) dv(j, d) += p[j] * dout[out_row + d];
        }
        for (int j = 0; j <= t; j++) {
          const double ds = p[j] * (dp[j] - weighted) * scale;
          for (int d = 0; d < D; d++) {
            dq(t, d) += ds * k(j, d);
            dk(j, d) += ds * q(t, d);
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

struct Outputs {
  std::vector<float> out, logsumexp, dqkv;
};

// Forward, then backward into dqkv_before (garbage in every output and in the
// scratch: every entry must be written, and scratch must not be read first).
Outputs run_attention(Ops& ops, const std::vector<float>& qkv, const std::vector<float>& dout,
                      const std::vector<float>& dqkv_before, int B, int T, int H, int D,
                      int Hkv = 0) {
  if (Hkv == 0) Hkv = H;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Outputs result{std::vector<float>(dout.size(), nan),
                 std::vector<float>(static_cast<size_t>(B) * H * T, nan), dqkv_before};
  ops.attention_forward(result.out.data(), result.logsumexp.data(), qkv.data(), B, T, H, Hkv, D);
  std::vector<float> scratch(result.logsumexp.size(), nan);
  ops.attention_backward(result.dqkv.data(), scratch.data(), dout.data(), qkv.data(),
                         result.out.data(), result.logsumexp.data(), B, T, H, Hkv, D,
                         GradientWrite::kAccumulate);
  return result;
}

// qkv_scale sets the size of the scaled scores: standard deviation qkv_scale^2 / 3.
// Tolerances scale with error_scale: a float score s carries ~|s| * 2^-24 of
// rounding, which exp passes on to the probabilities as a relative error.
void check_against_reference(int B, int T, int H, int D, float qkv_scale = 1.5f,
                             double error_scale = 1.0, int Hkv = 0) {
  if (Hkv == 0) Hkv = H;
  SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " H=" << H << " Hkv=" << Hkv
                                  << " D=" << D << " qkv_scale=" << qkv_scale);
  auto ops = make_cpu_ops();
  const int C = H * D;
  const auto qkv = pseudo_random(static_cast<size_t>(B) * T * (H + 2 * Hkv) * D, 1, qkv_scale);
  const auto dout = pseudo_random(static_cast<size_t>(B) * T * C, 2, 1.0f);
  const auto dqkv_before = pseudo_random(qkv.size(), 3, 1.0f);
  const Reference ref = reference_attention(qkv, dout, B, T, H, Hkv, D);
  const Outputs actual = run_attention(*ops, qkv, dout, dqkv_before, B, T, H, D, Hkv);
  // float rounding in the scores, exp_approx (~2 ulp) and the online
  // softmax's rescaling: a few 1e-7, relative to 1 + |expected|.
  expect_close(actual.out, ref.out, 2e-6 * error_scale, "out");
  expect_close(actual.logsumexp, ref.logsumexp, 2e-6 * error_scale, "logsumexp");
  std::vector<double> added(actual.dqkv.size());
  for (size_t i = 0; i < added.size(); i++) added[i] = double{actual.dqkv[i]} - dqkv_before[i];
  // Sums of up to T products, each carrying the probabilities' error.
  expect_close(added, ref.dqkv, 5e-6 * error_scale, "dqkv");
}

TEST(CpuAttention, MatchesReferenceAcrossTiles) {
  check_against_reference(2, 200, 2, 8);   // tiles of 64: 64, 64, 64, 8
  check_against_reference(1, 600, 1, 16);  // tiles of 128: 4 x 128, 88
  check_against_reference(1, 64, 3, 4);    // exactly one tile
  check_against_reference(1, 129, 2, 4);   // a last tile of one row
  check_against_reference(1, 1, 2, 5);     // one token
}

TEST(CpuAttention, GroupedKeyValueHeadsMatchReference) {
  // Query heads share KV heads in groups of 2, 3 and 6; dK and dV sum over
  // each group (the reference adds every query head's share in double).
  check_against_reference(2, 130, 4, 8, 1.5f, 1.0, 2);
  check_against_reference(1, 200, 6, 16, 1.5f, 1.0, 2);
  check_against_reference(1, 70, 6, 4, 1.5f, 1.0, 1);
}

// Grouped-query attention is multi-head attention with each KV head repeated
// for its query heads (Hugging Face's repeat_kv): the same outputs, and the
// grouped dK, dV are the sums of the repeated heads' gradients.
TEST(CpuAttention, GroupedHeadsEqualMultiHeadWithRepeatedKeyValues) {
  auto ops = make_cpu_ops();
  const int B = 2, T = 100, H = 4, Hkv = 2, D = 8, G = H / Hkv, C = H * D;
  const int grouped_width = (H + 2 * Hkv) * D, repeated_width = 3 * C;
  const auto qkv = pseudo_random(static_cast<size_t>(B) * T * grouped_width, 7, 1.5f);
  const auto dout = pseudo_random(static_cast<size_t>(B) * T * C, 8, 1.0f);
  std::vector<float> repeated(static_cast<size_t>(B) * T * repeated_width);
  for (size_t row = 0; row < static_cast<size_t>(B) * T; row++) {
    const float* in = qkv.data() + row * grouped_width;
    float* out = repeated.data() + row * repeated_width;
    std::copy(in, in + C, out);  // queries
    for (int h = 0; h < H; h++) {
      for (int d = 0; d < D; d++) {
        out[C + h * D + d] = in[C + (h / G) * D + d];                // K of the group
        out[2 * C + h * D + d] = in[C + Hkv * D + (h / G) * D + d];  // V of the group
      }
    }
  }
  const Outputs grouped =
      run_attention(*ops, qkv, dout, std::vector<float>(qkv.size()), B, T, H, D, Hkv);
  const Outputs multi_head =
      run_attention(*ops, repeated, dout, std::vector<float>(repeated.size()), B, T, H, D);
  EXPECT_EQ(grouped.out, multi_head.out);
  EXPECT_EQ(grouped.logsumexp, multi_head.logsumexp);
  for (size_t row = 0; row < static_cast<size_t>(B) * T; row++) {
    const float* g = grouped.dqkv.data() + row * grouped_width;
    const float* m = multi_head.dqkv.data() + row * repeated_width;
    for (int i = 0; i < C; i++) ASSERT_EQ(g[i], m[i]) << "dq row " << row;
    for (int kv = 0; kv < Hkv; kv++) {
      for (int d = 0; d < D; d++) {
        double key_sum = 0, value_sum = 0;
        for (int h = kv * G; h < (kv + 1) * G; h++) {
          key_sum += m[C + h * D + d];
          value_sum += m[2 * C + h * D + d];
        }
        EXPECT_NEAR(g[C + kv * D + d], key_sum, 1e-5 * (1 + std::fabs(key_sum)));
        EXPECT_NEAR(g[C + Hkv * D + kv * D + d], value_sum, 1e-5 * (1 + std::fabs(value_sum)));
      }
    }
  }
}

TEST(CpuAttention, KeyValueHeadsThatDoNotDivideTheHeadsAreRefused) {
  auto ops = make_cpu_ops();
  std::vector<float> qkv(7 * 4 * 2, 0.0f), out(3 * 4 * 2), logsumexp(3 * 2);
  EXPECT_THROW(ops->attention_forward(out.data(), logsumexp.data(), qkv.data(), 1, 2, 3, 2, 4),
               std::invalid_argument);
}

TEST(CpuAttention, MatchesReferenceWithLargeScores) {
  // Scores up to ~50 whose row maximum moves from chunk to chunk (64, 64,
  // 22 keys): the online softmax rescales earlier chunks by exp(old max - new
  // max). Their float rounding (~50 * 2^-24 = 3e-6) is ten times that of the
  // scores above.
  check_against_reference(1, 150, 2, 16, 6.0f, 10.0);
}

TEST(CpuAttention, BatchElementsAreIndependentAndDeterministicBitwise) {
  // Batch 1 of a B = 3 call gives bitwise the B = 1 result on that slice, and
  // a second call gives bitwise the first.
  auto ops = make_cpu_ops();
  const int B = 3, T = 130, H = 2, D = 8, C = H * D;
  const auto qkv = pseudo_random(static_cast<size_t>(B) * T * 3 * C, 4, 1.0f);
  const auto dout = pseudo_random(static_cast<size_t>(B) * T * C, 5, 1.0f);
  const Outputs whole = run_attention(*ops, qkv, dout, std::vector<float>(qkv.size()), B, T, H, D);
  const Outputs again = run_attention(*ops, qkv, dout, std::vector<float>(qkv.size()), B, T, H, D);
  EXPECT_EQ(whole.out, again.out);
  EXPECT_EQ(whole.logsumexp, again.logsumexp);
  EXPECT_EQ(whole.dqkv, again.dqkv);

  const size_t qkv_slice = static_cast<size_t>(T) * 3 * C, out_slice = static_cast<size_t>(T) * C;
  const size_t row_slice = static_cast<size_t>(H) * T;
  const std::vector<float> qkv1(qkv.begin() + qkv_slice, qkv.begin() + 2 * qkv_slice);
  const std::vector<float> dout1(dout.begin() + out_slice, dout.begin() + 2 * out_slice);
  const Outputs one = run_attention(*ops, qkv1, dout1, std::vector<float>(qkv_slice), 1, T, H, D);
  EXPECT_TRUE(std::equal(one.out.begin(), one.out.end(), whole.out.begin() + out_slice));
  EXPECT_TRUE(
      std::equal(one.logsumexp.begin(), one.logsumexp.end(), whole.logsumexp.begin() + row_slice));
  EXPECT_TRUE(std::equal(one.dqkv.begin(), one.dqkv.end(), whole.dqkv.begin() + qkv_slice));
}

}  // namespace
}  // namespace paraplan::kernels
