// cuda_kernels.cuh: internals of the CUDA backend shared by its .cu files:
// launch declarations of the kernels behind each Ops method (one stream per
// Ops object, passed explicitly), the device scratch the Ops object owns, and
// small device helpers (fixed-order warp reductions, alignment tests).
// Semantics of every launcher are those of the Ops method of the same name in
// kernels/ops.h. Not part of the op-set contract; only kernels/cuda includes it.
//
// Determinism: no floating-point atomics anywhere. Reductions run in a fixed
// tree (xor-butterfly shuffles, then a fixed shared-memory order) over a grid
// whose shape depends only on the problem size, so the same inputs give
// bitwise the same outputs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/ops.h"

namespace paraplan::kernels::cuda {

// ---- host helpers -------------------------------------------------------------------------

inline bool is_aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

inline unsigned int ceil_div(size_t a, size_t b) {
  return static_cast<unsigned int>((a + b - 1) / b);
}

// Device memory owned by the Ops object for kernels that need scratch the
// op-set interface does not pass (column-sum partials, sort buffers, the
// bias-gradient epilogue's output). Grows on demand and never shrinks; all
// users are stream-ordered, so one buffer serves every op. Growing first
// synchronizes the stream, so no queued kernel still reads the old buffer.
class DeviceScratch {
 public:
  explicit DeviceScratch(cudaStream_t stream) : stream_(stream) {}
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  // At least `bytes` bytes, 256-byte aligned.
  void* get(size_t bytes);

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The Ops object itself (cuda_ops.cu); make_cuda_ops (cuda_device.cu) picks
// the device and the TF32 setting.
std::unique_ptr<Ops> create_cuda_ops(int device, bool allow_tf32);

// ---- cuda_elementwise.cu ----------------------------------------------------------------------

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream);
void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);
void accumulate(float* dx, const float* dout, size_t n, cudaStream_t stream);
void scale(float* x, float factor, size_t n, cudaStream_t stream);
// out[r, :] = row[:] for r < rows (the bias a GEMM with beta = 1 then adds to).
void broadcast_rows(float* out, const float* row, int rows, int cols, cudaStream_t stream);
// beta1_correction = 1 - beta1^step (and beta2's), computed by the caller in double.
void adamw(float* params, const float* grads, float* first_moment, float* second_moment, size_t n,
           float learning_rate, float beta1, float beta2, float epsilon, float weight_decay,
           float beta1_correction, float beta2_correction, cudaStream_t stream);
// Blocks of the first pass of sum_of_squares; partials holds kSumOfSquaresBlocks + 1 doubles.
constexpr int kSumOfSquaresBlocks = 256;
// Synchronizes the stream (the result comes back to the host).
double sum_of_squares(const float* x, size_t n, double* partials, cudaStream_t stream);

// ---- cuda_layernorm.cu --------------------------------------------------------------------------

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int rows, int channels, float epsilon,
                       cudaStream_t stream);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int rows, int channels, DeviceScratch& scratch, cudaStream_t stream);
// out[c] += sum over r (in row-chunk order) of x[r, c]: a linear layer's bias gradient.
void column_sums_accumulate(float* out, const float* x, int rows, int cols, DeviceScratch& scratch,
                            cudaStream_t stream);

// ---- cuda_embedding.cu
// -----------------------------------------------------------------------------

void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int num_tokens,
                             int vocab_start, int vocab_local, int channels, cudaStream_t stream);
void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int num_tokens,
                              int vocab_start, int vocab_local, int channels,
                              DeviceScratch& scratch, cudaStream_t stream);
void position_embedding_forward(float* out, const float* wpe, int batch, int seq_len, int channels,
                                cudaStream_t stream);
void position_embedding_backward(float* dwpe, const float* dout, int batch, int seq_len,
                                 int channels, cudaStream_t stream);

// ---- cuda_attention.cu ---------------------------------------------------------------------
// Fused (flash) attention, fp32 FMA; head_dim <= 128 (std::invalid_argument beyond).

void attention_forward(float* out, float* logsumexp, const float* qkv, int batch, int seq_len,
                       int num_heads, int head_dim, cudaStream_t stream);
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* logsumexp, int batch, int seq_len,
                        int num_heads, int head_dim, cudaStream_t stream);

// ---- cuda_loss.cu
// ------------------------------------------------------------------------------------ error_row is
// one device int holding INT_MAX; a kernel that meets a target out of range stores the smallest
// such row there, and the launcher (which then synchronizes the stream) resets it and throws
// std::out_of_range, as the CPU backend does.

void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int rows, int vocab, float loss_scale,
                           int* error_row, cudaStream_t stream);
void cross_entropy_shard_stats(float* row_max, float* target_logit, const float* logits,
                               const int32_t* targets, int rows, int vocab_local, int vocab_start,
                               int* error_row, cudaStream_t stream);
void cross_entropy_shard_exp_sums(float* exp_sum, const float* logits, const float* row_max,
                                  int rows, int vocab_local, cudaStream_t stream);
void cross_entropy_shard_finish(float* losses, float* dlogits, const float* logits,
                                const int32_t* targets, const float* row_max, const float* exp_sum,
                                const float* target_logit, int rows, int vocab_local,
                                int vocab_start, float loss_scale, cudaStream_t stream);

// ---- device helpers
// --------------------------------------------------------------------------------

#ifdef __CUDACC__

constexpr unsigned int kFullMask = 0xffffffffu;

// Butterfly reductions: every lane ends with the same value, combined in the
// same fixed order on every run (addition and max are commutative, so the
// partner pairs agree bitwise).
__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = __fadd_rn(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

__device__ __forceinline__ double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = __dadd_rn(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

__device__ __forceinline__ float4 load4(const float* base, size_t index4) {
  return reinterpret_cast<const float4*>(base)[index4];
}

__device__ __forceinline__ void store4(float* base, size_t index4, float4 value) {
  reinterpret_cast<float4*>(base)[index4] = value;
}

#endif  // __CUDACC__

}  // namespace paraplan::kernels::cuda
