// cpu_ops_test.cc: hand-computed cases and contract checks for the CPU backend
// of kernels/ops.h: memory ops, embedding lookups (including a vocab range),
// layer norm, linear, GELU, attention (T = 1, equal keys, causal mask), cross-entropy
// (uniform logits, stability, aliasing), bitwise determinism of a small forward +
// backward pass, and the OpenBLAS thread count of make_cpu_ops(num_threads).
// The optimizer's ops: cpu_optimizer_test.cc.
// Gradients are checked against finite differences in cpu_ops_gradcheck_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops_test_support.h"
#include "kernels/cpu/openblas_library.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

// ---- memory -----------------------------------------------------------------------------

TEST_F(CpuOpsTest, BackendIsCpu) {
  EXPECT_EQ(ops->backend(), Backend::kCpu);
  EXPECT_STREQ(backend_name(ops->backend()), "cpu");
}

TEST_F(CpuOpsTest, AllocateIsAlignedAndWritable) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{1000}}) {
    void* pointer = ops->allocate(bytes);
    ASSERT_NE(pointer, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pointer) % 64, 0u) << bytes;
    std::memset(pointer, 0xAB, bytes);
    ops->deallocate(pointer);
  }
  ops->deallocate(nullptr);  // like free(nullptr)
}

TEST_F(CpuOpsTest, AllocateFailureThrows) {
  EXPECT_THROW(ops->allocate(SIZE_MAX - 8), std::bad_alloc);  // overflows when rounded up
  EXPECT_THROW(ops->allocate(SIZE_MAX / 2), std::bad_alloc);  // more than any machine has
}

TEST_F(CpuOpsTest, CopiesAndFillZero) {
  const std::vector<float> source = {1.0f, -2.0f, 3.5f, 4.0f};
  const size_t bytes = source.size() * sizeof(float);
  float* device_a = static_cast<float*>(ops->allocate(bytes));
  float* device_b = static_cast<float*>(ops->allocate(bytes));
  ops->copy_from_host(device_a, source.data(), bytes);
  ops->copy(device_b, device_a, bytes);
  std::vector<float> back(source.size());
  ops->copy_to_host(back.data(), device_b, bytes);
  ops->synchronize();
  EXPECT_EQ(back, source);
  ops->zero_bytes(device_b, source.size() * sizeof(float));
  ops->copy_to_host(back.data(), device_b, bytes);
  EXPECT_EQ(back, std::vector<float>(source.size(), 0.0f));
  ops->copy(nullptr, nullptr, 0);  // zero bytes is a no-op, even with null pointers
  ops->deallocate(device_a);
  ops->deallocate(device_b);
}

// ---- embeddings ---------------------------------------------------------------------------

TEST_F(CpuOpsTest, TokenEmbeddingLookupWithVocabRange) {
  const int channels = 2, vocab_start = 10, vocab_local = 3;  // owns tokens 10, 11, 12
  const std::vector<float> wte = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> tokens = {11, 9, 12, 13, 10, 11, -1};
  const int num_tokens = static_cast<int>(tokens.size());
  std::vector<float> out(num_tokens * channels, 99.0f);  // out-of-range rows must be zeroed
  ops->token_embedding_forward(out.data(), tokens.data(), wte.data(), num_tokens, vocab_start,
                               vocab_local, channels);
  EXPECT_EQ(out, (std::vector<float>{3, 4, 0, 0, 5, 6, 0, 0, 1, 2, 3, 4, 0, 0}));

  // Guard rows before and after dwte catch any write for an out-of-range token.
  std::vector<float> dwte_with_guards((vocab_local + 2) * channels, 0.0f);
  float* dwte = dwte_with_guards.data() + channels;
  std::vector<float> dout(num_tokens * channels);
  for (size_t i = 0; i < dout.size(); i++) dout[i] = static_cast<float>(i + 1);
  ops->token_embedding_backward(dwte, dout.data(), tokens.data(), num_tokens, vocab_start,
                                vocab_local, channels);
  // token 10 <- row 4; token 11 <- rows 0 and 5; token 12 <- row 2.
  EXPECT_EQ(dwte_with_guards, (std::vector<float>{0, 0, 9, 10, 1 + 11, 2 + 12, 5, 6, 0, 0}));
}

