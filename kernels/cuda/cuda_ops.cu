// cuda_ops.cu: the CUDA backend of the op set in kernels/ops.h: the Ops class
// (one stream with its GEMM lane, cuda_gemm_lane.cuh; one storage dtype),
// memory, dispatch to the kernels of the other .cu files, and the linear
// layers' GEMMs. The weight gradients queued with linear_weight_gradients
// run on a second stream, ordered by events: after everything queued before
// them, and joined where the caller says (PARAPLAN_CUDA_OVERLAP=0 runs them
// in line, the before of a before/after).
//
// Storage: fp32 or bf16, fixed when the object is made; every kernel launcher
// takes the dtype and instantiates its kernels for float or __nv_bfloat16
// (cuda_bf16.cuh), computing in fp32 and rounding each storage output once.
// Linear layers run on cuBLASLt, each configuration's descriptors and
// algorithm built once and cached (cuda_gemm.cuh). fp32 storage: fp32 A/B/C/D with TF32
// tensor-core math when allowed (the default; PARAPLAN_CUDA_TF32=0 forces
// strict fp32, see cuda_device.cu). bf16 storage: bf16 A/B/C/D with
// CUBLAS_COMPUTE_32F and fp32 alpha/beta, so products accumulate in fp32 and
// D = round(A B + beta C) is rounded once; split-K reductions are restricted
// to ones that keep fp32 partials (no in-place or output-type reduction,
// which would round partial sums to bf16), and cublasGemmEx runs with
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION for the same reason.
// The forward bias is fused as CUBLASLT_EPILOGUE_BIAS (a storage-dtype bias
// vector) and the bias gradient as CUBLASLT_EPILOGUE_BGRADB on the
// weight-gradient GEMM, with an fp32 bias-gradient vector. The epilogue
// overwrites its bias-gradient vector, so it goes to fp32 scratch and is then
// added into dbias (backward ops accumulate), rounded once. When cuBLASLt
// offers no algorithm for a configuration (an unaligned bias, an unsupported
// type combination), the GEMM falls back to cublasGemmEx and the bias to a
// broadcast (forward; the GEMM then adds with beta = 1, one rounding) or a
// column-sum kernel (backward, fp32 sums, one rounding).
// linear_gelu_forward, linear_backward_gelu and linear_residual_forward run
// GELU (GELU_AUX_BIAS, DGELU) or the residual (the C operand) in the GEMM, on
// the fp32 sum before it is rounded, so their bits differ from the two-op
// path (CPU: tolerances), which they fall back to where cuBLASLt has no
// algorithm or PARAPLAN_CUDA_FUSED_GEMMS=0.
//
// Determinism: cuBLAS runs with atomics disallowed and an explicit workspace;
// cuBLASLt's reduction schemes (none, in-place with ordering counters, or
// workspace) are all sequential; the algorithm is chosen by the heuristic from
// the shapes and pointer alignments alone. So a given call is bitwise
// reproducible; a different row count (micro-batch size) may pick a different
// algorithm and change the last bits, as with OpenBLAS on the CPU.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_gemm.cuh"
#include "kernels/cuda/cuda_gemm_lane.cuh"
#include "kernels/cuda/cuda_graphs.cuh"
#include "kernels/cuda/cuda_kernels.cuh"
#include "kernels/cuda/cuda_optimizer.cuh"
#include "kernels/cuda/cuda_upload.cuh"
#include "kernels/ops.h"

