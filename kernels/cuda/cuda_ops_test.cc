// cuda_ops_test.cc: the CUDA backend (kernels/cuda) against the CPU reference
// backend, op by op: the same random inputs (fixed seeds) go through both and
// the outputs are compared within the tolerances of cuda_test_support.h
// (bitwise where both backends add in the same order), in TF32 (the default)
// and strict fp32 GEMM modes; plus determinism (two runs, bitwise) for the ops
// whose CUDA versions reduce across threads. Attention and the losses are in
// cuda_attention_test.cc. Every test skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

// ---- memory and factory ---------------------------------------------------------------------

TEST(CudaOps, FactoryAndMemoryRoundTrip) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> ops = make_cuda(true);
  EXPECT_EQ(ops->backend(), Backend::kCuda);
  // Device indices wrap over the visible devices (a local rank per device).
  EXPECT_EQ(make_cuda_ops(cuda_device_count())->backend(), Backend::kCuda);
  Buffers buffers(*ops);
  const std::vector<float> host = random_floats(1001, 1);
  float* a = buffers.upload(host);
  float* b = static_cast<float*>(buffers.allocate(host.size() * sizeof(float)));
  ops->copy(b, a, host.size() * sizeof(float));
  EXPECT_EQ(buffers.download(b, host.size()), host);
  ops->fill_zero(b + 3, 500);
  std::vector<float> expected = host;
  std::fill(expected.begin() + 3, expected.begin() + 503, 0.0f);
  EXPECT_EQ(buffers.download(b, host.size()), expected);
  void* empty = ops->allocate(0);  // a unique, freeable pointer, as on the CPU
  EXPECT_NE(empty, nullptr);
  ops->deallocate(empty);
  ops->synchronize();
}

// ---- embeddings -----------------------------------------------------------------------------

TEST(CudaOps, TokenEmbeddingMatchesCpuBitwise) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  for (int channels : {16, 7}) {
    for (bool unaligned : {false, true}) {
      const int num_tokens = 300, vocab_start = 8, vocab_local = 24;
      // Tokens in [0, 40): some belong to other shards, many repeat.
      const std::vector<int32_t> tokens = random_ints(num_tokens, 2, 0, 40);
      const std::vector<float> wte = random_floats(static_cast<size_t>(vocab_local) * channels, 3);
      const std::vector<float> dwte = random_floats(wte.size(), 4);
      const std::vector<float> dout = random_floats(static_cast<size_t>(num_tokens) * channels, 5);
      auto run = [&](Ops& ops) {
        Buffers buffers(ops);
        const size_t n = static_cast<size_t>(num_tokens) * channels;
        float* out = static_cast<float*>(buffers.allocate(n * sizeof(float)));
        int32_t* device_tokens = buffers.upload(tokens);
        ops.token_embedding_forward(out, device_tokens, buffers.upload(wte, unaligned), num_tokens,
                                    vocab_start, vocab_local, channels);
        float* gradient = buffers.upload(dwte, unaligned);
        ops.token_embedding_backward(gradient, buffers.upload(dout), device_tokens, num_tokens,
                                     vocab_start, vocab_local, channels);
        return Tensors{buffers.download(out, n), buffers.download(gradient, dwte.size())};
      };
      // Copies, and sums in the CPU's order (ascending token position): exact.
      EXPECT_EQ(run(*cuda), run(*cpu)) << "channels " << channels << " unaligned " << unaligned;
    }
  }
}

TEST(CudaOps, PositionEmbeddingMatchesCpuBitwise) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  for (int channels : {12, 7}) {
    const int batch = 3, seq_len = 10;
    const size_t n = static_cast<size_t>(batch) * seq_len * channels;
    const std::vector<float> activation = random_floats(n, 6);
    const std::vector<float> wpe = random_floats(static_cast<size_t>(seq_len) * channels, 7);
    const std::vector<float> dwpe = random_floats(wpe.size(), 8);
    const std::vector<float> dout = random_floats(n, 9);
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      float* out = buffers.upload(activation);
      ops.position_embedding_forward(out, buffers.upload(wpe), batch, seq_len, channels);
      float* gradient = buffers.upload(dwpe);
      ops.position_embedding_backward(gradient, buffers.upload(dout), batch, seq_len, channels);
      return Tensors{buffers.download(out, n), buffers.download(gradient, dwpe.size())};
    };
    EXPECT_EQ(run(*cuda), run(*cpu)) << "channels " << channels;
  }
}

// ---- layer norm ---------------------------------------------------------------------------------

