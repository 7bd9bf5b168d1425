// cpu_bfloat16_ops_test.cc: bf16 storage on the CPU backend (kernels/ops.h's
// mixed precision): exact round-to-nearest-even conversions, every op equal
// bitwise to the fp32 op on the widened inputs with each output rounded once
// (accumulating outputs included), the token embedding's one rounding per
// row, and AdamW's fp32 master weights keeping updates the bf16 copy cannot.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using Bits = std::vector<uint16_t>;

// n bf16 values from an LCG in [-amplitude, amplitude).
Bits random_bf16(size_t n, uint32_t seed, float amplitude = 1.0f) {
  Bits values(n);
  uint32_t state = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    const float x = amplitude * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
    values[i] = bfloat16_from_float(x);
  }
  return values;
}

std::vector<float> widen(const Bits& x) {
  std::vector<float> out(x.size());
  host_to_float(out.data(), x.data(), DType::kBFloat16, x.size());
  return out;
}

Bits narrow(const std::vector<float>& x) {
  Bits out(x.size());
  host_from_float(out.data(), x.data(), DType::kBFloat16, x.size());
  return out;
}

class Bfloat16OpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> bf16 = make_cpu_ops(1, DType::kBFloat16);
  std::unique_ptr<Ops> fp32 = make_cpu_ops(1);
};

// ---- conversions ----------------------------------------------------------------------------

TEST(Bfloat16Conversion, RoundsToNearestTiesToEven) {
  // bf16 has 7 fraction bits: neighbours of 1 are 1 - 2^-8 and 1 + 2^-7.
  EXPECT_EQ(round_to_bfloat16(1.0f + 0x1p-8f), 1.0f);                       // tie, to even (down)
  EXPECT_EQ(round_to_bfloat16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);         // tie, to even (up)
  EXPECT_EQ(round_to_bfloat16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);  // above the tie
  EXPECT_EQ(round_to_bfloat16(-2.5f), -2.5f);                               // exact values stay
  EXPECT_EQ(bfloat16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(bfloat16_from_float(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bfloat16_from_float(std::numeric_limits<float>::max()), 0x7f80);  // overflows
  EXPECT_TRUE(std::isnan(round_to_bfloat16(std::nanf(""))));
  // A NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_TRUE(
      std::isnan(float_from_bfloat16(bfloat16_from_float(std::bit_cast<float>(0x7f800001u)))));
}

TEST_F(Bfloat16OpsTest, StorageDtypeAndConvertOps) {
  EXPECT_EQ(bf16->storage_dtype(), DType::kBFloat16);
  EXPECT_EQ(bf16->storage_bytes(10), 20u);
  EXPECT_EQ(fp32->storage_bytes(10), 40u);
  const std::vector<float> values = {1.0f + 0x1p-8f, -3.0f, 1e-3f};
  Bits stored(values.size());
  bf16->convert_from_float(stored.data(), values.data(), values.size());
  EXPECT_EQ(stored, narrow(values));
  std::vector<float> back(values.size());
  bf16->convert_to_float(back.data(), stored.data(), stored.size());
  EXPECT_EQ(back, widen(stored));
}

// ---- each op: the fp32 op on widened inputs, each output rounded once -------------------------

TEST_F(Bfloat16OpsTest, LinearForwardAndAccumulatingBackward) {
  const int rows = 5, in = 7, out = 3;
  const Bits x = random_bf16(rows * in, 1), w = random_bf16(out * in, 2), b = random_bf16(out, 3);
  const Bits dy = random_bf16(rows * out, 4);
  Bits y(rows * out), dx = random_bf16(rows * in, 5), dw = random_bf16(out * in, 6),
                      db = random_bf16(out, 7);
  std::vector<float> y32(rows * out), dx32 = widen(dx), dw32 = widen(dw), db32 = widen(db);
  bf16->linear_forward(y.data(), x.data(), w.data(), b.data(), rows, in, out);
  fp32->linear_forward(y32.data(), widen(x).data(), widen(w).data(), widen(b).data(), rows, in,
                       out);
  EXPECT_EQ(y, narrow(y32));
  bf16->linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), rows, in,
                        out, GradientWrite::kAccumulate);
  fp32->linear_backward(dx32.data(), dw32.data(), db32.data(), widen(dy).data(), widen(x).data(),
                        widen(w).data(), rows, in, out, GradientWrite::kAccumulate);
  EXPECT_EQ(dx, narrow(dx32));
  EXPECT_EQ(dw, narrow(dw32));
  EXPECT_EQ(db, narrow(db32));
}