TEST_F(CpuOpsTest, TokenEmbeddingBackwardSumsLaterSegmentsOnTheirOwn) {
  // Rows 0 and 1 start at 2^24, where adding 1 is a tie that rounds back to
  // 2^24. Token 0 occurs 100 times: its first 32 ones are added one by one and
  // vanish; the later segments (32, 32 and 4 ones) are summed on their own,
  // exactly, and then added: 2^24 + 68. Token 1 occurs 32 times, one segment:
  // added one by one, it stays 2^24. Token 7 is another shard's.
  std::vector<int32_t> tokens;
  for (int i = 0; i < 100; i++) {
    tokens.push_back(0);
    if (i < 32) tokens.push_back(1);
    if (i % 10 == 0) tokens.push_back(7);
  }
  const std::vector<float> dout(tokens.size(), 1.0f);
  std::vector<float> dwte = {0x1p24f, 0x1p24f, 5.0f};
  ops->token_embedding_backward(dwte.data(), dout.data(), tokens.data(),
                                static_cast<int>(tokens.size()), 0, 3, 1);
  EXPECT_EQ(dwte, (std::vector<float>{0x1p24f + 68, 0x1p24f, 5.0f}));
}

TEST_F(CpuOpsTest, TokenEmbeddingBackwardFollowsTheSegmentOrderOfOpsH) {
  // Runs of 1 to ~700 occurrences (a segment's length, one more, several),
  // against the order spelled out here, bitwise.
  const int num_tokens = 2000, vocab = 13, channels = 5, segment = kTokenEmbeddingSegment;
  std::vector<int32_t> tokens(num_tokens);
  uint32_t state = 7;
  for (int i = 0; i < num_tokens; i++) {
    state = state * 1664525u + 1013904223u;
    const uint32_t draw = state >> 16;  // 0 .. 65535, heavily skewed to token 0 and 1
    tokens[i] = draw < 23000 ? 0 : draw < 38000 ? 1 : 2 + static_cast<int32_t>(draw % 10);
  }
  tokens[5] = 12;  // and a token seen once
  const std::vector<float> dout = pseudo_random(static_cast<size_t>(num_tokens) * channels, 3);
  const std::vector<float> start = pseudo_random(static_cast<size_t>(vocab) * channels, 4);
  std::vector<float> dwte = start;
  ops->token_embedding_backward(dwte.data(), dout.data(), tokens.data(), num_tokens, 0, vocab,
                                channels);
  std::vector<float> expected = start;
  for (int row = 0; row < vocab; row++) {
    for (int c = 0; c < channels; c++) {
      float sum = start[row * channels + c], later = 0;
      int k = 0;
      for (int i = 0; i < num_tokens; i++) {
        if (tokens[i] != row) continue;
        const float d = dout[static_cast<size_t>(i) * channels + c];
        if (k < segment) {
          sum += d;
        } else {
          if (k % segment == 0) later = 0;
          later += d;
          if (k % segment == segment - 1) sum += later;
        }
        k++;
      }
      if (k > segment && k % segment != 0) sum += later;  // the last, partial segment
      expected[row * channels + c] = sum;
    }
  }
  EXPECT_EQ(dwte, expected);
}

TEST_F(CpuOpsTest, PositionEmbeddingAddsAndSumsOverBatch) {
  const int batch = 2, seq_len = 2, channels = 2;
  const std::vector<float> wpe = {10, 20, 30, 40};
  std::vector<float> out = {1, 2, 3, 4, 5, 6, 7, 8};
  ops->position_embedding_forward(out.data(), wpe.data(), batch, seq_len, channels);
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33, 44, 15, 26, 37, 48}));
  std::vector<float> dwpe = {100, 100, 100, 100};
  const std::vector<float> dout = {1, 2, 3, 4, 5, 6, 7, 8};
  ops->position_embedding_backward(dwpe.data(), dout.data(), batch, seq_len, channels);
  EXPECT_EQ(dwpe, (std::vector<float>{106, 108, 110, 112}));
}

// ---- layer norm -----------------------------------------------------------------------------

