// cpu_llama_ops_test.cc: the ops Llama-family blocks add (RMS norm, SwiGLU,
// the rotary embedding, attention with grouped KV heads) on the CPU backend:
// hand-computed values, finite-difference gradients (cpu_gradient_check.h),
// the "backward accumulates" contract, and bf16 storage equal to the fp32 op
// on widened inputs with each output rounded once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_gradient_check.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace gradient_check;

class CpuLlamaOps : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops(1);
};

// ---- hand-computed values ----------------------------------------------------------------------

TEST_F(CpuLlamaOps, RmsNormByHand) {
  // Row [3, 4]: mean of squares 12.5, rstd = 1 / sqrt(12.5 + 0.5) = 1 / sqrt(13).
  const std::vector<float> x = {3, 4, -1, 1}, w = {1, 2};
  std::vector<float> y(4), rstd(2);
  ops->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), 2, 2, 0.5f);
  EXPECT_FLOAT_EQ(rstd[0], 1.0f / std::sqrt(13.0f));
  EXPECT_FLOAT_EQ(y[0], 3.0f / std::sqrt(13.0f));
  EXPECT_FLOAT_EQ(y[1], 8.0f / std::sqrt(13.0f));
  EXPECT_FLOAT_EQ(rstd[1], 1.0f / std::sqrt(1.5f));  // [-1, 1]: mean of squares 1
  EXPECT_FLOAT_EQ(y[3], 2.0f / std::sqrt(1.5f));
}

TEST_F(CpuLlamaOps, SwigluByHand) {
  // Rows [gate | up] of hidden 2: silu(0) = 0, silu(1) = 1 / (1 + e^-1), silu(-1) = -1 / (1 + e).
  const std::vector<float> gate_up = {0, 1, 5, 2, -1, 2, 3, 7};
  std::vector<float> out(4);
  ops->swiglu_forward(out.data(), gate_up.data(), 2, 2);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(out[2], -3.0 / (1.0 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(out[3], 2.0 * 7.0 / (1.0 + std::exp(-2.0)), 1e-5);
}

TEST_F(CpuLlamaOps, RotaryEmbeddingByHandInHuggingFaceRotateHalfConvention) {
  // One token row of H = 1 query, Hkv = 1 key and 1 value head, D = 4: pairs
  // (x0, x2) and (x1, x3) rotate, as Hugging Face's rotate_half pairs i with
  // i + D/2 (not the interleaved (x0, x1) of the original Llama code).
  // Pair 0 by 90 degrees, pair 1 by 0.
  const std::vector<float> cos = {0, 1}, sin = {1, 0};
  std::vector<float> qkv = {1, 2, 3, 4, /*k*/ 5, 6, 7, 8, /*v*/ 9, 10, 11, 12};
  ops->rope_forward(qkv.data(), cos.data(), sin.data(), 1, 1, 1, 1, 4);
  const std::vector<float> expected = {-3, 2, 1, 4, -7, 6, 5, 8, 9, 10, 11, 12};
  EXPECT_EQ(qkv, expected);
  ops->rope_backward(qkv.data(), cos.data(), sin.data(), 1, 1, 1, 1, 4);
  EXPECT_EQ(qkv, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
}

TEST_F(CpuLlamaOps, RotaryEmbeddingMatchesHuggingFaceFormulaAtEveryPosition) {
  // q_embed = q * cat(cos, cos) + rotate_half(q) * cat(sin, sin), rotate_half
  // (x) = cat(-x2, x1), per position of a [B, T] batch; positions restart per
  // sequence. H = 2 query heads, Hkv = 1 (grouped), D = 6.
  const int B = 2, T = 3, H = 2, Hkv = 1, D = 6, half = D / 2, width = (H + 2 * Hkv) * D;
  std::vector<float> cos(T * half), sin(T * half);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < half; i++) {
      const float angle = static_cast<float>(t) / std::pow(10000.0f, 2.0f * i / D);
      cos[t * half + i] = std::cos(angle);
      sin[t * half + i] = std::sin(angle);
    }
  const std::vector<float> original = random_vector(B * T * width, 61);
  std::vector<float> qkv = original;
  ops->rope_forward(qkv.data(), cos.data(), sin.data(), B, T, H, Hkv, D);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int head = 0; head < H + 2 * Hkv; head++)
        for (int d = 0; d < D; d++) {
          const size_t base = (static_cast<size_t>(b) * T + t) * width + head * D;
          const float x = original[base + d];
          if (head >= H + Hkv) {  // value heads are untouched
            EXPECT_EQ(qkv[base + d], x);
            continue;
          }
          const int i = d % half;
          const float rotated = d < half ? -original[base + d + half] : original[base + d - half];
          EXPECT_NEAR(qkv[base + d], x * cos[t * half + i] + rotated * sin[t * half + i], 1e-6)
              << b << " " << t << " " << head << " " << d;
        }
  std::vector<float> odd(1 * 1 * 3 * 3);
  EXPECT_THROW(ops->rope_forward(odd.data(), cos.data(), sin.data(), 1, 1, 1, 1, 3),
               std::invalid_argument);
}

// ---- finite differences ------------------------------------------------------------------------

TEST_F(CpuLlamaOps, RmsNormGradient) {
  const int rows = 3, channels = 5;
  std::vector<float> inp = random_vector(rows * channels, 11, -2.0f, 2.0f);
  std::vector<float> weight = random_vector(channels, 12, 0.5f, 1.5f);
  const std::vector<float> probe = random_vector(rows * channels, 14);
  std::vector<float> out(rows * channels), rstd(rows);
  auto objective = [&] {
    ops->rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), rows, channels, 1e-5f);
    return weighted_sum(out, probe);
  };
  objective();
  const std::vector<float> dinp_before = random_vector(inp.size(), 15);
  const std::vector<float> dweight_before = random_vector(weight.size(), 16);
  std::vector<float> dinp = dinp_before, dweight = dweight_before;
  auto backward = [&] {
    ops->rmsnorm_backward(dinp.data(), dweight.data(), probe.data(), inp.data(), weight.data(),
                          rstd.data(), rows, channels);
  };
  backward();
  expect_gradient_matches("rmsnorm dinp", inp, added(dinp, dinp_before), objective);
  expect_gradient_matches("rmsnorm dweight", weight, added(dweight, dweight_before), objective);
  objective();
  expect_backward_accumulates("rmsnorm", {&dinp, &dweight}, backward);
}

