// cpu_ops_bench.cc: Google Benchmark timings of the CPU backend of kernels/ops.h
// (linear, attention, layer norm, GELU, cross-entropy, AdamW) at two shapes:
//   tiny:  the tiny GPT of the tests and examples, B=8, T=128, C=128, H=4, F=512, V=256;
//   gpt2:  one GPT-2 small micro-batch scaled down to B=1, T=1024, C=768, H=12,
//          F=3072, V=50257.
// Items are FLOPs for the GEMM-only linear ops, tokens (B*T) for attention and
// elements for the rest; bytes/s counts each input and output once. Also the
// vocab-parallel cross-entropy steps on one shard, against the fused op.
// OpenBLAS threads follow OPENBLAS_NUM_THREADS (the profile numbers in
// kernels/README.md use OPENBLAS_NUM_THREADS=1).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

struct Shape {
  int batch, seq_len, channels, num_heads, hidden, vocab;
  int rows() const { return batch * seq_len; }
  int head_dim() const { return channels / num_heads; }
};

constexpr Shape kTiny{8, 128, 128, 4, 512, 256};
constexpr Shape kGpt2{1, 1024, 768, 12, 3072, 50257};

// Deterministic values in [-scale, scale) from a linear congruential generator.
std::vector<float> filled(size_t n, uint32_t seed, float scale = 1.0f) {
  std::vector<float> values(n);
  uint32_t state = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    values[i] = (static_cast<float>(state >> 8) / 8388608.0f - 1.0f) * scale;
  }
  return values;
}

std::vector<int32_t> targets_for(int rows, int vocab) {
  std::vector<int32_t> targets(rows);
  for (int i = 0; i < rows; i++) targets[i] = static_cast<int32_t>((i * 7919u + 13u) % vocab);
  return targets;
}

// ---- linear ------------------------------------------------------------------------------

void BM_LinearForward(benchmark::State& state, Shape shape, int in_features, int out_features) {
  auto ops = make_cpu_ops();
  const int rows = shape.rows();
  const auto inp = filled(static_cast<size_t>(rows) * in_features, 1);
  const auto weight = filled(static_cast<size_t>(out_features) * in_features, 2, 0.1f);
  const auto bias = filled(out_features, 3);
  std::vector<float> out(static_cast<size_t>(rows) * out_features);
  for (auto _ : state) {
    ops->linear_forward(out.data(), inp.data(), weight.data(), bias.data(), rows, in_features,
                        out_features);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 2 * int64_t{rows} * in_features * out_features);
  state.SetLabel("items = FLOPs");
}

void BM_LinearBackward(benchmark::State& state, Shape shape, int in_features, int out_features) {
  auto ops = make_cpu_ops();
  const int rows = shape.rows();
  const auto inp = filled(static_cast<size_t>(rows) * in_features, 1);
  const auto weight = filled(static_cast<size_t>(out_features) * in_features, 2, 0.1f);
  const auto dout = filled(static_cast<size_t>(rows) * out_features, 4);
  std::vector<float> dinp(inp.size()), dweight(weight.size()), dbias(out_features);
  for (auto _ : state) {
    ops->linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                         weight.data(), rows, in_features, out_features, GradientWrite::kOverwrite);
    benchmark::DoNotOptimize(dinp.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 4 * int64_t{rows} * in_features * out_features);
  state.SetLabel("items = FLOPs");
}

// ---- attention ---------------------------------------------------------------------------

void BM_AttentionForward(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const int rows = shape.rows(), T = shape.seq_len;
  const auto qkv = filled(static_cast<size_t>(rows) * 3 * shape.channels, 5);
  std::vector<float> out(static_cast<size_t>(rows) * shape.channels);
  std::vector<float> logsumexp(static_cast<size_t>(shape.batch) * shape.num_heads * T);
  for (auto _ : state) {
    ops->attention_forward(out.data(), logsumexp.data(), qkv.data(), shape.batch, T,
                           shape.num_heads, shape.num_heads, shape.head_dim());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * rows);
  state.SetLabel("items = tokens");
}