// Forward outputs (out, mean, rstd) and backward gradients (dinp, dweight, dbias).
Tensors layernorm_run(Ops& ops, int rows, int channels, bool unaligned) {
  const size_t n = static_cast<size_t>(rows) * channels;
  const std::vector<float> inp = random_floats(n, 10, 2.0f, 0.5f);
  const std::vector<float> weight = random_floats(channels, 11, 0.5f, 1.0f);
  const std::vector<float> bias = random_floats(channels, 12);
  const std::vector<float> dout = random_floats(n, 13);
  Buffers buffers(ops);
  float* out = static_cast<float*>(buffers.allocate(n * sizeof(float)));
  float* mean = static_cast<float*>(buffers.allocate(rows * sizeof(float)));
  float* rstd = static_cast<float*>(buffers.allocate(rows * sizeof(float)));
  const float* device_inp = buffers.upload(inp, unaligned);
  const float* device_weight = buffers.upload(weight, unaligned);
  ops.layernorm_forward(out, mean, rstd, device_inp, device_weight, buffers.upload(bias), rows,
                        channels, 1e-5f);
  float* dinp = buffers.upload(random_floats(n, 14));
  float* dweight = buffers.upload(random_floats(channels, 15));
  float* dbias = buffers.upload(random_floats(channels, 16));
  ops.layernorm_backward(dinp, dweight, dbias, buffers.upload(dout), device_inp, device_weight,
                         mean, rstd, rows, channels);
  return {buffers.download(out, n),
          buffers.download(mean, rows),
          buffers.download(rstd, rows),
          buffers.download(dinp, n),
          buffers.download(dweight, channels),
          buffers.download(dbias, channels)};
}

TEST(CudaOps, LayerNormMatchesCpu) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  // 64 channels take the float4 path, 37 the scalar one; 300 rows make 10 chunks.
  for (auto [rows, channels, unaligned] : {std::tuple{19, 64, false}, std::tuple{300, 64, false},
                                           std::tuple{300, 37, false}, std::tuple{19, 64, true}}) {
    expect_all_close(layernorm_run(*cuda, rows, channels, unaligned),
                     layernorm_run(*cpu, rows, channels, unaligned), kStrictTolerance,
                     "layernorm " + std::to_string(rows) + "x" + std::to_string(channels));
  }
}

// ---- linear -------------------------------------------------------------------------------------

struct LinearCase {
  int rows, in_features, out_features;
  bool bias, unaligned;
  // Which gradients backward produces.
  bool dinp, dweight, dbias;
};

Tensors linear_run(Ops& ops, const LinearCase& c) {
  const size_t in_size = static_cast<size_t>(c.rows) * c.in_features;
  const size_t out_size = static_cast<size_t>(c.rows) * c.out_features;
  const size_t weight_size = static_cast<size_t>(c.out_features) * c.in_features;
  Buffers buffers(ops);
  const float* inp = buffers.upload(random_floats(in_size, 20));
  const float* weight = buffers.upload(random_floats(weight_size, 21, 0.3f), c.unaligned);
  const float* bias =
      c.bias ? buffers.upload(random_floats(c.out_features, 22), c.unaligned) : nullptr;
  float* out = static_cast<float*>(buffers.allocate(out_size * sizeof(float)));
  ops.linear_forward(out, inp, weight, bias, c.rows, c.in_features, c.out_features);
  const float* dout = buffers.upload(random_floats(out_size, 23));
  float* dinp = c.dinp ? buffers.upload(random_floats(in_size, 24)) : nullptr;
  float* dweight =
      c.dweight ? buffers.upload(random_floats(weight_size, 25), c.unaligned) : nullptr;
  float* dbias = c.dbias ? buffers.upload(random_floats(c.out_features, 26), c.unaligned) : nullptr;
  ops.linear_backward(dinp, dweight, dbias, dout, inp, weight, c.rows, c.in_features,
                      c.out_features);
  Tensors result{buffers.download(out, out_size)};
  if (dinp != nullptr) result.push_back(buffers.download(dinp, in_size));
  if (dweight != nullptr) result.push_back(buffers.download(dweight, weight_size));
  if (dbias != nullptr) result.push_back(buffers.download(dbias, c.out_features));
  return result;
}

TEST(CudaOps, LinearMatchesCpuInTf32AndStrictFp32) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1);
  const LinearCase cases[] = {
      {37, 24, 20, true, false, true, true, true},     // bias epilogues (cuBLASLt)
      {37, 24, 20, false, false, true, true, false},   // no bias
      {50, 13, 7, true, true, true, true, true},       // unaligned: the fallbacks
      {8, 64, 96, true, false, false, true, true},     // dweight + dbias only
      {8, 64, 96, true, false, false, false, true},    // dbias alone: the column-sum kernel
      {8, 64, 96, true, false, true, false, false},    // dinp alone
      {300, 128, 384, true, false, true, true, true},  // a few tiles of every GEMM
  };
  for (bool tf32 : {true, false}) {
    std::unique_ptr<Ops> cuda = make_cuda(tf32);
    for (const LinearCase& c : cases) {
      expect_all_close(
          linear_run(*cuda, c), linear_run(*cpu, c), tf32 ? kTf32Tolerance : kStrictTolerance,
          std::string(tf32 ? "tf32" : "fp32") + " linear " + std::to_string(c.rows) + "x" +
              std::to_string(c.in_features) + "->" + std::to_string(c.out_features));
    }
  }
}

// ---- elementwise --------------------------------------------------------------------------------