TEST_F(CpuLlamaOps, SwigluGradient) {
  const int rows = 3, hidden = 4;
  std::vector<float> gate_up = random_vector(rows * 2 * hidden, 21, -3.0f, 3.0f);
  const std::vector<float> probe = random_vector(rows * hidden, 22);
  std::vector<float> out(rows * hidden);
  auto objective = [&] {
    ops->swiglu_forward(out.data(), gate_up.data(), rows, hidden);
    return weighted_sum(out, probe);
  };
  const std::vector<float> before = random_vector(gate_up.size(), 23);
  std::vector<float> dgate_up = before;
  auto backward = [&] {
    ops->swiglu_backward(dgate_up.data(), gate_up.data(), probe.data(), rows, hidden,
                         GradientWrite::kAccumulate);
  };
  backward();
  expect_gradient_matches("swiglu dgate_up", gate_up, added(dgate_up, before), objective);
  expect_backward_accumulates("swiglu", {&dgate_up}, backward);
}

TEST_F(CpuLlamaOps, SwigluGradientStaysFiniteForSaturatedGates) {
  // silu'(x) -> 0 for x -> -inf and -> 1 for x -> +inf. Written as
  // s (1 + x e s), e = exp(-x) overflowed at x = -100 and gave -inf.
  const std::vector<float> gates = {-100.0f, -89.0f, 89.0f, 100.0f};
  const int hidden = static_cast<int>(gates.size());
  std::vector<float> gate_up = gates;
  gate_up.insert(gate_up.end(), hidden, 2.0f);  // up = 2
  const std::vector<float> dout(hidden, 1.0f);
  std::vector<float> dgate_up(2 * hidden, 0.0f);
  ops->swiglu_backward(dgate_up.data(), gate_up.data(), dout.data(), 1, hidden,
                       GradientWrite::kAccumulate);
  for (int i = 0; i < hidden; i++) {
    ASSERT_TRUE(std::isfinite(dgate_up[i])) << "gate " << gates[i];
    EXPECT_NEAR(dgate_up[i], gates[i] < 0 ? 0.0f : 2.0f, 1e-6) << "gate " << gates[i];
    EXPECT_NEAR(dgate_up[hidden + i], gates[i] < 0 ? 0.0f : gates[i], 1e-4) << "gate " << gates[i];
  }
}

