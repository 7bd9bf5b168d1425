// cuda_kernels.cuh: internals of the CUDA backend shared by its .cu files:
// launch declarations of the kernels behind each Ops method (one stream per
// Ops object, passed explicitly), the device scratch the Ops object owns, and
// small device helpers (fixed-order warp reductions, alignment tests).
// Every launcher takes the Ops object's storage dtype and its storage tensors
// as void*, and instantiates its kernels for float or bf16 (cuda_bf16.cuh):
// fp32 arithmetic on widened inputs, each storage output rounded once.
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
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/cuda_bf16.cuh"
#include "kernels/dtype.h"
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
  // At least `bytes` bytes, 256-byte aligned. Growing keeps the old buffer
  // until destruction instead of freeing it: cudaFree waits for the whole
  // device, and a pipeline receive posted ahead on a link stream may be
  // waiting there for a peer that waits for this rank (a deadlock).
  void* get(size_t bytes);
  size_t capacity() const { return bytes_ + retired_bytes_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::vector<void*> retired_;  // earlier, smaller buffers: freed with this
  size_t retired_bytes_ = 0;
};

// What launches size their grids by, of the current device (cached per host
// thread and device; cuda_device_scratch.cu).
struct DeviceLimits {
  int multiprocessors = 1;
  size_t shared_optin = 0;  // the most shared memory a block may opt in to
  size_t l2_bytes = 0;
};
const DeviceLimits& device_limits();

// Lets `kernel` use `bytes` of dynamic shared memory (beyond the default 48
// KiB) on the current device: cudaFuncSetAttribute once per kernel, device
// and larger size, as attention asks at every launch. Throws
// std::invalid_argument, "<what> needs N bytes of shared memory per block;
// the device offers M", where the device offers less (cuda_device_scratch.cu).
void allow_dynamic_shared_memory(const void* kernel, size_t bytes, const std::string& what);

// The CUDA Ops' switches, read from the environment by make_cuda_ops
// (cuda_device.cu) when the object is made.
struct CudaOpsSettings {
  bool allow_tf32 = true;  // PARAPLAN_CUDA_TF32 (fp32 storage only)
  // PARAPLAN_CUDA_ATTENTION: cuDNN's SDPA or paraplan's kernels (attention_choice.h)
  AttentionSetting attention = AttentionSetting::kAuto;
  bool fused_gemms = true;  // PARAPLAN_CUDA_FUSED_GEMMS: GELU, residuals in the GEMMs
  // PARAPLAN_CUDA_OVERLAP: weight gradients on a second stream (cuda_gemm_lane.cuh)
  bool overlap_weight_gradients = true;
  // PARAPLAN_CUDA_GRAPHS: run_recorded replays CUDA graphs (cuda_graphs.cuh)
  bool launch_graphs = false;
};

// The device's name and PCI bus id (cuda_device.cu).
std::string cuda_device_name(int device);
std::string cuda_device_bus_id(int device);

// The Ops object itself (cuda_ops.cu), on the device make_cuda_ops picked.
std::unique_ptr<Ops> create_cuda_ops(int device, DType storage, const CudaOpsSettings& settings);

// ---- cuda_elementwise.cu ----------------------------------------------------------------------
// Storage tensors (void*) hold elements of `storage` (float or bf16); float* tensors are fp32.

void gelu_forward(DType storage, void* out, const void* inp, size_t n, cudaStream_t stream);
// dinp (+)= gelu'(inp) * dout, as write says.
void gelu_backward(DType storage, void* dinp, const void* inp, const void* dout, size_t n,
                   GradientWrite write, cudaStream_t stream);
void residual_forward(DType storage, void* out, const void* a, const void* b, size_t n,
                      cudaStream_t stream);
void accumulate(DType storage, void* dx, const void* dout, size_t n, cudaStream_t stream);
// x (storage) += y (fp32), rounded once: the fused bias gradient's accumulation.
void accumulate_float(DType storage, void* x, const float* y, size_t n, cudaStream_t stream);
// x (fp32) += y (storage), widened: Ops::accumulate_into_float.
void accumulate_into_float(DType storage, float* x, const void* y, size_t n, cudaStream_t stream);
void scale(DType storage, void* x, float factor, size_t n, cudaStream_t stream);
// out[r, :] = row[:] for r < rows (the bias a GEMM with beta = 1 then adds to).
void broadcast_rows(DType storage, void* out, const void* row, int rows, int cols,
                    cudaStream_t stream);
void convert_from_float(DType storage, void* out, const float* in, size_t n, cudaStream_t stream);
void convert_to_float(DType storage, float* out, const void* in, size_t n, cudaStream_t stream);
// grads of `gradients`: the storage dtype, or fp32 (Ops::adamw_float_gradients).
void adamw(DType storage, DType gradients, float* master, void* params, const void* grads,
           float* first_moment, float* second_moment, size_t n, const AdamWStep& hyperparameters,
           cudaStream_t stream);
