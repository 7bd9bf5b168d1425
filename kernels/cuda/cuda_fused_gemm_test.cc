// cuda_fused_gemm_test.cc: the linear layers with their next pass inside
// the GEMM (cuda_gemm.cu): GPT-2's MLP GELU (Ops::linear_gelu_forward,
// linear_backward_gelu; cuBLASLt GELU_AUX_BIAS and DGELU) and an output
// projection's residual add (linear_residual_forward; the C operand),
// against the CPU backend's ops one by one in the same storage dtype, with
// TF32 and strict fp32 GEMMs (strict: the epilogue's GELU the tanh form the
// gelu op computes, within 1e-3: its accuracy is not documented), with and
// without a bias, at shapes the epilogues take and at ones they cannot
// (features not a multiple of 8, an unaligned bias: the op-by-op fallback,
// bitwise); and
// PARAPLAN_CUDA_FUSED_GEMMS=0 bitwise the CUDA op-by-op path. Skips,
// visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

class CudaFusedGemm : public StorageTest {
 protected:
  // check(cuda, tolerance, mode) once per GEMM mode of the dtype: fp32 with
  // TF32 and strict GEMMs, bf16 one (its GEMMs accumulate in fp32 either
  // way), each with the tolerance of a linear layer against the CPU.
  template <typename Check>
  void for_each_gemm_mode(Check check) {
    const std::vector<bool> modes =
        bf16() ? std::vector<bool>{true} : std::vector<bool>{true, false};
    for (bool tf32 : modes) {
      std::unique_ptr<Ops> cuda = make_cuda(tf32, dtype());
      const double tolerance =
          bf16() ? kBf16SumTolerance : (tf32 ? kTf32Tolerance : kStrictTolerance);
      check(*cuda, tolerance, std::string(bf16() ? "bf16" : (tf32 ? "tf32" : "fp32")));
    }
  }
};
INSTANTIATE_TEST_SUITE_P(Storage, CudaFusedGemm, kStorageDtypes, storage_test_name);

// An MLP's up-projection (in -> hidden, GELU) and the down-projection's
// input gradient through the GELU (hidden <- out).
struct GeluGemmCase {
  int rows, in_features, hidden, out_features;
  bool bias;
};

// pre_gelu, gelu output, and the gradient of pre_gelu. fused: the two ops
// under test; else linear_forward, gelu_forward, linear_backward, gelu_backward.
Tensors gelu_gemm_run(Ops& ops, const GeluGemmCase& c, bool fused) {
  Buffers buffers(ops);
  const size_t rows = c.rows, hidden = c.hidden;
  const void* inp = buffers.upload_storage(random_floats(rows * c.in_features, 90, 2.0f));
  const void* up = buffers.upload_storage(random_floats(hidden * c.in_features, 91, 0.3f));
  const void* bias = c.bias ? buffers.upload_storage(random_floats(hidden, 92, 0.5f)) : nullptr;
  const void* down = buffers.upload_storage(random_floats(c.out_features * hidden, 93, 0.3f));
  const void* dout = buffers.upload_storage(random_floats(rows * c.out_features, 94));
  void* pre = buffers.allocate_storage(rows * hidden);
  void* out = buffers.allocate_storage(rows * hidden);
  void* dpre = buffers.allocate_storage(rows * hidden);
  if (fused) {
    ops.linear_gelu_forward(pre, out, inp, up, bias, c.rows, c.in_features, c.hidden);
    ops.linear_backward_gelu(dpre, dout, down, pre, c.rows, c.hidden, c.out_features);
  } else {
    ops.linear_forward(pre, inp, up, bias, c.rows, c.in_features, c.hidden);
    ops.gelu_forward(out, pre, rows * hidden);
    void* dout_gelu = buffers.allocate_storage(rows * hidden);
    ops.linear_backward(dout_gelu, nullptr, nullptr, dout, nullptr, down, c.rows, c.hidden,
                        c.out_features, GradientWrite::kOverwrite);
    ops.gelu_backward(dpre, pre, dout_gelu, rows * hidden, GradientWrite::kOverwrite);
  }
  return Tensors{buffers.download_storage(pre, rows * hidden),
                 buffers.download_storage(out, rows * hidden),
                 buffers.download_storage(dpre, rows * hidden)};
}

const GeluGemmCase kCases[] = {
    {64, 32, 96, 40, true},      // the epilogues, GELU_AUX_BIAS
    {37, 24, 40, 16, false},     // GELU_AUX (no bias), a partial tile of rows
    {300, 128, 384, 128, true},  // a few tiles of every GEMM
};
const GeluGemmCase kFallback = {50, 16, 7, 13, true};  // 7 features: no epilogue