TEST_F(CpuOpsTest, LayerNormKnownValues) {
  // Row [1, 2, 3]: mean 2, variance 2/3, rstd = 1 / sqrt(2/3 + 1e-5) = 1.2247357.
  const std::vector<float> inp = {1, 2, 3, 1, 2, 3};
  // Row 0 with unit weight and zero bias; row 1 is the same row, so its
  // affine part is checked with the second weight/bias call below.
  const std::vector<float> ones = {1, 1, 1}, zeros = {0, 0, 0};
  std::vector<float> out(6), mean(2), rstd(2);
  ops->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), ones.data(),
                         zeros.data(), 2, 3, 1e-5f);
  const float r = 1.2247357f;
  EXPECT_NEAR(mean[0], 2.0f, kTolerance);
  EXPECT_NEAR(rstd[0], r, kTolerance);
  EXPECT_NEAR(out[0], -r, kTolerance);
  EXPECT_NEAR(out[1], 0.0f, kTolerance);
  EXPECT_NEAR(out[2], r, kTolerance);

  const std::vector<float> weight = {2, 3, 4}, bias = {1, -1, 0.5f};
  ops->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), 2, 3, 1e-5f);
  EXPECT_NEAR(out[3], -2 * r + 1, kTolerance);
  EXPECT_NEAR(out[4], -1.0f, kTolerance);
  EXPECT_NEAR(out[5], 4 * r + 0.5f, 4 * kTolerance);
}

// ---- linear ----------------------------------------------------------------------------------

TEST_F(CpuOpsTest, LinearTwoByTwo) {
  const std::vector<float> inp = {1, 2, 3, 4};     // [rows = 2, in = 2]
  const std::vector<float> weight = {5, 6, 7, 8};  // [out = 2, in = 2]
  const std::vector<float> bias = {1, -1};
  std::vector<float> out(4, 99.0f);
  ops->linear_forward(out.data(), inp.data(), weight.data(), bias.data(), 2, 2, 2);
  // [1*5 + 2*6 + 1, 1*7 + 2*8 - 1; 3*5 + 4*6 + 1, 3*7 + 4*8 - 1]
  EXPECT_EQ(out, (std::vector<float>{18, 22, 40, 52}));
  ops->linear_forward(out.data(), inp.data(), weight.data(), nullptr, 2, 2, 2);
  EXPECT_EQ(out, (std::vector<float>{17, 23, 39, 53}));

  const std::vector<float> dout = {1, 0, 1, 2};
  std::vector<float> dinp = {1, 1, 1, 1}, dweight = {0, 0, 0, 0}, dbias = {10, 10};
  ops->linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                       weight.data(), 2, 2, 2, GradientWrite::kAccumulate);
  // dinp += dout @ W = [5, 6; 1*5 + 2*7, 1*6 + 2*8]
  EXPECT_EQ(dinp, (std::vector<float>{6, 7, 20, 23}));
  // dweight += dout^T @ inp = [1*1 + 1*3, 1*2 + 1*4; 2*3, 2*4]
  EXPECT_EQ(dweight, (std::vector<float>{4, 6, 6, 8}));
  EXPECT_EQ(dbias, (std::vector<float>{12, 12}));
}

// ---- elementwise ---------------------------------------------------------------------------

TEST_F(CpuOpsTest, GeluKnownValues) {
  const std::vector<float> inp = {0.0f, 1.0f, -1.0f};
  std::vector<float> out(3);
  ops->gelu_forward(out.data(), inp.data(), 3);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 0.8411920f, kTolerance);
  EXPECT_NEAR(out[2], -0.1588080f, kTolerance);
  // gelu'(0) = 0.5, accumulated onto 1.
  std::vector<float> dinp = {1.0f, 0.0f, 0.0f};
  const std::vector<float> dout = {1.0f, 0.0f, 0.0f};
  ops->gelu_backward(dinp.data(), inp.data(), dout.data(), 3, GradientWrite::kAccumulate);
  EXPECT_NEAR(dinp[0], 1.5f, kTolerance);
}