namespace paraplan::kernels::cuda {

class CudaOps final : public Ops {
 public:
  CudaOps(int device, DType storage, const CudaOpsSettings& settings)
      : device_(device), storage_(storage), fused_gemms_(settings.fused_gemms), scratch_(nullptr) {
    try {
      PARAPLAN_CUDA_CHECK(cudaSetDevice(device_));
      // A blocking stream: it still orders against the legacy default stream
      // that other code (a communicator's plain cudaMemcpy) may use.
      PARAPLAN_CUDA_CHECK(cudaStreamCreate(&stream_));
      scratch_ = std::make_unique<DeviceScratch>(stream_);
      attention_ =
          std::make_unique<AttentionDispatch>(storage_, settings.attention, stream_, *scratch_);
      lane_ = std::make_unique<GemmLane>(stream_, storage_, settings.allow_tf32, *scratch_);
      if (settings.overlap_weight_gradients)
        side_ = std::make_unique<WeightGradientStream>(storage_, settings.allow_tf32);
      if (settings.launch_graphs) graphs_ = std::make_unique<LaunchGraphs>(stream_);
      uploads_ = std::make_unique<PinnedUploads>(stream_);
      adamw_runs_ = std::make_unique<AdamWRunTable>();
      // The partials of the fixed-order sums, and one more double: the
      // accumulator of sum_of_squares.
      PARAPLAN_CUDA_CHECK(cudaMalloc(&sum_partials_, (kSumOfSquaresBlocks + 1) * sizeof(double)));
      PARAPLAN_CUDA_CHECK(cudaMalloc(&target_errors_, 2 * sizeof(unsigned long long)));
      PARAPLAN_CUDA_CHECK(
          cudaMemsetAsync(target_errors_, 0xff, 2 * sizeof(unsigned long long), stream_));
      PARAPLAN_CUDA_CHECK(cudaMalloc(&loss_ticket_, sizeof(unsigned int)));
      PARAPLAN_CUDA_CHECK(cudaMemsetAsync(loss_ticket_, 0, sizeof(unsigned int), stream_));
      PARAPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaOps() override { release(); }
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  Backend backend() const override { return Backend::kCuda; }
  DType storage_dtype() const override { return storage_; }

  // ---- memory ---------------------------------------------------------------

  void* allocate(size_t bytes) override {
    void* pointer = nullptr;
    // A zero-byte request still gets a unique, freeable pointer.
    PARAPLAN_CUDA_CHECK(cudaMalloc(&pointer, bytes == 0 ? 1 : bytes));
    return pointer;
  }

  void deallocate(void* pointer) override {
    // Called from destructors (the memory tracker's, a stage's): report, never throw.
    const cudaError_t status = cudaFree(pointer);
    if (status != cudaSuccess) {
      std::fprintf(stderr, "paraplan: warning: cudaFree failed: %s\n", cudaGetErrorString(status));
    }
  }

  void copy_to_host(void* host_destination, const void* source, size_t bytes) override {
    if (bytes == 0) return;
    join_weight_gradients();  // ops.h: the host sees them done
    PARAPLAN_CUDA_CHECK(
        cudaMemcpyAsync(host_destination, source, bytes, cudaMemcpyDefault, stream_));
    PARAPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void copy_from_host(void* destination, const void* host_source, size_t bytes) override {
    if (bytes == 0) return;
    PARAPLAN_CUDA_CHECK(
        cudaMemcpyAsync(destination, host_source, bytes, cudaMemcpyDefault, stream_));
    // The caller may reuse its host buffer as soon as this returns.
    PARAPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void copy_from_host_async(void* destination, const void* host_source, size_t bytes) override {
    uploads_->upload(destination, host_source, bytes);
  }

  void copy(void* destination, const void* source, size_t bytes) override {
    if (bytes == 0) return;
    PARAPLAN_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, stream_));
  }

  void zero_bytes(void* x, size_t bytes) override {
    if (bytes == 0) return;
    PARAPLAN_CUDA_CHECK(cudaMemsetAsync(x, 0, bytes, stream_));
  }

  void synchronize() override {
    join_weight_gradients();
    PARAPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void check_deferred_errors() override {
    unsigned long long errors[2];
    PARAPLAN_CUDA_CHECK(
        cudaMemcpyAsync(errors, target_errors_, sizeof(errors), cudaMemcpyDeviceToHost, stream_));
    PARAPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (errors[kFusedLossError] == kNoTargetError && errors[kShardStatsError] == kNoTargetError)
      return;
    PARAPLAN_CUDA_CHECK(
        cudaMemsetAsync(target_errors_, 0xff, 2 * sizeof(unsigned long long), stream_));
    PARAPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    throw_target_error(errors, loss_vocab_);
  }

  size_t internal_bytes() const override {
    return GemmLane::workspace_bytes() + (side_ ? side_->internal_bytes() : 0) +
           scratch_->capacity() + (kSumOfSquaresBlocks + 1) * sizeof(double) +
           2 * sizeof(unsigned long long) + sizeof(unsigned int) + adamw_runs_->device_bytes();
  }

  void convert_from_float(void* out, const float* in, size_t n) override {
    cuda::convert_from_float(storage_, out, in, n, stream_);
  }
  void convert_to_float(float* out, const void* in, size_t n) override {
    cuda::convert_to_float(storage_, out, in, n, stream_);
  }

  // ---- device -----------------------------------------------------------------

  std::string device_name() const override { return cuda_device_name(device_); }
  std::string device_identity() const override { return cuda_device_bus_id(device_); }

  void* stream() const override { return stream_; }
  void* create_mark() override {
    cudaEvent_t event = nullptr;
    PARAPLAN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }
  void record_mark(void* mark) override {
    join_weight_gradients();  // the mark covers the work queued so far, on both streams
    PARAPLAN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(mark), stream_));
  }
  void destroy_mark(void* mark) override {
    if (mark != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(mark));
  }

  void* allocate_host(size_t bytes) override {
    void* pointer = nullptr;
    PARAPLAN_CUDA_CHECK(cudaMallocHost(&pointer, bytes == 0 ? 1 : bytes));
    return pointer;
  }

  void deallocate_host(void* pointer) override {
    const cudaError_t status = cudaFreeHost(pointer);
    if (status != cudaSuccess) {
      std::fprintf(stderr, "paraplan: warning: cudaFreeHost failed: %s\n",
                   cudaGetErrorString(status));
    }
  }

  // ---- embeddings (cuda_embedding.cu) -----------------------------------------

  void token_embedding_forward(void* out, const int32_t* tokens, const void* wte, int num_tokens,
                               int vocab_start, int vocab_local, int channels) override {
    cuda::token_embedding_forward(storage_, out, tokens, wte, num_tokens, vocab_start, vocab_local,
                                  channels, stream_);
  }

  void token_embedding_backward(void* dwte, const void* dout, const int32_t* tokens, int num_tokens,
                                int vocab_start, int vocab_local, int channels) override {
    cuda::token_embedding_backward(storage_, dwte, dout, tokens, num_tokens, vocab_start,
                                   vocab_local, channels, *scratch_, stream_);
  }

  void position_embedding_forward(void* out, const void* wpe, int batch, int seq_len,
                                  int channels) override {
    cuda::position_embedding_forward(storage_, out, wpe, batch, seq_len, channels, stream_);
  }

  void position_embedding_backward(void* dwpe, const void* dout, int batch, int seq_len,
                                   int channels) override {
    cuda::position_embedding_backward(storage_, dwpe, dout, batch, seq_len, channels, stream_);
  }

  // ---- layer norm and RMS norm (cuda_layernorm.cu) ------------------------------

  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int rows, int channels, float epsilon) override {
    cuda::layernorm_forward(storage_, out, mean, rstd, inp, weight, bias, rows, channels, epsilon,
                            stream_);
  }

