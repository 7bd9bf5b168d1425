// cpu_ops_gradcheck_test.cc: finite-difference gradient checks of every CPU
// backward op of GPT-2's blocks in kernels/ops.h, plus the "backward
// accumulates" contract (method and tolerances: cpu_gradient_check.h; the
// Llama ops' checks are in cpu_llama_ops_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_gradient_check.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace gradient_check;

class CpuGradientCheck : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

TEST_F(CpuGradientCheck, TokenAndPositionEmbedding) {
  const int batch = 2, seq_len = 3, channels = 4;
  const int vocab_start = 2, vocab_local = 4;  // this rank owns tokens 2..5
  // 9 and 0 lie outside the local range; 3 repeats, so its row accumulates twice.
  const std::vector<int32_t> tokens = {3, 5, 2, 9, 0, 3};
  const int num_tokens = batch * seq_len;
  std::vector<float> wte = random_vector(vocab_local * channels, 1);
  std::vector<float> wpe = random_vector(seq_len * channels, 2);
  const std::vector<float> probe = random_vector(num_tokens * channels, 3);
  std::vector<float> out(num_tokens * channels);
  auto objective = [&] {
    ops->token_embedding_forward(out.data(), tokens.data(), wte.data(), num_tokens, vocab_start,
                                 vocab_local, channels);
    ops->position_embedding_forward(out.data(), wpe.data(), batch, seq_len, channels);
    return weighted_sum(out, probe);
  };
  // Start from random gradients so the check sees what backward adds.
  std::vector<float> dwte_before = random_vector(wte.size(), 4);
  std::vector<float> dwpe_before = random_vector(wpe.size(), 5);
  std::vector<float> dwte = dwte_before, dwpe = dwpe_before;
  auto backward = [&] {
    ops->token_embedding_backward(dwte.data(), probe.data(), tokens.data(), num_tokens, vocab_start,
                                  vocab_local, channels);
    ops->position_embedding_backward(dwpe.data(), probe.data(), batch, seq_len, channels);
  };
  backward();
  expect_gradient_matches("dwte", wte, added(dwte, dwte_before), objective);
  expect_gradient_matches("dwpe", wpe, added(dwpe, dwpe_before), objective);
  expect_backward_accumulates("embedding", {&dwte, &dwpe}, backward);
}

TEST_F(CpuGradientCheck, LayerNorm) {
  const int rows = 3, channels = 5;
  const float epsilon = 1e-5f;
  std::vector<float> inp = random_vector(rows * channels, 11, -2.0f, 2.0f);
  std::vector<float> weight = random_vector(channels, 12, 0.5f, 1.5f);
  std::vector<float> bias = random_vector(channels, 13);
  const std::vector<float> probe = random_vector(rows * channels, 14);
  std::vector<float> out(rows * channels), mean(rows), rstd(rows);
  auto objective = [&] {
    ops->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), rows, channels, epsilon);
    return weighted_sum(out, probe);
  };
  objective();  // fills mean and rstd for the backward
  std::vector<float> dinp_before = random_vector(inp.size(), 15);
  std::vector<float> dweight_before = random_vector(weight.size(), 16);
  std::vector<float> dbias_before = random_vector(bias.size(), 17);
  std::vector<float> dinp = dinp_before, dweight = dweight_before, dbias = dbias_before;
  auto backward = [&] {
    ops->layernorm_backward(dinp.data(), dweight.data(), dbias.data(), probe.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), rows, channels);
  };
  backward();
  expect_gradient_matches("dinp", inp, added(dinp, dinp_before), objective);
  expect_gradient_matches("dweight", weight, added(dweight, dweight_before), objective);
  expect_gradient_matches("dbias", bias, added(dbias, dbias_before), objective);
  objective();  // restores the saved statistics of the unperturbed input
  expect_backward_accumulates("layernorm", {&dinp, &dweight, &dbias}, backward);
}

// Non-square on purpose, so a transposed GEMM argument would fail.
void check_linear(Ops& ops, bool with_bias, int rows, int in_features, int out_features) {
  const std::string name = with_bias ? "linear with bias" : "linear without bias";
  std::vector<float> inp = random_vector(rows * in_features, 21);
  std::vector<float> weight = random_vector(out_features * in_features, 22);
  std::vector<float> bias = random_vector(out_features, 23);
  const std::vector<float> probe = random_vector(rows * out_features, 24);
  std::vector<float> out(rows * out_features);
  auto objective = [&] {
    ops.linear_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr,
                       rows, in_features, out_features);
    return weighted_sum(out, probe);
  };
  std::vector<float> dinp_before = random_vector(inp.size(), 25);
  std::vector<float> dweight_before = random_vector(weight.size(), 26);
  std::vector<float> dbias_before = random_vector(bias.size(), 27);
  std::vector<float> dinp = dinp_before, dweight = dweight_before, dbias = dbias_before;
  ops.linear_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, probe.data(),
                      inp.data(), weight.data(), rows, in_features, out_features,
                      GradientWrite::kAccumulate);
  expect_gradient_matches(name + " dinp", inp, added(dinp, dinp_before), objective);
  expect_gradient_matches(name + " dweight", weight, added(dweight, dweight_before), objective);
  if (with_bias) {
    expect_gradient_matches(name + " dbias", bias, added(dbias, dbias_before), objective);
  } else {
    EXPECT_EQ(dbias, dbias_before) << "a null dbias must be skipped";
  }

  // Each of dinp, dweight, dbias may be null independently.
  std::vector<float> dweight_alone = dweight_before;
  ops.linear_backward(nullptr, dweight_alone.data(), nullptr, probe.data(), inp.data(),
                      weight.data(), rows, in_features, out_features, GradientWrite::kAccumulate);
  EXPECT_EQ(dweight_alone, dweight);
  std::vector<float> dinp_alone = dinp_before;
  ops.linear_backward(dinp_alone.data(), nullptr, nullptr, probe.data(), inp.data(), weight.data(),
                      rows, in_features, out_features, GradientWrite::kAccumulate);
  EXPECT_EQ(dinp_alone, dinp);

  auto backward = [&] {
    ops.linear_backward(dinp.data(), dweight.data(), dbias.data(), probe.data(), inp.data(),
                        weight.data(), rows, in_features, out_features, GradientWrite::kAccumulate);
  };
  expect_backward_accumulates(name, {&dinp, &dweight, &dbias}, backward);
}

