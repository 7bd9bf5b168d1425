// cuda_llama_ops_test.cc: the CUDA backend's RMS norm, SwiGLU and rotary
// embedding against the CPU backend in the same storage dtype (fp32 and bf16;
// tolerances of cuda_test_support.h), on the 16-byte and scalar paths, the
// RMS norm's one-pass backward at shapes that reach each of its paths, bitwise
// run to run and accumulating onto nonzero gradients what it adds to zeros (the
// layer norm's are in cuda_norm_test.cc), and SwiGLU's backward
// overwriting its gradient equal to accumulating it into zeros. Grouped-query attention is in
// cuda_attention_test.cc. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

class CudaLlamaOps : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaLlamaOps, kStorageDtypes, storage_test_name);

// The gradients' starting values, dinp and dweight: nonzero (backward
// accumulates), or zeros.
Tensors rmsnorm_starts(int rows, int channels, bool zeros) {
  const size_t n = static_cast<size_t>(rows) * channels;
  if (zeros) return {std::vector<float>(n, 0.0f), std::vector<float>(channels, 0.0f)};
  return {random_floats(n, 3, 0.1f), random_floats(channels, 4, 0.1f)};
}

// out, rstd, dinp, dweight, the gradients from rmsnorm_starts.
Tensors rmsnorm_run(Ops& ops, int rows, int channels, bool unaligned, bool zero_starts = false) {
  const size_t n = static_cast<size_t>(rows) * channels;
  const Tensors starts = rmsnorm_starts(rows, channels, zero_starts);
  Buffers buffers(ops);
  const void* inp = buffers.upload_storage(random_floats(n, 1, 2.0f), unaligned);
  const void* weight = buffers.upload_storage(random_floats(channels, 2, 0.5f, 1.0f), unaligned);
  void* out = buffers.allocate_storage(n);
  float* rstd = buffers.allocate_floats(rows);
  ops.rmsnorm_forward(out, rstd, inp, weight, rows, channels, 1e-5f);
  void* dinp = buffers.upload_storage(starts[0], unaligned);
  void* dweight = buffers.upload_storage(starts[1], unaligned);
  ops.rmsnorm_backward(dinp, dweight, buffers.upload_storage(random_floats(n, 5), unaligned), inp,
                       weight, rstd, rows, channels);
  return {buffers.download_storage(out, n), buffers.download(rstd, rows),
          buffers.download_storage(dinp, n), buffers.download_storage(dweight, channels)};
}

TEST_P(CudaLlamaOps, RmsNormMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  const double storage = storage_tolerance(dtype(), kStrictTolerance);
  // dweight sums over every row: a bf16 sum's tolerance.
  const std::vector<double> tolerances = {
      storage, kStrictTolerance, storage,
      storage_tolerance(dtype(), kStrictTolerance, kBf16SumTolerance)};
  // The one-pass backward's paths (cuda_layernorm.cu), on 132 SMs (264
  // blocks): 4097 rows are 16 per block and a last block of 1; 5000 rows 19
  // per block (a round of 16, then 3) and a last block of 3; 100 rows one per
  // block; channels 100: bf16 scalar, fp32 fewer packs than lanes; 8192: 32
  // KiB of shared column sums; 16400: the sums in the scratch; unaligned: the
  // scalar path.
  for (auto [rows, channels, unaligned] :
       {std::tuple{19, 64, false}, std::tuple{300, 64, false}, std::tuple{300, 37, false},
        std::tuple{19, 64, true}, std::tuple{4097, 768, false}, std::tuple{5000, 768, false},
        std::tuple{100, 768, false}, std::tuple{1, 100, false}, std::tuple{300, 100, false},
        std::tuple{300, 768, true}, std::tuple{64, 8192, false}, std::tuple{16, 16400, false}}) {
    expect_all_close(rmsnorm_run(*cuda, rows, channels, unaligned),
                     rmsnorm_run(*cpu, rows, channels, unaligned), tolerances,
                     "rmsnorm " + std::to_string(rows) + "x" + std::to_string(channels));
  }
}