TEST_F(Bfloat16OpsTest, LayerNormAttentionGeluAndLoss) {
  const int rows = 6, C = 8;
  const Bits x = random_bf16(rows * C, 11), w = random_bf16(C, 12), b = random_bf16(C, 13);
  Bits y(rows * C);
  std::vector<float> mean(rows), rstd(rows), mean32(rows), rstd32(rows), y32(rows * C);
  bf16->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C,
                          1e-5f);
  fp32->layernorm_forward(y32.data(), mean32.data(), rstd32.data(), widen(x).data(),
                          widen(w).data(), widen(b).data(), rows, C, 1e-5f);
  EXPECT_EQ(y, narrow(y32));
  EXPECT_EQ(mean, mean32);  // statistics stay fp32
  EXPECT_EQ(rstd, rstd32);

  // Attention: B=1, T=3, H=2, D=4 over qkv [T, 3 * H * D].
  const int T = 3, H = 2, D = 4, n = T * H * D;
  const Bits qkv = random_bf16(3 * n, 14), dout = random_bf16(n, 15);
  Bits out(n), dqkv = random_bf16(3 * n, 16);
  std::vector<float> lse(H * T), lse32(H * T), out32(n), dqkv32 = widen(dqkv), scratch(H * T);
  bf16->attention_forward(out.data(), lse.data(), qkv.data(), 1, T, H, H, D);
  fp32->attention_forward(out32.data(), lse32.data(), widen(qkv).data(), 1, T, H, H, D);
  EXPECT_EQ(out, narrow(out32));
  EXPECT_EQ(lse, lse32);
  bf16->attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                           lse.data(), 1, T, H, H, D, GradientWrite::kAccumulate);
  fp32->attention_backward(dqkv32.data(), scratch.data(), widen(dout).data(), widen(qkv).data(),
                           widen(out).data(), lse32.data(), 1, T, H, H, D,
                           GradientWrite::kAccumulate);
  EXPECT_EQ(dqkv, narrow(dqkv32));

  const Bits g_in = random_bf16(20, 17, 4.0f), g_dout = random_bf16(20, 18);
  Bits g_out(20), g_din = random_bf16(20, 19);
  std::vector<float> g_out32(20), g_din32 = widen(g_din);
  bf16->gelu_forward(g_out.data(), g_in.data(), 20);
  fp32->gelu_forward(g_out32.data(), widen(g_in).data(), 20);
  EXPECT_EQ(g_out, narrow(g_out32));
  bf16->gelu_backward(g_din.data(), g_in.data(), g_dout.data(), 20, GradientWrite::kAccumulate);
  fp32->gelu_backward(g_din32.data(), widen(g_in).data(), widen(g_dout).data(), 20,
                      GradientWrite::kAccumulate);
  EXPECT_EQ(g_din, narrow(g_din32));

  const int V = 9;
  Bits logits = random_bf16(rows * V, 20, 3.0f);
  std::vector<float> logits32 = widen(logits), losses(rows), losses32(rows);
  const std::vector<int32_t> targets = {0, 8, 3, 3, 5, 1};
  bf16->softmax_cross_entropy(losses.data(), logits.data(), logits.data(), targets.data(), rows, V,
                              0.5f, nullptr);
  fp32->softmax_cross_entropy(losses32.data(), logits32.data(), logits32.data(), targets.data(),
                              rows, V, 0.5f, nullptr);
  EXPECT_EQ(losses, losses32);          // from the widened logits, in fp32
  EXPECT_EQ(logits, narrow(logits32));  // the gradient, in place, rounded once
}

TEST_F(Bfloat16OpsTest, ElementwiseOpsRoundOnce) {
  const Bits a = random_bf16(64, 21), b = random_bf16(64, 22, 0.01f);
  Bits sum(64), accumulated = a, scaled = a;
  bf16->residual_forward(sum.data(), a.data(), b.data(), 64);
  bf16->accumulate(accumulated.data(), b.data(), 64);
  bf16->scale(scaled.data(), 0.3f, 64);
  for (size_t i = 0; i < 64; i++) {
    const float expected = round_to_bfloat16(float_from_bfloat16(a[i]) + float_from_bfloat16(b[i]));
    EXPECT_EQ(float_from_bfloat16(sum[i]), expected) << i;
    EXPECT_EQ(float_from_bfloat16(accumulated[i]), expected) << i;
    EXPECT_EQ(float_from_bfloat16(scaled[i]), round_to_bfloat16(float_from_bfloat16(a[i]) * 0.3f));
  }
  double squares = 0;
  for (uint16_t v : a) squares += double(float_from_bfloat16(v)) * float_from_bfloat16(v);
  EXPECT_EQ(bf16->sum_of_squares(a.data(), a.size()), squares);
}

