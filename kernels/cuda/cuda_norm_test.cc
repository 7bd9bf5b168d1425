// cuda_norm_test.cc: the CUDA backend's one-pass layer norm backward and its
// column sums (cuda_layernorm.cu) against the CPU backend in the same storage
// dtype, fp32 and bf16 (tolerances of cuda_test_support.h), at shapes that
// reach every path of the kernels: blocks of several rounds of rows with a
// partial last round and a partial last block, fewer rows than blocks, one
// row, channels 768 (16-byte packs), 100 (bf16: the scalar path; fp32: fewer
// packs than a warp's lanes), unaligned tensors (the scalar path), 8192
// channels (column sums in more than 48 KiB of shared memory) and wider rows
// (column sums in the scratch). Also the same for a linear layer's bias
// gradient where cuBLASLt's epilogue does not apply (column_sums_accumulate,
// reached through linear_backward with dbias alone), up to a vocabulary-wide
// 50304 columns; each bitwise run to run, and accumulating onto nonzero
// gradients what it adds to zeros (bitwise in fp32). The block counts depend
// on the device's SM count (two blocks per SM); the row counts below give
// partial blocks on 132 SMs (H100, H200) and 108 (A100) alike. RMS norm's
// counterparts are in cuda_llama_ops_test.cc. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

class CudaNorm : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaNorm, kStorageDtypes, storage_test_name);

struct NormCase {
  int rows, channels;
  bool unaligned;  // every storage tensor 2 or 4 bytes off 16-byte alignment: the scalar path
};

std::string name(const NormCase& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.channels) +
         (c.unaligned ? " unaligned" : "");
}

// On 132 SMs (264 blocks): 4097 rows are 16 per block and a last block of 1;
// 5000 rows are 19 per block (a round of 16, then 3) and a last block of 3;
// 100 rows are one per block. 8192 channels keep LayerNorm's column sums in
// 64 KiB of shared memory; 8200 and 8201 put them in the scratch; 6144
// (GPT-NeoX-20B's width) makes exactly the default 48 KiB of sums, which
// with the kernel's static row statistics needs the opt-in.
const NormCase kLayerNormCases[] = {
    {4097, 768, false}, {5000, 768, false}, {100, 768, false}, {1, 100, false},
    {300, 100, false},  {300, 768, true},   {64, 8192, false}, {40, 8200, false},
    {33, 8201, false},  {20, 8200, true},   {24, 6144, false},
};

// The gradient starting values: dinp, dweight, dbias (nonzero, or zeros).
Tensors gradient_starts(const NormCase& c, bool zeros) {
  const size_t n = static_cast<size_t>(c.rows) * c.channels;
  if (zeros) {
    return {std::vector<float>(n, 0.0f), std::vector<float>(c.channels, 0.0f),
            std::vector<float>(c.channels, 0.0f)};
  }
  return {random_floats(n, 104, 0.5f), random_floats(c.channels, 105),
          random_floats(c.channels, 106)};
}

// dinp, dweight, dbias after layernorm_backward from `starts`. mean and rstd
// are computed here (in double, from the stored inputs) and given to both
// backends, so only the backward is compared.
Tensors layernorm_backward_run(Ops& ops, const NormCase& c, const Tensors& starts) {
  const int rows = c.rows, channels = c.channels;
  const size_t n = static_cast<size_t>(rows) * channels;
  const std::vector<float> inp = round_to(ops.storage_dtype(), random_floats(n, 100, 2.0f, 0.5f));
  std::vector<float> mean(rows), rstd(rows);
  for (int r = 0; r < rows; r++) {
    const float* x = inp.data() + static_cast<size_t>(r) * channels;
    double sum = 0.0, squares = 0.0;
    for (int i = 0; i < channels; i++) sum += x[i];
    const double row_mean = sum / channels;
    for (int i = 0; i < channels; i++) squares += (x[i] - row_mean) * (x[i] - row_mean);
    mean[r] = static_cast<float>(row_mean);
    rstd[r] = static_cast<float>(1.0 / std::sqrt(squares / channels + 1e-5));
  }
  Buffers buffers(ops);
  void* dinp = buffers.upload_storage(starts[0], c.unaligned);
  void* dweight = buffers.upload_storage(starts[1], c.unaligned);
  void* dbias = buffers.upload_storage(starts[2], c.unaligned);
  ops.layernorm_backward(
      dinp, dweight, dbias, buffers.upload_storage(random_floats(n, 102), c.unaligned),
      buffers.upload_storage(inp, c.unaligned),
      buffers.upload_storage(random_floats(channels, 101, 0.5f, 1.0f), c.unaligned),
      buffers.upload(mean), buffers.upload(rstd), rows, channels);
  return {buffers.download_storage(dinp, n), buffers.download_storage(dweight, channels),
          buffers.download_storage(dbias, channels)};
}

TEST_P(CudaNorm, LayerNormBackwardMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  // Every output is an fp32 result rounded once: the storage tolerance (bf16:
  // one ulp; fp32: the column sums of up to 5000 rows differ in order only).
  const double tolerance = storage_tolerance(dtype(), kStrictTolerance);
  for (const NormCase& c : kLayerNormCases) {
    const Tensors starts = gradient_starts(c, false);
    expect_all_close(layernorm_backward_run(*cuda, c, starts),
                     layernorm_backward_run(*cpu, c, starts), tolerance,
                     "layernorm backward " + name(c));
  }
}