TEST_F(CpuLlamaOps, RotaryEmbeddingGradientIsTheInverseRotation) {
  // rope_backward turns d(rotated qkv) into d(qkv) in place: applied to the
  // probe it gives the gradient of sum(rope(qkv) * probe).
  const int B = 2, T = 3, H = 2, Hkv = 1, D = 4, half = D / 2, width = (H + 2 * Hkv) * D;
  const std::vector<float> cos = random_vector(T * half, 31), sin = random_vector(T * half, 32);
  std::vector<float> qkv = random_vector(B * T * width, 33);
  const std::vector<float> probe = random_vector(qkv.size(), 34);
  auto objective = [&] {
    std::vector<float> rotated = qkv;
    ops->rope_forward(rotated.data(), cos.data(), sin.data(), B, T, H, Hkv, D);
    return weighted_sum(rotated, probe);
  };
  std::vector<float> gradient = probe;
  ops->rope_backward(gradient.data(), cos.data(), sin.data(), B, T, H, Hkv, D);
  expect_gradient_matches("rope dqkv", qkv, gradient, objective);
}

TEST_F(CpuLlamaOps, GroupedQueryAttentionGradient) {
  // 4 query heads over 2 KV heads, 70 tokens (two tiles): dK and dV collect
  // both query heads of their group.
  const int batch = 1, seq_len = 70, H = 4, Hkv = 2, D = 3, C = H * D;
  std::vector<float> qkv = random_vector(batch * seq_len * (H + 2 * Hkv) * D, 41, -1.5f, 1.5f);
  const std::vector<float> probe = random_vector(batch * seq_len * C, 42);
  std::vector<float> out(batch * seq_len * C), logsumexp(batch * H * seq_len);
  auto objective = [&] {
    ops->attention_forward(out.data(), logsumexp.data(), qkv.data(), batch, seq_len, H, Hkv, D);
    return weighted_sum(out, probe);
  };
  objective();
  std::vector<float> scratch(logsumexp.size());
  const std::vector<float> before = random_vector(qkv.size(), 43);
  std::vector<float> dqkv = before;
  ops->attention_backward(dqkv.data(), scratch.data(), probe.data(), qkv.data(), out.data(),
                          logsumexp.data(), batch, seq_len, H, Hkv, D, GradientWrite::kAccumulate);
  expect_gradient_matches("grouped attention dqkv", qkv, added(dqkv, before), objective);
}

// ---- bf16 storage: the fp32 op on widened inputs, each output rounded once -------------------

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  host_from_float(out.data(), x.data(), DType::kBFloat16, x.size());
  return out;
}
std::vector<float> to_float(const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  host_to_float(out.data(), x.data(), DType::kBFloat16, x.size());
  return out;
}