// The MLP's linear + GELU ops (the CPU runs them as their two ops; the CUDA
// backend fuses them): bitwise the ops one by one, the backward's GELU run
// in place over the input gradient, in both storage dtypes.
TEST(CpuGeluGemm, IsTheTwoOpsBitwiseInBothDtypes) {
  const int rows = 5, in = 6, hidden = 8, out = 3;
  auto values = [](size_t n, float step) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = std::sin(step * static_cast<float>(i + 1)) * 1.5f;
    return v;
  };
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    std::unique_ptr<Ops> ops = make_cpu_ops(1, dtype);
    const size_t e = dtype_bytes(dtype);
    auto stored = [&](const std::vector<float>& v) {
      std::vector<unsigned char> bytes(v.size() * e);
      host_from_float(bytes.data(), v.data(), dtype, v.size());
      return bytes;
    };
    const auto inp = stored(values(rows * in, 0.3f)), up = stored(values(hidden * in, 0.7f));
    const auto bias = stored(values(hidden, 1.1f)), down = stored(values(out * hidden, 0.9f));
    const auto dout = stored(values(rows * out, 0.5f));
    const size_t n = static_cast<size_t>(rows) * hidden;
    std::vector<unsigned char> pre(n * e), gelu(n * e), dpre(n * e, 0xff);
    ops->linear_gelu_forward(pre.data(), gelu.data(), inp.data(), up.data(), bias.data(), rows, in,
                             hidden);
    ops->linear_backward_gelu(dpre.data(), dout.data(), down.data(), pre.data(), rows, hidden, out);
    std::vector<unsigned char> pre2(n * e), gelu2(n * e), dgelu(n * e), dpre2(n * e);
    ops->linear_forward(pre2.data(), inp.data(), up.data(), bias.data(), rows, in, hidden);
    ops->gelu_forward(gelu2.data(), pre2.data(), n);
    ops->linear_backward(dgelu.data(), nullptr, nullptr, dout.data(), nullptr, down.data(), rows,
                         hidden, out, GradientWrite::kOverwrite);
    ops->gelu_backward(dpre2.data(), pre2.data(), dgelu.data(), n, GradientWrite::kOverwrite);
    EXPECT_EQ(pre, pre2) << dtype_name(dtype);
    EXPECT_EQ(gelu, gelu2) << dtype_name(dtype);
    EXPECT_EQ(dpre, dpre2) << dtype_name(dtype);
  }
}

TEST_F(CpuOpsTest, ResidualAccumulateScale) {
  const std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  std::vector<float> out(3);
  ops->residual_forward(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
  ops->accumulate(out.data(), a.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{12, 24, 36}));
  ops->scale(out.data(), 0.5f, 3);
  EXPECT_EQ(out, (std::vector<float>{6, 12, 18}));
}

// ---- attention -------------------------------------------------------------------------------

TEST_F(CpuOpsTest, AttentionSingleTokenReturnsValue) {
  const int batch = 2, num_heads = 2, head_dim = 3, channels = num_heads * head_dim;
  const std::vector<float> qkv = pseudo_random(batch * 3 * channels, 1);
  std::vector<float> out(batch * channels), logsumexp(batch * num_heads);
  ops->attention_forward(out.data(), logsumexp.data(), qkv.data(), batch, 1, num_heads, num_heads,
                         head_dim);
  for (int b = 0; b < batch; b++) {
    for (int c = 0; c < channels; c++) {
      // A single token attends only to itself: out = v.
      EXPECT_FLOAT_EQ(out[b * channels + c], qkv[b * 3 * channels + 2 * channels + c]);
    }
    // One score: logsumexp = q . k / sqrt(D).
    for (int h = 0; h < num_heads; h++) {
      const float* q = &qkv[b * 3 * channels + h * head_dim];
      const float* k = q + channels;
      const float score = (q[0] * k[0] + q[1] * k[1] + q[2] * k[2]) / std::sqrt(3.0f);
      EXPECT_NEAR(logsumexp[b * num_heads + h], score, kTolerance);
    }
  }
}

TEST_F(CpuOpsTest, AttentionWithEqualKeysAveragesPastValues) {
  // All keys equal: token t attends uniformly (1 / (t + 1)) to values 0..t.
  const int seq_len = 3, head_dim = 2, stride = 3 * head_dim;
  std::vector<float> qkv = pseudo_random(seq_len * stride, 2);
  const std::vector<float> values = {1, 2, 4, 8, 16, 32};
  for (int t = 0; t < seq_len; t++) {
    qkv[t * stride + 2] = 0.25f;  // key
    qkv[t * stride + 3] = -0.5f;
    qkv[t * stride + 4] = values[t * 2];  // value
    qkv[t * stride + 5] = values[t * 2 + 1];
  }
  std::vector<float> out(seq_len * head_dim), logsumexp(seq_len);
  ops->attention_forward(out.data(), logsumexp.data(), qkv.data(), 1, seq_len, 1, 1, head_dim);
  EXPECT_NEAR(out[2], (1 + 4) / 2.0f, kTolerance);
  EXPECT_NEAR(out[3], (2 + 8) / 2.0f, kTolerance);
  EXPECT_NEAR(out[4], (1 + 4 + 16) / 3.0f, 4 * kTolerance);
  EXPECT_NEAR(out[5], (2 + 8 + 32) / 3.0f, 8 * kTolerance);
  // t + 1 equal scores s: logsumexp = s + log(t + 1).
  for (int t = 0; t < seq_len; t++) {
    const float score = (qkv[t * stride] * 0.25f - qkv[t * stride + 1] * 0.5f) / std::sqrt(2.0f);
    EXPECT_NEAR(logsumexp[t], score + std::log(t + 1.0f), 2 * kTolerance) << t;
  }
}