// Two calls give the same bits, with a call at another shape in between (the
// scratch then holds its partial sums); shared-memory and scratch column sums.
TEST_P(CudaLlamaOps, RmsNormBackwardIsBitwiseRunToRun) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  for (auto [rows, channels] :
       {std::pair{1000, 96}, std::pair{5000, 768}, std::pair{300, 100}, std::pair{16, 16400}}) {
    const Tensors first = rmsnorm_run(*cuda, rows, channels, false);
    rmsnorm_run(*cuda, 4097, 100, false);
    expect_all_equal(
        rmsnorm_run(*cuda, rows, channels, false), first,
        "rmsnorm " + std::to_string(rows) + "x" + std::to_string(channels) + " run to run");
  }
}

// Onto nonzero gradients the backward adds what it gives from zeros: fp32
// dweight bitwise start + (the result from zeros) (one rounding of the same
// sum); dinp within the strict tolerance (its update may fuse into an FMA);
// bf16 within about 2 ulp (the result from zeros is itself rounded).
TEST_P(CudaLlamaOps, RmsNormBackwardAccumulates) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  for (auto [rows, channels, unaligned] :
       {std::tuple{5000, 768, false}, std::tuple{300, 100, false}, std::tuple{300, 768, true},
        std::tuple{16, 16400, false}}) {
    const std::string what = "rmsnorm accumulates " + std::to_string(rows) + "x" +
                             std::to_string(channels) + (unaligned ? " unaligned" : "");
    const Tensors from_zeros = rmsnorm_run(*cuda, rows, channels, unaligned, true);
    const Tensors accumulated = rmsnorm_run(*cuda, rows, channels, unaligned);
    const Tensors starts = rmsnorm_starts(rows, channels, false);
    Tensors expected;  // dinp, dweight: the starts as stored plus the results from zeros
    for (size_t t = 0; t < 2; t++) {
      expected.push_back(round_to(dtype(), starts[t]));
      for (size_t i = 0; i < expected[t].size(); i++) expected[t][i] += from_zeros[t + 2][i];
    }
    expect_all_close(Tensors{accumulated[2], accumulated[3]}, expected,
                     storage_tolerance(dtype(), kStrictTolerance, kBf16SumTolerance), what);
    if (!bf16()) expect_equal(accumulated[3], expected[1], what + " dweight");
  }
}

// out, then dgate_up (starting nonzero).
Tensors swiglu_run(Ops& ops, int rows, int hidden, bool unaligned) {
  const size_t n = static_cast<size_t>(rows) * hidden;
  Buffers buffers(ops);
  std::vector<float> gate_up = random_floats(2 * n, 10, 6.0f);
  // Saturated gates, where exp(-x) would overflow without the clamp.
  for (size_t i = 0; i < 4 && i < n; i++) gate_up[i] = i % 2 == 0 ? -100.0f : 100.0f;
  const void* input = buffers.upload_storage(gate_up, unaligned);
  void* out = buffers.allocate_storage(n);
  ops.swiglu_forward(out, input, rows, hidden);
  void* gradient = buffers.upload_storage(random_floats(2 * n, 11, 0.1f), unaligned);
  ops.swiglu_backward(gradient, input, buffers.upload_storage(random_floats(n, 12), unaligned),
                      rows, hidden, GradientWrite::kAccumulate);
  return {buffers.download_storage(out, n), buffers.download_storage(gradient, 2 * n)};
}

TEST_P(CudaLlamaOps, SwigluMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  // hidden 64: 16-byte packs; 37: scalar; unaligned: scalar.
  for (auto [rows, hidden, unaligned] :
       {std::tuple{33, 64, false}, std::tuple{33, 37, false}, std::tuple{20, 64, true}}) {
    const Tensors actual = swiglu_run(*cuda, rows, hidden, unaligned);
    expect_all_close(actual, swiglu_run(*cpu, rows, hidden, unaligned),
                     storage_tolerance(dtype(), kStrictTolerance),
                     "swiglu " + std::to_string(rows) + "x" + std::to_string(hidden));
    for (float value : actual[1]) ASSERT_TRUE(std::isfinite(value));
  }
}

