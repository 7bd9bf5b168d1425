// cuda_gemm_lane.cuh: a stream and what a linear layer's GEMMs need on it —
// a cuBLAS handle bound to it, a cuBLASLt configuration cache (cuda_gemm.cuh)
// with a workspace of its own, and scratch for the bias gradients — and the
// weight-gradient half of a linear layer's backward on it. The Ops object
// (cuda_ops.cu) has one lane on its stream; WeightGradientStream has a
// second on a stream of its own, which runs the weight gradients beside the
// backward (kernels/ops.h linear_weight_gradients).
//
// Precision and determinism as cuda_ops.cu says: storage-typed operands,
// fp32 accumulation (TF32 for fp32 storage when allowed), atomics and
// reduced-precision reductions disallowed. Both lanes have workspaces of the
// same size, so cuBLASLt's heuristic picks the same algorithm for a
// configuration on either: a weight gradient is bitwise the same on both.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "kernels/cuda/cuda_gemm.cuh"
#include "kernels/cuda/cuda_kernels.cuh"
#include "kernels/dtype.h"

namespace paraplan::kernels::cuda {

class GemmLane {
 public:
  // The scratch is the caller's (the Ops object shares its own with the other
  // kernels on its stream); it must outlive the lane.
  GemmLane(cudaStream_t stream, DType storage, bool allow_tf32, DeviceScratch& scratch);
  ~GemmLane();
  GemmLane(const GemmLane&) = delete;
  GemmLane& operator=(const GemmLane&) = delete;

  // D = op(A) op(B) + beta D without an epilogue: cuBLASLt, else
  // cublasGemmEx (storage-typed A, B, D; fp32 alpha, beta and accumulation).
  void gemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* a,
            int lda, const void* b, int ldb, void* d, int ldd, float beta);
  // A linear layer's weight gradients, row-major storage tensors: dweight
  // [out, in] += dout^T @ inp, dbias [out] += sum_rows dout (fp32 sums,
  // rounded once); either may be null. The bias gradient comes from the
  // GEMM's BGRADB epilogue where cuBLASLt has an algorithm, else from a
  // column-sum kernel.
  void weight_gradients(void* dweight, void* dbias, const void* dout, const void* inp, int rows,
                        int in_features, int out_features);

  LtMatmul& lt() { return *lt_matmul_; }
  cudaDataType_t data_type() const { return data_type_; }
  cudaStream_t stream() const { return stream_; }
  // The cuBLAS(Lt) workspace (the scratch is its owner's to count).
  static size_t workspace_bytes();

 private:
  void release() noexcept;

  cudaStream_t stream_;
  DType storage_;
  DeviceScratch& scratch_;
  cudaDataType_t data_type_ = CUDA_R_32F;  // of every GEMM operand: the storage dtype
  cublasComputeType_t compute_type_ = CUBLAS_COMPUTE_32F_FAST_TF32;
  cublasHandle_t cublas_ = nullptr;
  void* workspace_ = nullptr;
  std::unique_ptr<LtMatmul> lt_matmul_;  // the cached cuBLASLt configurations
};

// The weight gradients beside the backward: a second stream with its own
// lane and scratch. run() orders its GEMM after everything queued on the
// main stream so far (an event the side stream waits for); join() makes the
// main stream wait for everything run() queued (nothing to do when nothing
// was). Both stream-ordered: the host never waits.
class WeightGradientStream {
 public:
  WeightGradientStream(DType storage, bool allow_tf32);
  ~WeightGradientStream();
  WeightGradientStream(const WeightGradientStream&) = delete;
  WeightGradientStream& operator=(const WeightGradientStream&) = delete;

  void run(cudaStream_t main, void* dweight, void* dbias, const void* dout, const void* inp,
           int rows, int in_features, int out_features);
  void join(cudaStream_t main);
  // Its workspace and scratch.
  size_t internal_bytes() const;

 private:
  void release() noexcept;

  cudaStream_t stream_ = nullptr;
  cudaEvent_t main_reached_ = nullptr;  // recorded on the main stream by run()
  cudaEvent_t side_reached_ = nullptr;  // recorded on this stream by join()
  std::unique_ptr<DeviceScratch> scratch_;
  std::unique_ptr<GemmLane> lane_;
  bool pending_ = false;  // run() since the last join()
};

}  // namespace paraplan::kernels::cuda