TEST(CpuLlamaOpsBfloat16, EachOpIsTheFloatOpRoundedOnce) {
  auto bf16 = make_cpu_ops(1, DType::kBFloat16);
  auto fp32 = make_cpu_ops(1);
  const int rows = 6, C = 8, hidden = 5;
  // Inputs rounded to bf16 first, so both ops see the same values.
  const std::vector<float> x = to_float(to_bf16(random_vector(rows * C, 1)));
  const std::vector<float> w = to_float(to_bf16(random_vector(C, 2)));
  const std::vector<float> dy = to_float(to_bf16(random_vector(rows * C, 3)));
  std::vector<uint16_t> y(rows * C), dx = to_bf16(random_vector(rows * C, 4)),
                                     dw = to_bf16(random_vector(C, 5));
  std::vector<float> y32(rows * C), rstd(rows), rstd32(rows), dx32 = to_float(dx),
                                                              dw32 = to_float(dw);
  bf16->rmsnorm_forward(y.data(), rstd.data(), to_bf16(x).data(), to_bf16(w).data(), rows, C,
                        1e-6f);
  fp32->rmsnorm_forward(y32.data(), rstd32.data(), x.data(), w.data(), rows, C, 1e-6f);
  EXPECT_EQ(y, to_bf16(y32));
  EXPECT_EQ(rstd, rstd32);
  bf16->rmsnorm_backward(dx.data(), dw.data(), to_bf16(dy).data(), to_bf16(x).data(),
                         to_bf16(w).data(), rstd.data(), rows, C);
  fp32->rmsnorm_backward(dx32.data(), dw32.data(), dy.data(), x.data(), w.data(), rstd32.data(),
                         rows, C);
  EXPECT_EQ(dx, to_bf16(dx32));
  EXPECT_EQ(dw, to_bf16(dw32));

  const std::vector<float> gate_up = to_float(to_bf16(random_vector(rows * 2 * hidden, 6, -3, 3)));
  const std::vector<float> dout = to_float(to_bf16(random_vector(rows * hidden, 7)));
  std::vector<uint16_t> out(rows * hidden), dgate_up = to_bf16(random_vector(gate_up.size(), 8));
  std::vector<float> out32(rows * hidden), dgate_up32 = to_float(dgate_up);
  bf16->swiglu_forward(out.data(), to_bf16(gate_up).data(), rows, hidden);
  fp32->swiglu_forward(out32.data(), gate_up.data(), rows, hidden);
  EXPECT_EQ(out, to_bf16(out32));
  bf16->swiglu_backward(dgate_up.data(), to_bf16(gate_up).data(), to_bf16(dout).data(), rows,
                        hidden, GradientWrite::kAccumulate);
  fp32->swiglu_backward(dgate_up32.data(), gate_up.data(), dout.data(), rows, hidden,
                        GradientWrite::kAccumulate);
  EXPECT_EQ(dgate_up, to_bf16(dgate_up32));

  const int T = 3, H = 4, Hkv = 2, D = 4;
  const std::vector<float> cos = random_vector(T * D / 2, 9), sin = random_vector(T * D / 2, 10);
  std::vector<float> qkv32 = to_float(to_bf16(random_vector(T * (H + 2 * Hkv) * D, 11)));
  std::vector<uint16_t> qkv = to_bf16(qkv32);
  bf16->rope_forward(qkv.data(), cos.data(), sin.data(), 1, T, H, Hkv, D);
  fp32->rope_forward(qkv32.data(), cos.data(), sin.data(), 1, T, H, Hkv, D);
  EXPECT_EQ(qkv, to_bf16(qkv32));
  qkv32 = to_float(qkv);
  bf16->rope_backward(qkv.data(), cos.data(), sin.data(), 1, T, H, Hkv, D);
  fp32->rope_backward(qkv32.data(), cos.data(), sin.data(), 1, T, H, Hkv, D);
  EXPECT_EQ(qkv, to_bf16(qkv32));

  // Grouped attention over the rotated qkv.
  const int n = T * H * D;
  std::vector<uint16_t> att(n), datt = to_bf16(random_vector(n, 12)),
                                dqkv = to_bf16(random_vector(qkv.size(), 13));
  std::vector<float> att32(n), lse(H * T), lse32(H * T), scratch(H * T), dqkv32 = to_float(dqkv);
  const std::vector<float> qkv_wide = to_float(qkv);
  bf16->attention_forward(att.data(), lse.data(), qkv.data(), 1, T, H, Hkv, D);
  fp32->attention_forward(att32.data(), lse32.data(), qkv_wide.data(), 1, T, H, Hkv, D);
  EXPECT_EQ(att, to_bf16(att32));
  EXPECT_EQ(lse, lse32);
  bf16->attention_backward(dqkv.data(), scratch.data(), datt.data(), qkv.data(), att.data(),
                           lse.data(), 1, T, H, Hkv, D, GradientWrite::kAccumulate);
  fp32->attention_backward(dqkv32.data(), scratch.data(), to_float(datt).data(), qkv_wide.data(),
                           to_float(att).data(), lse32.data(), 1, T, H, Hkv, D,
                           GradientWrite::kAccumulate);
  EXPECT_EQ(dqkv, to_bf16(dqkv32));
}

}  // namespace
}  // namespace paraplan::kernels