// Blocks of the first pass of the sums below; partials holds kSumOfSquaresBlocks
// doubles. Each adds its total to *accumulator (one device double), queued:
// per-block double partials (a fixed tree inside each block), then one block
// sums them in order, so the result is bitwise reproducible.
constexpr int kSumOfSquaresBlocks = 1024;  // ~8 blocks of 256 threads per H100 SM
void accumulate_sum_of_squares(DType storage, double* accumulator, const void* x, size_t n,
                               double* partials, cudaStream_t stream);
// fp32 values summed in double.
void accumulate_sum(double* accumulator, const float* x, size_t n, double* partials,
                    cudaStream_t stream);

// ---- cuda_layernorm.cu --------------------------------------------------------------------------

void layernorm_forward(DType storage, void* out, float* mean, float* rstd, const void* inp,
                       const void* weight, const void* bias, int rows, int channels, float epsilon,
                       cudaStream_t stream);
void layernorm_backward(DType storage, void* dinp, void* dweight, void* dbias, const void* dout,
                        const void* inp, const void* weight, const float* mean, const float* rstd,
                        int rows, int channels, DeviceScratch& scratch, cudaStream_t stream);
void rmsnorm_forward(DType storage, void* out, float* rstd, const void* inp, const void* weight,
                     int rows, int channels, float epsilon, cudaStream_t stream);
void rmsnorm_backward(DType storage, void* dinp, void* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int rows, int channels,
                      DeviceScratch& scratch, cudaStream_t stream);
// out[c] += sum over r (in row-chunk order) of x[r, c], summed in fp32 and
// rounded once: a linear layer's bias gradient.
void column_sums_accumulate(DType storage, void* out, const void* x, int rows, int cols,
                            DeviceScratch& scratch, cudaStream_t stream);

// ---- cuda_llama_ops.cu ------------------------------------------------------------------------

void swiglu_forward(DType storage, void* out, const void* gate_up, int rows, int hidden,
                    cudaStream_t stream);
void swiglu_backward(DType storage, void* dgate_up, const void* gate_up, const void* dout, int rows,
                     int hidden, GradientWrite write, cudaStream_t stream);
// rope_forward, or with inverse rope_backward (the transposed rotation).
void rope(DType storage, void* qkv, const float* cos, const float* sin, int batch, int seq_len,
          int num_heads, int num_kv_heads, int head_dim, bool inverse, cudaStream_t stream);

// ---- cuda_embedding.cu --------------------------------------------------------------------------

void token_embedding_forward(DType storage, void* out, const int32_t* tokens, const void* wte,
                             int num_tokens, int vocab_start, int vocab_local, int channels,
                             cudaStream_t stream);
void token_embedding_backward(DType storage, void* dwte, const void* dout, const int32_t* tokens,
                              int num_tokens, int vocab_start, int vocab_local, int channels,
                              DeviceScratch& scratch, cudaStream_t stream);
void position_embedding_forward(DType storage, void* out, const void* wpe, int batch, int seq_len,
                                int channels, cudaStream_t stream);
void position_embedding_backward(DType storage, void* dwpe, const void* dout, int batch,
                                 int seq_len, int channels, cudaStream_t stream);

// ---- cuda_attention.cu, cuda_attention_backward.cu ---------------------------------------------
// Fused (flash) attention; logsumexp and scratch fp32; head_dim <= 128
// (std::invalid_argument beyond). With tensor_cores, bf16 storage with
// head_dim 64 or 128 and 16-byte aligned tensors runs the bf16 tensor-core
// kernels (cuda_attention_tensor_core*.cu); everything else, and everything
// without tensor_cores, runs the fp32 FMA kernels on widened storage.

void attention_forward(DType storage, bool tensor_cores, void* out, float* logsumexp,
                       const void* qkv, int batch, int seq_len, int num_heads, int num_kv_heads,
                       int head_dim, cudaStream_t stream);
void attention_backward(DType storage, bool tensor_cores, void* dqkv, float* scratch,
                        const void* dout, const void* qkv, const void* out, const float* logsumexp,
                        int batch, int seq_len, int num_heads, int num_kv_heads, int head_dim,
                        GradientWrite write, cudaStream_t stream);

// ---- cuda_attention_dispatch.cu ---------------------------------------------------------------
// One Ops object's fused attention: per call, cuDNN's SDPA or the kernels
// above, as its AttentionChooser says (attention_choice.h); the same
// semantics as the launchers above.

class CudnnAttention;  // cudnn_attention.h

class AttentionDispatch {
 public:
  // scratch: the Ops object's, which holds cuDNN's workspace.
  AttentionDispatch(DType storage, AttentionSetting setting, cudaStream_t stream,
                    DeviceScratch& scratch);
  ~AttentionDispatch();
  AttentionDispatch(const AttentionDispatch&) = delete;
  AttentionDispatch& operator=(const AttentionDispatch&) = delete;