TEST_F(CpuOpsTest, AttentionIsCausal) {
  const int batch = 2, seq_len = 5, num_heads = 2, head_dim = 3;
  const int channels = num_heads * head_dim, stride = 3 * channels;
  std::vector<float> qkv = pseudo_random(batch * seq_len * stride, 3);
  // Garbage in the outputs: the forward must write every entry.
  std::vector<float> out(batch * seq_len * channels, 7.0f);
  std::vector<float> logsumexp(batch * num_heads * seq_len, 7.0f);
  ops->attention_forward(out.data(), logsumexp.data(), qkv.data(), batch, seq_len, num_heads,
                         num_heads, head_dim);
  for (float value : out) ASSERT_TRUE(std::isfinite(value) && std::fabs(value) <= 1.0f) << value;
  // Change q, k and v of token 3 in batch 0: outputs of tokens 0..2 (and all of
  // batch 1) must stay bitwise the same; token 3's output must change.
  const std::vector<float> before = out, logsumexp_before = logsumexp;
  for (int c = 0; c < stride; c++) qkv[3 * stride + c] += 0.75f;
  ops->attention_forward(out.data(), logsumexp.data(), qkv.data(), batch, seq_len, num_heads,
                         num_heads, head_dim);
  for (int i = 0; i < 3 * channels; i++) EXPECT_EQ(out[i], before[i]) << i;
  for (int i = seq_len * channels; i < batch * seq_len * channels; i++) {
    EXPECT_EQ(out[i], before[i]) << i;
  }
  for (int c = 0; c < channels; c++) EXPECT_NE(out[3 * channels + c], before[3 * channels + c]);
  for (int h = 0; h < num_heads; h++) {
    for (int t = 0; t < 3; t++)
      EXPECT_EQ(logsumexp[h * seq_len + t], logsumexp_before[h * seq_len + t]);
  }
}

// ---- loss ------------------------------------------------------------------------------------

TEST_F(CpuOpsTest, CrossEntropyUniformLogitsIsLogVocab) {
  const int rows = 2, vocab = 5;
  const std::vector<float> logits(rows * vocab, 0.3f);
  const std::vector<int32_t> targets = {0, 4};
  std::vector<float> losses(rows), dlogits(rows * vocab);
  const float loss_scale = 0.5f;
  ops->softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), rows,
                             vocab, loss_scale, nullptr);
  for (int r = 0; r < rows; r++) {
    EXPECT_NEAR(losses[r], std::log(5.0f), kTolerance);
    for (int v = 0; v < vocab; v++) {
      const float expected = (0.2f - (v == targets[r] ? 1.0f : 0.0f)) * loss_scale;
      EXPECT_NEAR(dlogits[r * vocab + v], expected, kTolerance);
    }
  }
}

TEST_F(CpuOpsTest, CrossEntropyKnownValueAndStability) {
  // Row 0: logits [1, 2, 3], target 0: log(e + e^2 + e^3) - 1 = 2.4076060.
  // Row 1: logits [1000, 0, -1000], target 1: a naive exp overflows; loss = 1000.
  const std::vector<float> logits = {1, 2, 3, 1000, 0, -1000};
  const std::vector<int32_t> targets = {0, 1};
  std::vector<float> losses(2);
  ops->softmax_cross_entropy(losses.data(), nullptr, logits.data(), targets.data(), 2, 3, 1.0f,
                             nullptr);
  EXPECT_NEAR(losses[0], 2.4076060f, kTolerance);
  EXPECT_FLOAT_EQ(losses[1], 1000.0f);
}