  void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                          const void* weight, const float* mean, const float* rstd, int rows,
                          int channels) override {
    cuda::layernorm_backward(storage_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows,
                             channels, *scratch_, stream_);
  }

  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int rows,
                       int channels, float epsilon) override {
    cuda::rmsnorm_forward(storage_, out, rstd, inp, weight, rows, channels, epsilon, stream_);
  }

  void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                        const void* weight, const float* rstd, int rows, int channels) override {
    cuda::rmsnorm_backward(storage_, dinp, dweight, dout, inp, weight, rstd, rows, channels,
                           *scratch_, stream_);
  }

  // ---- linear -------------------------------------------------------------------------
  // Row-major [rows, features] buffers are column-major [features, rows] to
  // cuBLAS, and the weight [out, in] is column-major [in, out]:
  //   forward  out^T[out, rows]  = W^T-op(weight)[out, in] * inp^T[in, rows]
  //   dinp     dinp^T[in, rows] (+)= weight[in, out] * dout^T[out, rows]  (beta 1, or 0 to
  //            overwrite)
  //   dweight  dweight^T[in, out] += inp^T[in, rows] * op_T(dout^T)[rows, out]
  // Leading dimensions are in elements, whatever the storage dtype.

  void linear_forward(void* out, const void* inp, const void* weight, const void* bias, int rows,
                      int in_features, int out_features) override {
    if (rows <= 0 || out_features <= 0) return;
    if (in_features <= 0) {
      // No products: the output is the bias (or zero), as on the CPU.
      if (bias != nullptr) {
        broadcast_rows(storage_, out, bias, rows, out_features, stream_);
      } else {
        zero_bytes(out, storage_bytes(static_cast<size_t>(rows) * out_features));
      }
      return;
    }
    if (bias != nullptr && is_aligned16(bias) &&
        lane_->lt().run(CUBLAS_OP_T, CUBLAS_OP_N, out_features, rows, in_features, weight,
                        in_features, inp, in_features, out, out_features, 0.0f,
                        CUBLASLT_EPILOGUE_BIAS, bias, lane_->data_type())) {
      return;
    }
    float beta = 0.0f;
    if (bias != nullptr) {
      // out = round(inp weight^T + bias): the bias is a storage value, exact in C.
      broadcast_rows(storage_, out, bias, rows, out_features, stream_);
      beta = 1.0f;
    }
    lane_->gemm(CUBLAS_OP_T, CUBLAS_OP_N, out_features, rows, in_features, weight, in_features, inp,
                in_features, out, out_features, beta);
  }

  // The fused linear layers (cuda_gemm.cuh), else the ops one by one.
  void linear_residual_forward(void* out, const void* inp, const void* weight, const void* bias,
                               const void* residual, int rows, int in_features,
                               int out_features) override {
    if (fused_gemms_ && lane_->lt().linear_residual(out, inp, weight, bias, residual, rows,
                                                    in_features, out_features))
      return;
    Ops::linear_residual_forward(out, inp, weight, bias, residual, rows, in_features, out_features);
  }
  void linear_gelu_forward(void* pre_gelu, void* out, const void* inp, const void* weight,
                           const void* bias, int rows, int in_features, int out_features) override {
    if (fused_gemms_ &&
        lane_->lt().linear_gelu(pre_gelu, out, inp, weight, bias, rows, in_features, out_features))
      return;
    Ops::linear_gelu_forward(pre_gelu, out, inp, weight, bias, rows, in_features, out_features);
  }
  void linear_backward_gelu(void* dpre_gelu, const void* dout, const void* weight,
                            const void* pre_gelu, int rows, int in_features,
                            int out_features) override {
    if (fused_gemms_ && lane_->lt().linear_dgelu(dpre_gelu, dout, weight, pre_gelu, rows,
                                                 in_features, out_features))
      return;
    Ops::linear_backward_gelu(dpre_gelu, dout, weight, pre_gelu, rows, in_features, out_features);
  }

  void linear_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                       const void* weight, int rows, int in_features, int out_features,
                       GradientWrite dinp_write) override {
    const bool overwrite = dinp_write == GradientWrite::kOverwrite;
    if (dinp != nullptr && overwrite && rows > 0 && in_features > 0 && out_features <= 0) {
      // A sum over no products: overwriting writes its zeros, as on the CPU.
      zero_bytes(dinp, storage_bytes(static_cast<size_t>(rows) * in_features));
    }
    if (rows <= 0 || out_features <= 0) return;
    if (dinp != nullptr && in_features > 0) {
      lane_->gemm(CUBLAS_OP_N, CUBLAS_OP_N, in_features, rows, out_features, weight, in_features,
                  dout, out_features, dinp, in_features, overwrite ? 0.0f : 1.0f);
    }
    lane_->weight_gradients(dweight, dbias, dout, inp, rows, in_features, out_features);
  }

  // On the second stream (cuda_gemm_lane.cuh), or on this one with
  // PARAPLAN_CUDA_OVERLAP=0.
  void linear_weight_gradients(void* dweight, void* dbias, const void* dout, const void* inp,
                               int rows, int in_features, int out_features) override {
    if (side_) {
      side_->run(stream_, dweight, dbias, dout, inp, rows, in_features, out_features);
    } else {
      lane_->weight_gradients(dweight, dbias, dout, inp, rows, in_features, out_features);
    }
  }
  void join_weight_gradients() override {
    if (side_) side_->join(stream_);
  }

  // CUDA graphs per key (cuda_graphs.cuh) with PARAPLAN_CUDA_GRAPHS=1.
  void run_recorded(uint64_t key, const std::function<void()>& launches) override {
    if (!graphs_) {
      launches();
      return;
    }
    // Weight gradients queued before are joined outside the graph: a capture
    // may not wait on an event recorded before it, and a graph's side branch
    // is ordered only after the graph's own work. Those queued inside join
    // inside, so every fork is joined before the capture ends.
    join_weight_gradients();
    graphs_->run(key, [&] {
      launches();
      join_weight_gradients();
    });
  }
  bool records_launches() const override { return graphs_ != nullptr; }
  void forget_recorded() override {
    if (graphs_) graphs_->forget();
  }

  // ---- elementwise (cuda_elementwise.cu) -------------------------------------------------

  void gelu_forward(void* out, const void* inp, size_t n) override {
    cuda::gelu_forward(storage_, out, inp, n, stream_);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n,
                     GradientWrite write) override {
    cuda::gelu_backward(storage_, dinp, inp, dout, n, write, stream_);
  }
  void residual_forward(void* out, const void* a, const void* b, size_t n) override {
    cuda::residual_forward(storage_, out, a, b, n, stream_);
  }
  void accumulate(void* dx, const void* dout, size_t n) override {
    cuda::accumulate(storage_, dx, dout, n, stream_);
  }
  void accumulate_into_float(float* x, const void* y, size_t n) override {
    cuda::accumulate_into_float(storage_, x, y, n, stream_);
  }
  void accumulate_float32(float* x, const float* y, size_t n) override {
    // fp32 "storage" widens nothing: one fp32 addition per element.
    cuda::accumulate_into_float(DType::kFloat32, x, y, n, stream_);
  }
  void scale(void* x, float factor, size_t n) override {
    cuda::scale(storage_, x, factor, n, stream_);
  }

  // ---- SwiGLU and rotary embedding (cuda_llama_ops.cu) ----------------------------------------

  void swiglu_forward(void* out, const void* gate_up, int rows, int hidden) override {
    cuda::swiglu_forward(storage_, out, gate_up, rows, hidden, stream_);
  }
  void swiglu_backward(void* dgate_up, const void* gate_up, const void* dout, int rows, int hidden,
                       GradientWrite write) override {
    cuda::swiglu_backward(storage_, dgate_up, gate_up, dout, rows, hidden, write, stream_);
  }
  void rope_forward(void* qkv, const float* cos, const float* sin, int batch, int seq_len,
                    int num_heads, int num_kv_heads, int head_dim) override {
    cuda::rope(storage_, qkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim, false,
               stream_);
  }
  void rope_backward(void* dqkv, const float* cos, const float* sin, int batch, int seq_len,
                     int num_heads, int num_kv_heads, int head_dim) override {
    cuda::rope(storage_, dqkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim, true,
               stream_);
  }

  // ---- attention (cuda_attention_dispatch.cu: cuDNN's SDPA or cuda_attention*.cu) ------------

  void attention_forward(void* out, float* logsumexp, const void* qkv, int batch, int seq_len,
                         int num_heads, int num_kv_heads, int head_dim) override {
    attention_->forward(out, logsumexp, qkv, batch, seq_len, num_heads, num_kv_heads, head_dim);
  }

  void attention_backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                          const void* out, const float* logsumexp, int batch, int seq_len,
                          int num_heads, int num_kv_heads, int head_dim,
                          GradientWrite write) override {
    attention_->backward(dqkv, scratch, dout, qkv, out, logsumexp, batch, seq_len, num_heads,
                         num_kv_heads, head_dim, write);
  }

  // ---- attention by blocks (cuda_attention_block*.cu) -----------------------------------------

  void attention_block_forward(float* out_accumulator, float* logsumexp, const void* q,
                               const void* kv, const int32_t* q_positions,
                               const int32_t* kv_positions, const int32_t* documents,
                               const AttentionBlockShape& shape, bool first) override {
    cuda::attention_block_forward(storage_, out_accumulator, logsumexp, q, kv, q_positions,
                                  kv_positions, documents, shape, first, stream_);
  }

  void attention_block_backward(float* dq_accumulator, float* dkv_accumulator, const void* dout,
                                const void* out, const float* logsumexp, const void* q,
                                const void* kv, const int32_t* q_positions,
                                const int32_t* kv_positions, const int32_t* documents,
                                const AttentionBlockShape& shape) override {
    cuda::attention_block_backward(storage_, dq_accumulator, dkv_accumulator, dout, out, logsumexp,
                                   q, kv, q_positions, kv_positions, documents, shape, *scratch_,
                                   stream_);
  }

  void copy_rows(void* destination, size_t destination_stride, const void* source,
                 size_t source_stride, size_t rows, size_t row_bytes) override {
    if (rows == 0 || row_bytes == 0) return;
    PARAPLAN_CUDA_CHECK(cudaMemcpy2DAsync(destination, destination_stride, source, source_stride,
                                          row_bytes, rows, cudaMemcpyDefault, stream_));
  }

  // ---- loss (cuda_loss.cu) -------------------------------------------------------------------

  void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int rows, int vocab, float loss_scale,
                             double* loss_sum) override {
    loss_vocab_ = vocab;  // for the deferred error's message
    cuda::softmax_cross_entropy(storage_, losses, dlogits, logits, targets, rows, vocab, loss_scale,
                                loss_sum_of(loss_sum), target_errors_ + kFusedLossError, stream_);
  }

  void cross_entropy_shard_stats(float* row_max, float* target_logit, const void* logits,
                                 const int32_t* targets, int rows, int vocab_local,
                                 int vocab_start) override {
    cuda::cross_entropy_shard_stats(storage_, row_max, target_logit, logits, targets, rows,
                                    vocab_local, vocab_start, target_errors_ + kShardStatsError,
                                    stream_);
  }

  void cross_entropy_shard_exp_sums(float* exp_sum, const void* logits, const float* row_max,
                                    int rows, int vocab_local) override {
    cuda::cross_entropy_shard_exp_sums(storage_, exp_sum, logits, row_max, rows, vocab_local,
                                       stream_);
  }

  void cross_entropy_shard_finish(float* losses, void* dlogits, const void* logits,
                                  const int32_t* targets, const float* row_max,
                                  const float* exp_sum, const float* target_logit, int rows,
                                  int vocab_local, int vocab_start, float loss_scale,
                                  double* loss_sum) override {
    cuda::cross_entropy_shard_finish(storage_, losses, dlogits, logits, targets, row_max, exp_sum,
                                     target_logit, rows, vocab_local, vocab_start, loss_scale,
                                     loss_sum_of(loss_sum), stream_);
  }

  // ---- optimizer ---------------------------------------------------------------------------

  void adamw(float* master, void* params, const void* grads, float* first_moment,
             float* second_moment, size_t n, const AdamWStep& hyperparameters) override {
    join_weight_gradients();  // the gradients it reads
    cuda::adamw(storage_, storage_, master, params, grads, first_moment, second_moment, n,
                hyperparameters, stream_);
  }
  void adamw_float_gradients(float* master, void* params, const float* grads, float* first_moment,
                             float* second_moment, size_t n,
                             const AdamWStep& hyperparameters) override {
    join_weight_gradients();
    cuda::adamw(storage_, DType::kFloat32, master, params, grads, first_moment, second_moment, n,
                hyperparameters, stream_);
  }

  void adamw_runs(const std::vector<AdamWRun>& runs, bool float_gradients,
                  const AdamWStep& hyperparameters, const GradientClip& clip) override {
    join_weight_gradients();
    adamw_runs_->set(runs, *uploads_);
    cuda::adamw_runs(storage_, float_gradients ? DType::kFloat32 : storage_, *adamw_runs_,
                     hyperparameters, clip, target_errors_, stream_);
  }

  double sum_of_squares(const void* x, size_t n) override {
    join_weight_gradients();  // a norm of half-made gradients would pass unseen
    double* accumulator = sum_partials_ + kSumOfSquaresBlocks;
    PARAPLAN_CUDA_CHECK(cudaMemsetAsync(accumulator, 0, sizeof(double), stream_));
    accumulate_sum_of_squares(accumulator, x, n);
    double result = 0.0;
    PARAPLAN_CUDA_CHECK(
        cudaMemcpyAsync(&result, accumulator, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    PARAPLAN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return result;
  }

  // The gradient norm and AdamW read gradients: the queued ones first (the
  // runtime joins before its reductions; this holds for any other caller).
  void accumulate_sum_of_squares(double* accumulator, const void* x, size_t n) override {
    join_weight_gradients();
    cuda::accumulate_sum_of_squares(storage_, accumulator, x, n, sum_partials_, stream_);
  }
  void accumulate_float_sum_of_squares(double* accumulator, const float* x, size_t n) override {
    join_weight_gradients();
    cuda::accumulate_sum_of_squares(DType::kFloat32, accumulator, x, n, sum_partials_, stream_);
  }

  void accumulate_sum(double* accumulator, const float* x, size_t n) override {
    cuda::accumulate_sum(accumulator, x, n, sum_partials_, stream_);
  }

 private:
  // The loss kernels' folded sum into total (none where it is null), over the
  // fixed-order sums' partials: every op is on stream_, so they are free.
  cuda::LossSum loss_sum_of(double* total) const {
    return total == nullptr ? cuda::LossSum{} : cuda::LossSum{total, sum_partials_, loss_ticket_};
  }

  // Frees everything; safe on a partly constructed object; never throws.
  void release() noexcept {
    // First: a replayed graph on stream_ holds the side lane's GEMMs too.
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    graphs_.reset();
    side_.reset();       // waits for its stream
    attention_.reset();  // cuDNN's handle and graphs, before the stream
    lane_.reset();       // before the scratch it was given
    scratch_.reset();
    adamw_runs_.reset();
    uploads_.reset();
    if (target_errors_ != nullptr) cudaFree(target_errors_);
    if (sum_partials_ != nullptr) cudaFree(sum_partials_);
    if (loss_ticket_ != nullptr) cudaFree(loss_ticket_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    target_errors_ = nullptr;
    sum_partials_ = nullptr;
    loss_ticket_ = nullptr;
    stream_ = nullptr;
  }

  int device_;
  DType storage_;
  bool fused_gemms_;  // GELU and residuals in the GEMMs (PARAPLAN_CUDA_FUSED_GEMMS)
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceScratch> scratch_;
  // cuDNN's SDPA or the own kernels, per shape (PARAPLAN_CUDA_ATTENTION).
  std::unique_ptr<AttentionDispatch> attention_;
  std::unique_ptr<GemmLane> lane_;  // this stream's GEMMs
  // The weight gradients beside the backward (PARAPLAN_CUDA_OVERLAP); null: on stream_.
  std::unique_ptr<WeightGradientStream> side_;
  std::unique_ptr<LaunchGraphs> graphs_;  // PARAPLAN_CUDA_GRAPHS; null: plain launches
  std::unique_ptr<PinnedUploads> uploads_;
  std::unique_ptr<AdamWRunTable> adamw_runs_;  // the optimizer's runs, on the device
  double* sum_partials_ = nullptr;
  unsigned long long* target_errors_ = nullptr;  // kFusedLossError, kShardStatsError
  unsigned int* loss_ticket_ = nullptr;          // the loss sum's (cuda::LossSum)
  int loss_vocab_ = 0;                           // the fused loss's last vocabulary size
};

std::unique_ptr<Ops> create_cuda_ops(int device, DType storage, const CudaOpsSettings& settings) {
  return std::make_unique<CudaOps>(device, storage, settings);
}

}  // namespace paraplan::kernels::cuda