  void forward(void* out, float* logsumexp, const void* qkv, int batch, int seq_len, int heads,
               int kv_heads, int head_dim);
  void backward(void* dqkv, float* scratch, const void* dout, const void* qkv, const void* out,
                const float* logsumexp, int batch, int seq_len, int heads, int kv_heads,
                int head_dim, GradientWrite write);

 private:
  // Whether this call runs on cuDNN: the chooser says so for its shape, every
  // tensor is 16-byte aligned and cuDNN builds the shape's graphs (if it
  // cannot, or its handle cannot be made: std::runtime_error under
  // PARAPLAN_CUDA_ATTENTION=cudnn, else one line and the own kernels).
  bool on_cudnn(const AttentionShapeKey& key, std::initializer_list<const void*> tensors);

  DType storage_;
  cudaStream_t stream_;
  DeviceScratch& scratch_;
  AttentionChooser chooser_;
  std::unique_ptr<CudnnAttention> cudnn_;  // made when a shape first runs on cuDNN
  bool cudnn_unusable_ = false;            // making it failed (under auto)
};

// Says a line about the attention kernels once per process per distinct
// line (spdlog, info): that cuDNN is missing, or cannot run a shape
// (cudnn_library.cc).
void log_attention_notice(const std::string& line);

// ---- cuda_attention_block.cu, cuda_attention_block_backward.cu -------------------------------
// Attention by blocks (context parallelism, document masks): fp32
// accumulators, storage q, kv, dout, out; head_dim <= 128
// (std::invalid_argument beyond). The backward's row terms go to `scratch`.

void attention_block_forward(DType storage, float* out_accumulator, float* logsumexp, const void* q,
                             const void* kv, const int32_t* q_positions,
                             const int32_t* kv_positions, const int32_t* documents,
                             const Ops::AttentionBlockShape& shape, bool first,
                             cudaStream_t stream);
void attention_block_backward(DType storage, float* dq_accumulator, float* dkv_accumulator,
                              const void* dout, const void* out, const float* logsumexp,
                              const void* q, const void* kv, const int32_t* q_positions,
                              const int32_t* kv_positions, const int32_t* documents,
                              const Ops::AttentionBlockShape& shape, DeviceScratch& scratch,
                              cudaStream_t stream);

// ---- cuda_loss.cu -------------------------------------------------------------------------------
// Storage logits and dlogits, fp32 losses and row statistics. target_error is
// one device word holding ~0ull; a kernel that meets a target out of range
// stores there min((row << 32) | target bits) over the bad rows, without
// waiting; CudaOps::check_deferred_errors reads it, resets it and throws
// std::out_of_range as the CPU backend would have. CudaOps keeps two such
// words: the fused cross-entropy's, and the vocab-parallel statistics' (a
// negative target); adamw_runs (cuda_optimizer.cuh) reads both.
inline constexpr int kFusedLossError = 0, kShardStatsError = 1;
inline constexpr unsigned long long kNoTargetError = ~0ull;
// Throws the std::out_of_range the CPU backend would have for the two words
// read back (at least one set); vocab: the fused loss's vocabulary size.
[[noreturn]] void throw_target_error(const unsigned long long errors[2], int vocab);

// The loss ops' folded sum (Ops::softmax_cross_entropy's loss_sum): each
// block adds its rows' losses in double, in row order; the block totals go
// to partials (at most kSumOfSquaresBlocks blocks), and the last block to
// finish (by the ticket, one device word that starts at 0 and is left at 0
// for the next launch) adds them in block order to *total. total null: no
// sum.
struct LossSum {
  double* total = nullptr;
  double* partials = nullptr;
  unsigned int* ticket = nullptr;
};

void softmax_cross_entropy(DType storage, float* losses, void* dlogits, const void* logits,
                           const int32_t* targets, int rows, int vocab, float loss_scale,
                           const LossSum& sum, unsigned long long* target_error,
                           cudaStream_t stream);
void cross_entropy_shard_stats(DType storage, float* row_max, float* target_logit,
                               const void* logits, const int32_t* targets, int rows,
                               int vocab_local, int vocab_start, unsigned long long* target_error,
                               cudaStream_t stream);
void cross_entropy_shard_exp_sums(DType storage, float* exp_sum, const void* logits,
                                  const float* row_max, int rows, int vocab_local,
                                  cudaStream_t stream);
void cross_entropy_shard_finish(DType storage, float* losses, void* dlogits, const void* logits,
                                const int32_t* targets, const float* row_max, const float* exp_sum,
                                const float* target_logit, int rows, int vocab_local,
                                int vocab_start, float loss_scale, const LossSum& sum,
                                cudaStream_t stream);

// ---- device helpers (storage loads and stores: cuda_bf16.cuh) --------------------------------

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

#endif  // __CUDACC__

}  // namespace paraplan::kernels::cuda
