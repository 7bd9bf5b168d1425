// cuda_gemm_lane.cu: GemmLane (a stream's cuBLAS handle, cuBLASLt cache and
// workspace, and a linear layer's weight gradients on it) and
// WeightGradientStream (a second lane that runs them beside the backward).
#include "common/gemm_workspace.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_gemm_lane.cuh"

namespace paraplan::kernels::cuda {

namespace {

// cuBLAS(Lt) workspace, as the planner counts it (common/gemm_workspace.h).
constexpr size_t kWorkspaceBytes = static_cast<size_t>(kGemmLaneWorkspaceBytes);

}  // namespace

size_t GemmLane::workspace_bytes() {
  return kWorkspaceBytes;
}

GemmLane::GemmLane(cudaStream_t stream, DType storage, bool allow_tf32, DeviceScratch& scratch)
    : stream_(stream), storage_(storage), scratch_(scratch) {
  try {
    const bool bf16 = storage == DType::kBFloat16;
    data_type_ = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    // TF32 concerns fp32 inputs only; bf16 inputs run on tensor cores with fp32 accumulation.
    compute_type_ = !bf16 && allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasCreate(&cublas_));
    PARAPLAN_CUBLAS_CHECK(cublas_library().cublasSetStream(cublas_, stream_));
    PARAPLAN_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    PARAPLAN_CUBLAS_CHECK(
        cublas_library().cublasSetWorkspace(cublas_, workspace_, kWorkspaceBytes));
    PARAPLAN_CUBLAS_CHECK(
        cublas_library().cublasSetAtomicsMode(cublas_, CUBLAS_ATOMICS_NOT_ALLOWED));
    // Strict mode must not let CUBLAS_COMPUTE_32F drop to TF32 via the math
    // mode; bf16 outputs must not be reduced in bf16 (one rounding per output).
    const int math_mode = (!bf16 && allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    PARAPLAN_CUBLAS_CHECK(
        cublas_library().cublasSetMathMode(cublas_, static_cast<cublasMath_t>(math_mode)));
    lt_matmul_ = std::make_unique<LtMatmul>(data_type_, compute_type_, bf16, workspace_,
                                            kWorkspaceBytes, stream_);
  } catch (...) {
    release();
    throw;
  }
}

GemmLane::~GemmLane() {
  release();
}

void GemmLane::release() noexcept {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  lt_matmul_.reset();
  if (cublas_ != nullptr) cublas_library().cublasDestroy(cublas_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  cublas_ = nullptr;
  workspace_ = nullptr;
}

void GemmLane::gemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                    const void* a, int lda, const void* b, int ldb, void* d, int ldd, float beta) {
  if (lt_matmul_->run(transa, transb, m, n, k, a, lda, b, ldb, d, ldd, beta)) return;
  const float alpha = 1.0f;
  PARAPLAN_CUBLAS_CHECK(cublas_library().cublasGemmEx(
      cublas_, transa, transb, m, n, k, &alpha, a, data_type_, lda, b, data_type_, ldb, &beta, d,
      data_type_, ldd, compute_type_, CUBLAS_GEMM_DEFAULT));
}

// dweight^T[in, out] += inp^T[in, rows] * op_T(dout^T)[rows, out] (cuda_ops.cu
// has the row-major to column-major mapping).
void GemmLane::weight_gradients(void* dweight, void* dbias, const void* dout, const void* inp,
                                int rows, int in_features, int out_features) {
  if (rows <= 0 || out_features <= 0) return;
  bool dbias_done = dbias == nullptr;
  if (dweight != nullptr && in_features > 0) {
    bool fused = false;
    if (!dbias_done) {
      // The epilogue writes (not adds) the column sums of dout: into fp32 scratch.
      float* bias_gradient =
          static_cast<float*>(scratch_.get(static_cast<size_t>(out_features) * sizeof(float)));
      fused = lt_matmul_->run(CUBLAS_OP_N, CUBLAS_OP_T, in_features, out_features, rows, inp,
                              in_features, dout, out_features, dweight, in_features, 1.0f,
                              CUBLASLT_EPILOGUE_BGRADB, bias_gradient, CUDA_R_32F);
      if (fused) {
        accumulate_float(storage_, dbias, bias_gradient, static_cast<size_t>(out_features),
                         stream_);
        dbias_done = true;
      }
    }
    if (!fused) {
      gemm(CUBLAS_OP_N, CUBLAS_OP_T, in_features, out_features, rows, inp, in_features, dout,
           out_features, dweight, in_features, 1.0f);
    }
  }
  if (!dbias_done)
    column_sums_accumulate(storage_, dbias, dout, rows, out_features, scratch_, stream_);
}

WeightGradientStream::WeightGradientStream(DType storage, bool allow_tf32) {
  try {
    // Blocking, as the Ops object's stream: ordered against the legacy
    // default stream too.
    PARAPLAN_CUDA_CHECK(cudaStreamCreate(&stream_));
    PARAPLAN_CUDA_CHECK(cudaEventCreateWithFlags(&main_reached_, cudaEventDisableTiming));
    PARAPLAN_CUDA_CHECK(cudaEventCreateWithFlags(&side_reached_, cudaEventDisableTiming));
    scratch_ = std::make_unique<DeviceScratch>(stream_);
    lane_ = std::make_unique<GemmLane>(stream_, storage, allow_tf32, *scratch_);
  } catch (...) {
    release();
    throw;
  }
}

WeightGradientStream::~WeightGradientStream() {
  release();
}

void WeightGradientStream::release() noexcept {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  lane_.reset();
  scratch_.reset();
  if (main_reached_ != nullptr) cudaEventDestroy(main_reached_);
  if (side_reached_ != nullptr) cudaEventDestroy(side_reached_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  main_reached_ = side_reached_ = nullptr;
  stream_ = nullptr;
}

void WeightGradientStream::run(cudaStream_t main, void* dweight, void* dbias, const void* dout,
                               const void* inp, int rows, int in_features, int out_features) {
  // The wait captures the event as recorded now, so one event serves every call.
  PARAPLAN_CUDA_CHECK(cudaEventRecord(main_reached_, main));
  PARAPLAN_CUDA_CHECK(cudaStreamWaitEvent(stream_, main_reached_, 0));
  pending_ = true;  // before the launches: one that throws leaves the others joined
  lane_->weight_gradients(dweight, dbias, dout, inp, rows, in_features, out_features);
}

void WeightGradientStream::join(cudaStream_t main) {
  if (!pending_) return;
  PARAPLAN_CUDA_CHECK(cudaEventRecord(side_reached_, stream_));
  PARAPLAN_CUDA_CHECK(cudaStreamWaitEvent(main, side_reached_, 0));
  pending_ = false;
}

size_t WeightGradientStream::internal_bytes() const {
  return GemmLane::workspace_bytes() + scratch_->capacity();
}

}  // namespace paraplan::kernels::cuda