TEST_F(CpuOpsTest, CrossEntropyAliasedDlogitsMatchesSeparateBuffers) {
  const int rows = 3, vocab = 11;
  std::vector<float> logits = pseudo_random(rows * vocab, 4);
  for (float& logit : logits) logit *= 4.0f;
  const std::vector<int32_t> targets = {10, 0, 5};
  std::vector<float> losses_separate(rows), dlogits(rows * vocab);
  ops->softmax_cross_entropy(losses_separate.data(), dlogits.data(), logits.data(), targets.data(),
                             rows, vocab, 0.25f, nullptr);
  std::vector<float> losses_forward_only(rows);
  ops->softmax_cross_entropy(losses_forward_only.data(), nullptr, logits.data(), targets.data(),
                             rows, vocab, 0.25f, nullptr);
  std::vector<float> in_place = logits, losses_in_place(rows);
  ops->softmax_cross_entropy(losses_in_place.data(), in_place.data(), in_place.data(),
                             targets.data(), rows, vocab, 0.25f, nullptr);
  EXPECT_EQ(losses_in_place, losses_separate);
  EXPECT_EQ(losses_forward_only, losses_separate);
  EXPECT_EQ(in_place, dlogits);
}

TEST_F(CpuOpsTest, CrossEntropyRejectsTargetOutsideVocabulary) {
  const std::vector<float> logits = {0, 0, 0};
  const std::vector<int32_t> targets = {3};
  float loss = 0.0f;
  EXPECT_THROW(ops->softmax_cross_entropy(&loss, nullptr, logits.data(), targets.data(), 1, 3, 1.0f,
                                          nullptr),
               std::out_of_range);
}

// ---- determinism ---------------------------------------------------------------------------