TEST(CudaOps, GeluMatchesCpu) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  std::vector<float> inp = random_floats(1003, 30, 6.0f);  // 1003: a scalar tail
  // The saturated ends, where exp(-2u) would overflow without the clamp.
  for (float x : {-30.0f, -20.0f, -12.0f, -9.0f, 0.0f, 9.0f, 12.0f, 30.0f}) inp.push_back(x);
  const std::vector<float> dout = random_floats(inp.size(), 31);
  const std::vector<float> dinp = random_floats(inp.size(), 32);
  for (bool unaligned : {false, true}) {
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      float* out = static_cast<float*>(buffers.allocate(inp.size() * sizeof(float)));
      const float* device_inp = buffers.upload(inp, unaligned);
      ops.gelu_forward(out, device_inp, inp.size());
      float* gradient = buffers.upload(dinp);
      ops.gelu_backward(gradient, device_inp, buffers.upload(dout), inp.size());
      return Tensors{buffers.download(out, inp.size()), buffers.download(gradient, inp.size())};
    };
    const Tensors actual = run(*cuda), expected = run(*cpu);
    expect_all_close(actual, expected, kStrictTolerance, "gelu");
    for (float value : actual[1]) ASSERT_TRUE(std::isfinite(value));
  }
}

TEST(CudaOps, ResidualAccumulateScaleMatchCpuBitwise) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  const size_t n = 4099;
  const std::vector<float> a = random_floats(n, 40), b = random_floats(n, 41);
  for (bool unaligned : {false, true}) {
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      float* out = static_cast<float*>(buffers.allocate(n * sizeof(float)));
      const float* device_a = buffers.upload(a, unaligned);
      const float* device_b = buffers.upload(b);
      ops.residual_forward(out, device_a, device_b, n);
      float* in_place = buffers.upload(a);
      ops.residual_forward(in_place, in_place, device_b, n);  // out aliasing a, as the model does
      float* dx = buffers.upload(b, unaligned);
      ops.accumulate(dx, device_a, n);
      ops.scale(dx, 0.37f, n);
      return Tensors{buffers.download(out, n), buffers.download(in_place, n),
                     buffers.download(dx, n)};
    };
    EXPECT_EQ(run(*cuda), run(*cpu)) << "unaligned " << unaligned;  // one IEEE op per element
  }
}

// ---- optimizer
// ---------------------------------------------------------------------------------------

TEST(CudaOps, AdamWAndSumOfSquaresMatchCpu) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  for (bool unaligned : {false, true}) {
    const size_t n = 10007;
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      float* params = buffers.upload(random_floats(n, 70), unaligned);
      float* m = buffers.upload(random_floats(n, 71, 0.01f));
      float* v = buffers.upload(random_floats(n, 72, 0.001f, 0.001f));
      for (int step = 1; step <= 3; step++) {
        const float* grads = buffers.upload(random_floats(n, 73 + step));
        ops.adamw(params, grads, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
      }
      return Tensors{buffers.download(params, n), buffers.download(m, n), buffers.download(v, n)};
    };
    expect_all_close(run(*cuda), run(*cpu), kStrictTolerance, "adamw");
  }
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
    for (bool unaligned : {false, true}) {
      const std::vector<float> x = random_floats(n, 80, 3.0f);
      Buffers cpu_buffers(*cpu), cuda_buffers(*cuda);
      const double expected = cpu->sum_of_squares(cpu_buffers.upload(x, unaligned), n);
      const double actual = cuda->sum_of_squares(cuda_buffers.upload(x, unaligned), n);
      EXPECT_NEAR(actual, expected, kDoubleTolerance * expected) << "n " << n;
    }
  }
}

// ---- determinism: two runs, bitwise
// ----------------------------------------------------------------

TEST(CudaOps, DeterministicTokenEmbeddingBackward) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cuda = make_cuda(true);
  const int num_tokens = 4096, vocab = 50, channels = 96;
  const std::vector<int32_t> tokens = random_ints(num_tokens, 90, 0, vocab);
  const std::vector<float> dout = random_floats(static_cast<size_t>(num_tokens) * channels, 91);
  auto run = [&] {
    Buffers buffers(*cuda);
    float* dwte = buffers.upload(random_floats(static_cast<size_t>(vocab) * channels, 92));
    cuda->token_embedding_backward(dwte, buffers.upload(dout), buffers.upload(tokens), num_tokens,
                                   0, vocab, channels);
    return buffers.download(dwte, static_cast<size_t>(vocab) * channels);
  };
  EXPECT_EQ(run(), run());
}

TEST(CudaOps, DeterministicLayerNormBackward) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cuda = make_cuda(true);
  EXPECT_EQ(layernorm_run(*cuda, 4096, 768, false), layernorm_run(*cuda, 4096, 768, false));
}

TEST(CudaOps, DeterministicSumOfSquares) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cuda = make_cuda(true);
  const std::vector<float> x = random_floats(3000017, 93);
  Buffers buffers(*cuda);
  const float* device_x = buffers.upload(x);
  const double first = cuda->sum_of_squares(device_x, x.size());
  for (int run = 0; run < 3; run++) EXPECT_EQ(cuda->sum_of_squares(device_x, x.size()), first);
}

}  // namespace
}  // namespace paraplan::kernels