TEST_F(Bfloat16OpsTest, TokenEmbeddingBackwardRoundsEachRowOnce) {
  // Token 1 appears three times, each gradient 2^-8 onto a row holding 1:
  // summed first (3 * 2^-8) and added once, it lands on 1 + 2^-6 (the tie
  // rounds to even, up). Rounding after each addition would stay at 1, as
  // 1 + 2^-8 is itself a tie rounding down.
  const int C = 2, V = 3;
  const std::vector<int32_t> tokens = {1, 0, 1, 1};
  Bits dwte = narrow({0, 0, 1, 1, 0, 0});
  Bits dout = narrow({0x1p-8f, 0x1p-8f, 0.5f, 0.25f, 0x1p-8f, 0x1p-8f, 0x1p-8f, 0x1p-8f});
  bf16->token_embedding_backward(dwte.data(), dout.data(), tokens.data(), 4, 0, V, C);
  EXPECT_EQ(widen(dwte), (std::vector<float>{0.5f, 0.25f, 1.0f + 0x1p-6f, 1.0f + 0x1p-6f, 0, 0}));

  // Bitwise the fp32 op on the widened values, rounded once (nonzero start,
  // repeats, a run of several segments, and a token outside this shard's range).
  std::vector<int32_t> many = {2, 5, 2, 0, 2, 7, 0};
  for (int i = 0; i < 3 * kTokenEmbeddingSegment + 5; i++) many.push_back(i % 4 == 0 ? 0 : 2);
  const int n = static_cast<int>(many.size());
  const Bits start = random_bf16(V * C, 24), gradients = random_bf16(many.size() * C, 25);
  Bits ours = start;
  std::vector<float> reference = widen(start);
  bf16->token_embedding_backward(ours.data(), gradients.data(), many.data(), n, 0, V, C);
  fp32->token_embedding_backward(reference.data(), widen(gradients).data(), many.data(), n, 0, V,
                                 C);
  EXPECT_EQ(ours, narrow(reference));

  Bits rows(4 * C);
  const Bits wte = random_bf16(V * C, 23);
  bf16->token_embedding_forward(rows.data(), tokens.data(), wte.data(), 4, 0, V, C);
  for (int i = 0; i < 4; i++)
    for (int c = 0; c < C; c++) EXPECT_EQ(rows[i * C + c], wte[tokens[i] * C + c]);
}

TEST_F(Bfloat16OpsTest, AdamWKeepsUpdatesInFp32MasterWeights) {
  // Each step moves the weight by ~lr = 1e-4, far below half a bf16 ulp of 1
  // (2^-8 = 3.9e-3): a bf16 weight updated in place would never move. The
  // fp32 master accumulates the steps, and the bf16 copy follows it.
  const size_t n = 4;
  std::vector<float> master(n, 1.0f), m(n, 0), v(n, 0);
  Bits params = narrow(master);
  const Bits grads = narrow({1, 1, 1, 1});
  std::vector<float> reference(n, 1.0f), m_ref(n, 0), v_ref(n, 0);
  for (int step = 1; step <= 100; ++step) {
    const AdamWStep hyperparameters{
        .learning_rate = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .step = step};
    bf16->adamw(master.data(), params.data(), grads.data(), m.data(), v.data(), n, hyperparameters);
    fp32->adamw(reference.data(), reference.data(), widen(grads).data(), m_ref.data(), v_ref.data(),
                n, hyperparameters);
  }
  EXPECT_EQ(master, reference);  // the master update is fp32 AdamW's
  EXPECT_NEAR(master[0], 1.0f - 100 * 1e-4f, 1e-5f);
  EXPECT_EQ(params, narrow(master));  // the storage copy: master rounded
  EXPECT_LT(widen(params)[0], 1.0f);
}

}  // namespace
}  // namespace paraplan::kernels