// One forward + backward of a tiny one-block model using every op, then an
// AdamW step; returns every output and gradient, concatenated.
std::vector<float> run_tiny_model(Ops& ops) {
  const int batch = 2, seq_len = 16, channels = 64, num_heads = 4, vocab = 96;
  const int head_dim = channels / num_heads, rows = batch * seq_len;
  std::vector<int32_t> tokens(rows), targets(rows);
  for (int i = 0; i < rows; i++) {
    tokens[i] = (i * 37 + 5) % vocab;
    targets[i] = (i * 11 + 3) % vocab;
  }
  std::vector<float> wte = pseudo_random(vocab * channels, 10);
  const std::vector<float> wpe = pseudo_random(seq_len * channels, 11);
  const std::vector<float> ln_weight = pseudo_random(channels, 12);
  const std::vector<float> ln_bias = pseudo_random(channels, 13);
  const std::vector<float> qkv_weight = pseudo_random(3 * channels * channels, 14);
  const std::vector<float> qkv_bias = pseudo_random(3 * channels, 15);
  const std::vector<float> proj_weight = pseudo_random(channels * channels, 16);
  const std::vector<float> proj_bias = pseudo_random(channels, 17);

  std::vector<float> x(rows * channels), ln(rows * channels), mean(rows), rstd(rows);
  std::vector<float> qkv(rows * 3 * channels), attn(rows * channels);
  std::vector<float> logsumexp(batch * num_heads * seq_len), scratch(logsumexp.size());
  std::vector<float> proj(rows * channels), res(rows * channels), hidden(rows * channels);
  std::vector<float> logits(rows * vocab), losses(rows);
  ops.token_embedding_forward(x.data(), tokens.data(), wte.data(), rows, 0, vocab, channels);
  ops.position_embedding_forward(x.data(), wpe.data(), batch, seq_len, channels);
  ops.layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), ln_weight.data(),
                        ln_bias.data(), rows, channels, 1e-5f);
  ops.linear_forward(qkv.data(), ln.data(), qkv_weight.data(), qkv_bias.data(), rows, channels,
                     3 * channels);
  ops.attention_forward(attn.data(), logsumexp.data(), qkv.data(), batch, seq_len, num_heads,
                        num_heads, head_dim);
  ops.linear_forward(proj.data(), attn.data(), proj_weight.data(), proj_bias.data(), rows, channels,
                     channels);
  ops.residual_forward(res.data(), x.data(), proj.data(), res.size());
  ops.gelu_forward(hidden.data(), res.data(), hidden.size());
  ops.linear_forward(logits.data(), hidden.data(), wte.data(), nullptr, rows, channels, vocab);
  float* dlogits = logits.data();  // in place, as the runtime does
  ops.softmax_cross_entropy(losses.data(), dlogits, logits.data(), targets.data(), rows, vocab,
                            1.0f / rows, nullptr);

  std::vector<float> dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  std::vector<float> dln_weight(channels, 0.0f), dln_bias(channels, 0.0f);
  std::vector<float> dqkv_weight(qkv_weight.size(), 0.0f), dqkv_bias(qkv_bias.size(), 0.0f);
  std::vector<float> dproj_weight(proj_weight.size(), 0.0f), dproj_bias(channels, 0.0f);
  std::vector<float> dhidden(hidden.size(), 0.0f), dres(res.size(), 0.0f);
  std::vector<float> dx(x.size(), 0.0f), dattn(attn.size(), 0.0f), dqkv(qkv.size(), 0.0f);
  std::vector<float> dln(ln.size(), 0.0f);
  ops.linear_backward(dhidden.data(), dwte.data(), nullptr, dlogits, hidden.data(), wte.data(),
                      rows, channels, vocab, GradientWrite::kAccumulate);
  ops.gelu_backward(dres.data(), res.data(), dhidden.data(), dres.size(),
                    GradientWrite::kAccumulate);
  ops.accumulate(dx.data(), dres.data(), dx.size());
  ops.linear_backward(dattn.data(), dproj_weight.data(), dproj_bias.data(), dres.data(),
                      attn.data(), proj_weight.data(), rows, channels, channels,
                      GradientWrite::kAccumulate);
  ops.attention_backward(dqkv.data(), scratch.data(), dattn.data(), qkv.data(), attn.data(),
                         logsumexp.data(), batch, seq_len, num_heads, num_heads, head_dim,
                         GradientWrite::kAccumulate);
  ops.linear_backward(dln.data(), dqkv_weight.data(), dqkv_bias.data(), dqkv.data(), ln.data(),
                      qkv_weight.data(), rows, channels, 3 * channels, GradientWrite::kAccumulate);
  ops.layernorm_backward(dx.data(), dln_weight.data(), dln_bias.data(), dln.data(), x.data(),
                         ln_weight.data(), mean.data(), rstd.data(), rows, channels);
  ops.token_embedding_backward(dwte.data(), dx.data(), tokens.data(), rows, 0, vocab, channels);
  ops.position_embedding_backward(dwpe.data(), dx.data(), batch, seq_len, channels);
  const double gradient_norm_squared = ops.sum_of_squares(dwte.data(), dwte.size());
  std::vector<float> first_moment(wte.size(), 0.0f), second_moment(wte.size(), 0.0f);
  ops.adamw(wte.data(), wte.data(), dwte.data(), first_moment.data(), second_moment.data(),
            wte.size(),
            {.learning_rate = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.1f});

  std::vector<float> everything;
  for (const auto* part : {&losses, &dwte, &dwpe, &dln_weight, &dln_bias, &dqkv_weight, &dqkv_bias,
                           &dproj_weight, &dproj_bias, &wte, &attn, &logsumexp}) {
    everything.insert(everything.end(), part->begin(), part->end());
  }
  everything.push_back(static_cast<float>(gradient_norm_squared));
  return everything;
}

TEST_F(CpuOpsTest, ForwardBackwardIsBitwiseDeterministic) {
  const std::vector<float> first = run_tiny_model(*ops);
  const std::vector<float> second = run_tiny_model(*make_cpu_ops());
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
  for (float value : first) ASSERT_TRUE(std::isfinite(value));
}

TEST_F(CpuOpsTest, MakeCpuOpsSetsTheOpenBlasThreadCount) {
  const int before = cpu::openblas_library().openblas_get_num_threads();
  EXPECT_THROW(make_cpu_ops(-1), std::invalid_argument);
  auto single = make_cpu_ops(1);
  EXPECT_EQ(cpu::openblas_library().openblas_get_num_threads(), 1);
  make_cpu_ops(0);  // 0 leaves the setting alone
  EXPECT_EQ(cpu::openblas_library().openblas_get_num_threads(), 1);
  const std::vector<float> first = run_tiny_model(*single);
  const std::vector<float> second = run_tiny_model(*make_cpu_ops(1));
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
  make_cpu_ops(2);
  EXPECT_EQ(cpu::openblas_library().openblas_get_num_threads(), 2);
  cpu::openblas_library().openblas_set_num_threads(before);  // the setting is process-wide
}

}  // namespace
}  // namespace paraplan::kernels