std::string name_of(const GeluGemmCase& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.in_features) + "->" +
         std::to_string(c.hidden) + "->" + std::to_string(c.out_features) + (c.bias ? " bias" : "");
}

// What went through cuBLASLt's GELU (its output and the gradient through
// it): the epilogue's tanh form is not documented to fp32 rounding, and a
// hardware tanh is good to about 2^-11 relative; the GEMM part (pre-GELU)
// keeps the GEMM tolerance.
constexpr double kGeluEpilogueTolerance = 1e-3;

TEST_P(CudaFusedGemm, GeluMatchesTheCpuOpByOp) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype());
  for_each_gemm_mode([&](Ops& cuda, double tolerance, const std::string& mode) {
    const double through_gelu = std::max(tolerance, kGeluEpilogueTolerance);
    for (const GeluGemmCase& c : kCases)
      expect_all_close(gelu_gemm_run(cuda, c, true), gelu_gemm_run(*cpu, c, false),
                       std::vector<double>{tolerance, through_gelu, through_gelu},
                       mode + " " + name_of(c));
  });
}

TEST_P(CudaFusedGemm, GeluWithoutTheEpilogueIsTheOpByOpPathBitwise) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  expect_all_equal(gelu_gemm_run(*cuda, kFallback, true), gelu_gemm_run(*cuda, kFallback, false),
                   "fallback " + name_of(kFallback));
  const ScopedEnvironment off("PARAPLAN_CUDA_FUSED_GEMMS", "0");
  std::unique_ptr<Ops> two_ops = make_cuda(true, dtype());
  for (const GeluGemmCase& c : kCases)
    expect_all_equal(gelu_gemm_run(*two_ops, c, true), gelu_gemm_run(*two_ops, c, false),
                     "PARAPLAN_CUDA_FUSED_GEMMS=0 " + name_of(c));
}

// An output projection joining the residual stream: out = residual + inp
// W^T (+ bias). fused: linear_residual_forward; else linear_forward then
// residual_forward. unaligned_bias: the bias 2 or 4 bytes off 16-byte
// alignment (no epilogue: the fallback).
std::vector<float> residual_run(Ops& ops, const GeluGemmCase& c, bool fused,
                                bool unaligned_bias = false) {
  Buffers buffers(ops);
  const size_t rows = c.rows, out_features = c.hidden;
  const void* inp = buffers.upload_storage(random_floats(rows * c.in_features, 95, 2.0f));
  const void* weight =
      buffers.upload_storage(random_floats(out_features * c.in_features, 96, 0.3f));
  const void* bias =
      c.bias ? buffers.upload_storage(random_floats(out_features, 97, 0.5f), unaligned_bias)
             : nullptr;
  const void* residual = buffers.upload_storage(random_floats(rows * out_features, 98, 4.0f));
  void* out = buffers.allocate_storage(rows * out_features);
  if (fused) {
    ops.linear_residual_forward(out, inp, weight, bias, residual, c.rows, c.in_features, c.hidden);
  } else {
    ops.linear_forward(out, inp, weight, bias, c.rows, c.in_features, c.hidden);
    ops.residual_forward(out, out, residual, rows * out_features);
  }
  return buffers.download_storage(out, rows * out_features);
}

TEST_P(CudaFusedGemm, ResidualMatchesTheCpuOpByOp) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype());
  // One rounding of (product + bias + residual) against two: a bf16 ulp
  // more at most, within the GEMM tolerances.
  for_each_gemm_mode([&](Ops& cuda, double tolerance, const std::string& mode) {
    for (const GeluGemmCase& c : kCases)
      expect_close(residual_run(cuda, c, true), residual_run(*cpu, c, false), tolerance,
                   mode + " residual " + name_of(c));
  });
}

TEST_P(CudaFusedGemm, ResidualWithoutTheEpilogueIsTheOpByOpPathBitwise) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  const GeluGemmCase& c = kCases[0];
  expect_equal(residual_run(*cuda, c, true, true), residual_run(*cuda, c, false, true),
               "unaligned bias " + name_of(c));
  const ScopedEnvironment off("PARAPLAN_CUDA_FUSED_GEMMS", "0");
  std::unique_ptr<Ops> op_by_op = make_cuda(true, dtype());
  for (const GeluGemmCase& each : kCases)
    expect_equal(residual_run(*op_by_op, each, true), residual_run(*op_by_op, each, false),
                 "PARAPLAN_CUDA_FUSED_GEMMS=0 residual " + name_of(each));
}

}  // namespace
}  // namespace paraplan::kernels