TEST_F(CpuGradientCheck, LinearWithBias) {
  check_linear(*ops, true, 3, 4, 5);
}

TEST_F(CpuGradientCheck, LinearWithoutBias) {
  check_linear(*ops, false, 4, 6, 3);
}

TEST_F(CpuGradientCheck, Gelu) {
  const size_t n = 16;
  std::vector<float> inp = random_vector(n, 31, -3.0f, 3.0f);
  const std::vector<float> probe = random_vector(n, 32);
  std::vector<float> out(n);
  auto objective = [&] {
    ops->gelu_forward(out.data(), inp.data(), n);
    return weighted_sum(out, probe);
  };
  std::vector<float> dinp_before = random_vector(n, 33);
  std::vector<float> dinp = dinp_before;
  auto backward = [&] {
    ops->gelu_backward(dinp.data(), inp.data(), probe.data(), n, GradientWrite::kAccumulate);
  };
  backward();
  expect_gradient_matches("gelu dinp", inp, added(dinp, dinp_before), objective);
  expect_backward_accumulates("gelu", {&dinp}, backward);
}

void check_attention(Ops& ops, int batch, int seq_len, int num_heads, int head_dim) {
  const int channels = num_heads * head_dim;
  // Scores of a few units, so the softmax is far from uniform.
  std::vector<float> qkv = random_vector(batch * seq_len * 3 * channels, 41, -1.5f, 1.5f);
  const std::vector<float> probe = random_vector(batch * seq_len * channels, 42);
  std::vector<float> out(batch * seq_len * channels);
  std::vector<float> logsumexp(batch * num_heads * seq_len);
  auto objective = [&] {
    ops.attention_forward(out.data(), logsumexp.data(), qkv.data(), batch, seq_len, num_heads,
                          num_heads, head_dim);
    return weighted_sum(out, probe);
  };
  objective();  // fills out and logsumexp for the backward
  std::vector<float> scratch(logsumexp.size());
  std::vector<float> dqkv_before = random_vector(qkv.size(), 43);
  std::vector<float> dqkv = dqkv_before;
  auto backward = [&] {
    // Fill scratch with garbage: the backward must not depend on its contents.
    std::fill(scratch.begin(), scratch.end(), 1e30f);
    ops.attention_backward(dqkv.data(), scratch.data(), probe.data(), qkv.data(), out.data(),
                           logsumexp.data(), batch, seq_len, num_heads, num_heads, head_dim,
                           GradientWrite::kAccumulate);
  };
  backward();
  expect_gradient_matches("attention dqkv", qkv, added(dqkv, dqkv_before), objective);
  objective();  // restores out and logsumexp of the unperturbed input
  expect_backward_accumulates("attention", {&dqkv}, backward);
}

TEST_F(CpuGradientCheck, Attention) {
  check_attention(*ops, 2, 5, 2, 3);
}

TEST_F(CpuGradientCheck, AttentionAcrossTiles) {
  // 70 tokens: two query blocks and key chunks (64 + 6), so the online
  // softmax's rescaling and the off-diagonal tiles carry gradient.
  check_attention(*ops, 1, 70, 1, 4);
}

TEST_F(CpuGradientCheck, SoftmaxCrossEntropy) {
  const int rows = 4, vocab = 7;
  std::vector<float> logits = random_vector(rows * vocab, 51, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {0, 6, 3, 3};
  std::vector<float> losses(rows);
  // The objective is the mean loss, so loss_scale = 1 / rows.
  auto objective = [&] {
    ops->softmax_cross_entropy(losses.data(), nullptr, logits.data(), targets.data(), rows, vocab,
                               1.0f / rows, nullptr);
    double sum = 0.0;
    for (float loss : losses) sum += loss;
    return sum / rows;
  };
  std::vector<float> dlogits(logits.size(), 123.0f);  // overwritten, not accumulated
  ops->softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), rows,
                             vocab, 1.0f / rows, nullptr);
  expect_gradient_matches("dlogits", logits, dlogits, objective);
}

}  // namespace
}  // namespace paraplan::kernels