void BM_AttentionBackward(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const int rows = shape.rows(), T = shape.seq_len;
  const auto qkv = filled(static_cast<size_t>(rows) * 3 * shape.channels, 5);
  const auto dout = filled(static_cast<size_t>(rows) * shape.channels, 6);
  std::vector<float> out(dout.size()), dqkv(qkv.size());
  std::vector<float> logsumexp(static_cast<size_t>(shape.batch) * shape.num_heads * T);
  std::vector<float> scratch(logsumexp.size());
  ops->attention_forward(out.data(), logsumexp.data(), qkv.data(), shape.batch, T, shape.num_heads,
                         shape.num_heads, shape.head_dim());
  for (auto _ : state) {
    ops->attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                            logsumexp.data(), shape.batch, T, shape.num_heads, shape.num_heads,
                            shape.head_dim(), GradientWrite::kOverwrite);
    benchmark::DoNotOptimize(dqkv.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * rows);
  state.SetLabel("items = tokens");
}

// ---- layer norm --------------------------------------------------------------------------

void BM_LayerNormForward(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const int rows = shape.rows(), C = shape.channels;
  const auto inp = filled(static_cast<size_t>(rows) * C, 7);
  const auto weight = filled(C, 8), bias = filled(C, 9);
  std::vector<float> out(inp.size()), mean(rows), rstd(rows);
  for (auto _ : state) {
    ops->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), rows, C, 1e-5f);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * int64_t{rows} * C);
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * C * 2 * sizeof(float));
}

void BM_LayerNormBackward(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const int rows = shape.rows(), C = shape.channels;
  const auto inp = filled(static_cast<size_t>(rows) * C, 7);
  const auto weight = filled(C, 8), bias = filled(C, 9);
  const auto dout = filled(inp.size(), 10);
  std::vector<float> out(inp.size()), mean(rows), rstd(rows);
  std::vector<float> dinp(inp.size()), dweight(C), dbias(C);
  ops->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                         bias.data(), rows, C, 1e-5f);
  for (auto _ : state) {
    ops->layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), rows, C);
    benchmark::DoNotOptimize(dinp.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * int64_t{rows} * C);
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * C * 3 * sizeof(float));
}

// ---- GELU --------------------------------------------------------------------------------

void BM_GeluForward(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const size_t n = static_cast<size_t>(shape.rows()) * shape.hidden;
  const auto inp = filled(n, 11, 4.0f);
  std::vector<float> out(n);
  for (auto _ : state) {
    ops->gelu_forward(out.data(), inp.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n * 2 * sizeof(float)));
}

void BM_GeluBackward(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const size_t n = static_cast<size_t>(shape.rows()) * shape.hidden;
  const auto inp = filled(n, 11, 4.0f);
  const auto dout = filled(n, 12);
  std::vector<float> dinp(n);
  for (auto _ : state) {
    ops->gelu_backward(dinp.data(), inp.data(), dout.data(), n, GradientWrite::kOverwrite);
    benchmark::DoNotOptimize(dinp.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n * 4 * sizeof(float)));
}

// ---- cross-entropy -----------------------------------------------------------------------

void BM_SoftmaxCrossEntropy(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const int rows = shape.rows(), V = shape.vocab;
  const auto logits = filled(static_cast<size_t>(rows) * V, 13, 4.0f);
  const auto targets = targets_for(rows, V);
  std::vector<float> losses(rows), dlogits(logits.size());
  for (auto _ : state) {
    ops->softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), rows,
                               V, 1.0f / rows, nullptr);
    benchmark::DoNotOptimize(dlogits.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * int64_t{rows} * V);
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * V * 2 * sizeof(float));
}