// SwiGLU's backward overwriting dgate_up (GradientWrite::kOverwrite) into a
// buffer of NaN gives, as values, what accumulating into zeros gives, on the
// 16-byte and scalar paths (hidden 64 aligned, 37, 64 unaligned).
TEST_P(CudaLlamaOps, SwigluOverwriteEqualsAccumulateIntoZeros) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  for (auto [rows, hidden, unaligned] :
       {std::tuple{33, 64, false}, std::tuple{33, 37, false}, std::tuple{20, 64, true}}) {
    const size_t n = static_cast<size_t>(rows) * hidden;
    auto run = [&](GradientWrite write) {
      Buffers buffers(*cuda);
      const void* input = buffers.upload_storage(random_floats(2 * n, 10, 6.0f), unaligned);
      const float start = write == GradientWrite::kOverwrite ? std::nanf("") : 0.0f;
      void* gradient = buffers.upload_storage(std::vector<float>(2 * n, start), unaligned);
      cuda->swiglu_backward(gradient, input,
                            buffers.upload_storage(random_floats(n, 12), unaligned), rows, hidden,
                            write);
      return buffers.download_storage(gradient, 2 * n);
    };
    expect_equal(run(GradientWrite::kOverwrite), run(GradientWrite::kAccumulate),
                 "swiglu dgate_up overwritten vs accumulated into zeros " + std::to_string(rows) +
                     "x" + std::to_string(hidden) + (unaligned ? " unaligned" : ""));
  }
}

// qkv after rope_forward, then after rope_backward of a gradient.
Tensors rope_run(Ops& ops, int batch, int seq_len, int heads, int kv_heads, int head_dim) {
  const size_t n = static_cast<size_t>(batch) * seq_len * (heads + 2 * kv_heads) * head_dim;
  const size_t angles = static_cast<size_t>(seq_len) * head_dim / 2;
  std::vector<float> cos(angles), sin(angles);
  for (size_t i = 0; i < angles; i++) {
    const double angle = static_cast<double>(i / (head_dim / 2)) * 0.37 * (1 + i % (head_dim / 2));
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
  Buffers buffers(ops);
  const float* device_cos = buffers.upload(cos);
  const float* device_sin = buffers.upload(sin);
  void* qkv = buffers.upload_storage(random_floats(n, 20));
  ops.rope_forward(qkv, device_cos, device_sin, batch, seq_len, heads, kv_heads, head_dim);
  void* gradient = buffers.upload_storage(random_floats(n, 21));
  ops.rope_backward(gradient, device_cos, device_sin, batch, seq_len, heads, kv_heads, head_dim);
  return {buffers.download_storage(qkv, n), buffers.download_storage(gradient, n)};
}

TEST_P(CudaLlamaOps, RotaryEmbeddingMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  for (auto [batch, seq_len, heads, kv_heads, head_dim] :
       {std::tuple{2, 17, 4, 2, 8}, std::tuple{1, 64, 3, 3, 64}, std::tuple{2, 5, 8, 1, 6}}) {
    expect_all_close(rope_run(*cuda, batch, seq_len, heads, kv_heads, head_dim),
                     rope_run(*cpu, batch, seq_len, heads, kv_heads, head_dim),
                     storage_tolerance(dtype(), kStrictTolerance),
                     "rope H=" + std::to_string(heads) + " Hkv=" + std::to_string(kv_heads));
  }
  Buffers buffers(*cuda);
  void* qkv = buffers.allocate_storage(9);
  const float* table = buffers.upload(std::vector<float>(2, 0.0f));
  EXPECT_THROW(cuda->rope_forward(qkv, table, table, 1, 1, 1, 1, 3), std::invalid_argument);
}

}  // namespace
}  // namespace paraplan::kernels