// Two calls give the same bits, with a call at another shape in between (the
// scratch then holds its partial sums), on the shared-memory and scratch paths.
TEST_P(CudaNorm, LayerNormBackwardIsBitwiseRunToRun) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  for (const NormCase& c : {NormCase{5000, 768, false}, NormCase{40, 8200, false}}) {
    const Tensors starts = gradient_starts(c, false);
    const Tensors first = layernorm_backward_run(*cuda, c, starts);
    const NormCase other{4097, 100, false};
    layernorm_backward_run(*cuda, other, gradient_starts(other, false));
    expect_all_equal(layernorm_backward_run(*cuda, c, starts), first,
                     "layernorm backward run to run " + name(c));
  }
}

// Onto nonzero gradients the backward adds what it gives from zeros: g =
// round(start + sum), the sum rounded once. fp32: dweight and dbias bitwise
// start + (the result from zeros); dinp within the strict tolerance (its
// update may fuse into an FMA). bf16: the result from zeros is itself
// rounded, so start + it is within about 2 ulp.
TEST_P(CudaNorm, LayerNormBackwardAccumulates) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  for (const NormCase& c : {NormCase{5000, 768, false}, NormCase{300, 100, false},
                            NormCase{300, 768, true}, NormCase{40, 8200, false}}) {
    const Tensors starts = gradient_starts(c, false);
    const Tensors from_zeros = layernorm_backward_run(*cuda, c, gradient_starts(c, true));
    const Tensors accumulated = layernorm_backward_run(*cuda, c, starts);
    Tensors expected;  // the starts as stored, plus the result from zeros
    for (const std::vector<float>& start : starts) expected.push_back(round_to(dtype(), start));
    for (size_t t = 0; t < expected.size(); t++) {
      for (size_t i = 0; i < expected[t].size(); i++) expected[t][i] += from_zeros[t][i];
    }
    expect_all_close(accumulated, expected,
                     storage_tolerance(dtype(), kStrictTolerance, kBf16SumTolerance),
                     "layernorm backward accumulates " + name(c));
    if (!bf16()) {
      expect_equal(accumulated[1], expected[1], "layernorm dweight accumulates " + name(c));
      expect_equal(accumulated[2], expected[2], "layernorm dbias accumulates " + name(c));
    }
  }
}

// ---- a linear layer's bias gradient: column_sums_accumulate ----------------------------------

// 8192 x 768: GPT-2's 124M shapes (3 or 6 column tiles); 100 rows: a few
// short chunks (the kMinChunkRows floor); 100 and 4100 columns: partial tiles (bf16
// 100: the scalar path); 50304: a vocabulary-wide row, many tiles, one chunk;
// unaligned: the scalar path.
const NormCase kBiasCases[] = {
    {8192, 768, false}, {100, 768, false}, {1000, 100, false},
    {257, 4100, false}, {3, 50304, false}, {300, 768, true},
};

// dbias after linear_backward with dinp and dweight null (so no cuBLASLt
// epilogue: column_sums_accumulate), from `start`.
std::vector<float> bias_gradient_run(Ops& ops, const NormCase& c, const std::vector<float>& start) {
  const size_t n = static_cast<size_t>(c.rows) * c.channels;
  Buffers buffers(ops);
  void* dbias = buffers.upload_storage(start, c.unaligned);
  const void* dout = buffers.upload_storage(random_floats(n, 110), c.unaligned);
  ops.linear_backward(nullptr, nullptr, dbias, dout, nullptr, nullptr, c.rows, 1, c.channels,
                      GradientWrite::kAccumulate);
  return buffers.download_storage(dbias, c.channels);
}

TEST_P(CudaNorm, BiasGradientColumnSumsMatchCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  for (const NormCase& c : kBiasCases) {
    const std::vector<float> start = random_floats(c.channels, 111);
    expect_close(bias_gradient_run(*cuda, c, start), bias_gradient_run(*cpu, c, start),
                 storage_tolerance(dtype(), kStrictTolerance), "bias gradient " + name(c));
  }
}

TEST_P(CudaNorm, BiasGradientColumnSumsBitwiseAndAccumulate) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  for (const NormCase& c : {NormCase{8192, 768, false}, NormCase{1000, 100, false}}) {
    const std::vector<float> start = random_floats(c.channels, 111);
    const std::vector<float> first = bias_gradient_run(*cuda, c, start);
    bias_gradient_run(*cuda, NormCase{257, 4100, false}, std::vector<float>(4100, 0.0f));
    expect_equal(bias_gradient_run(*cuda, c, start), first, "bias gradient run to run " + name(c));
    std::vector<float> expected = bias_gradient_run(*cuda, c, std::vector<float>(c.channels, 0.0f));
    const std::vector<float> stored = round_to(dtype(), start);
    for (size_t i = 0; i < expected.size(); i++) expected[i] += stored[i];
    if (bf16()) {
      expect_close(first, expected, kBf16SumTolerance, "bias gradient accumulates " + name(c));
    } else {
      expect_equal(first, expected, "bias gradient accumulates " + name(c));
    }
  }
}

}  // namespace
}  // namespace paraplan::kernels