// The three vocab-parallel steps over one shard holding the whole vocabulary:
// the cost of the split (an extra pass over the logits) against the fused op.
void BM_CrossEntropyShardSteps(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const int rows = shape.rows(), V = shape.vocab;
  const auto logits = filled(static_cast<size_t>(rows) * V, 13, 4.0f);
  const auto targets = targets_for(rows, V);
  std::vector<float> losses(rows), dlogits(logits.size());
  std::vector<float> row_max(rows), target_logit(rows), exp_sum(rows);
  for (auto _ : state) {
    ops->cross_entropy_shard_stats(row_max.data(), target_logit.data(), logits.data(),
                                   targets.data(), rows, V, 0);
    ops->cross_entropy_shard_exp_sums(exp_sum.data(), logits.data(), row_max.data(), rows, V);
    ops->cross_entropy_shard_finish(losses.data(), dlogits.data(), logits.data(), targets.data(),
                                    row_max.data(), exp_sum.data(), target_logit.data(), rows, V, 0,
                                    1.0f / rows, nullptr);
    benchmark::DoNotOptimize(dlogits.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * int64_t{rows} * V);
  state.SetBytesProcessed(state.iterations() * int64_t{rows} * V * 2 * sizeof(float));
}

// ---- optimizer ---------------------------------------------------------------------------

// One transformer block's parameters: 12 C^2 weights plus 13 C biases and norms.
void BM_AdamW(benchmark::State& state, Shape shape) {
  auto ops = make_cpu_ops();
  const size_t C = shape.channels;
  const size_t n = 12 * C * C + 13 * C;
  std::vector<float> params = filled(n, 14), grads = filled(n, 15, 0.01f);
  std::vector<float> first_moment(n, 0.0f), second_moment(n, 0.0f);
  AdamWStep hyperparameters{
      .learning_rate = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.1f, .step = 0};
  for (auto _ : state) {
    ++hyperparameters.step;
    ops->adamw(params.data(), params.data(), grads.data(), first_moment.data(),
               second_moment.data(), n, hyperparameters);
    benchmark::DoNotOptimize(params.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n * 7 * sizeof(float)));
}

// clang-format off
BENCHMARK_CAPTURE(BM_LinearForward, tiny_qkv, kTiny, kTiny.channels, 3 * kTiny.channels);
BENCHMARK_CAPTURE(BM_LinearForward, tiny_fc, kTiny, kTiny.channels, kTiny.hidden);
BENCHMARK_CAPTURE(BM_LinearBackward, tiny_qkv, kTiny, kTiny.channels, 3 * kTiny.channels);
BENCHMARK_CAPTURE(BM_LinearBackward, tiny_fc, kTiny, kTiny.channels, kTiny.hidden);
BENCHMARK_CAPTURE(BM_AttentionForward, tiny, kTiny);
BENCHMARK_CAPTURE(BM_AttentionBackward, tiny, kTiny);
BENCHMARK_CAPTURE(BM_LayerNormForward, tiny, kTiny);
BENCHMARK_CAPTURE(BM_LayerNormBackward, tiny, kTiny);
BENCHMARK_CAPTURE(BM_GeluForward, tiny, kTiny);
BENCHMARK_CAPTURE(BM_GeluBackward, tiny, kTiny);
BENCHMARK_CAPTURE(BM_SoftmaxCrossEntropy, tiny, kTiny);
BENCHMARK_CAPTURE(BM_CrossEntropyShardSteps, tiny, kTiny);
BENCHMARK_CAPTURE(BM_AdamW, tiny, kTiny);

BENCHMARK_CAPTURE(BM_LinearForward, gpt2_qkv, kGpt2, kGpt2.channels, 3 * kGpt2.channels)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LinearForward, gpt2_fc, kGpt2, kGpt2.channels, kGpt2.hidden)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LinearBackward, gpt2_qkv, kGpt2, kGpt2.channels, 3 * kGpt2.channels)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LinearBackward, gpt2_fc, kGpt2, kGpt2.channels, kGpt2.hidden)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionForward, gpt2, kGpt2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionBackward, gpt2, kGpt2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LayerNormForward, gpt2, kGpt2);
BENCHMARK_CAPTURE(BM_LayerNormBackward, gpt2, kGpt2);
BENCHMARK_CAPTURE(BM_GeluForward, gpt2, kGpt2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GeluBackward, gpt2, kGpt2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SoftmaxCrossEntropy, gpt2, kGpt2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CrossEntropyShardSteps, gpt2, kGpt2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AdamW, gpt2, kGpt2)->Unit(benchmark::kMillisecond);
// clang-format on

}  // namespace
}  // namespace paraplan::kernels
