// ops.h: the op set the runtime is written against, with a CPU backend
// (kernels/cpu) and a CUDA backend (kernels/cuda).
//
// Conventions, llm.c style:
// - Plain pointers and sizes. Pointers are host memory for the CPU backend and
//   device memory for the CUDA backend; allocate() returns the right kind.
// - Row-major tensors. Linear weights are [out_features, in_features] (the
//   PyTorch nn.Linear layout), so a column-parallel shard is a contiguous block.
// - Forward ops overwrite their outputs.
// - Backward ops ACCUMULATE (+=) into every parameter gradient they produce
//   (weights sum over micro-batches; the caller zeroes them once per step), and
//   into the input gradients of the norms and embeddings (what makes residual
//   connections free). The input gradient of linear_backward (dinp),
//   gelu_backward, swiglu_backward and attention_backward is written as the
//   caller asks (GradientWrite below): accumulated, or overwritten, so a buffer
//   that starts a new gradient needs no zeroing first. Overwriting gives what
//   accumulating into zeros gives (0 + g: the same values; a GEMM's exact
//   zero may come out as -0 instead of +0).
// - Every op is deterministic: the same inputs give bitwise the same outputs.
//
// Mixed precision: an Ops object has one storage dtype (kernels/dtype.h),
// fixed when it is made. Tensors typed `void*` here are storage tensors
// (weights, activations, gradients, logits) holding elements of that dtype;
// tensors typed `float*` are fp32 whatever the storage dtype (LayerNorm
// mean/rstd, attention logsumexp and its scratch, losses, cross-entropy row
// statistics, master weights, AdamW moments). Every op computes in fp32: it
// widens its storage inputs, and rounds each storage output once (to nearest
// even) when it stores it, accumulating outputs included: dx += y stores
// round(float(dx) + y). So a bf16 op equals the fp32 op on the same bf16
// inputs with its outputs rounded, on both backends (GEMMs: bf16 inputs,
// fp32 accumulation, as cuBLAS with CUBLAS_COMPUTE_32F).
//
// Host synchronization: synchronize(), copy_to_host(), copy_from_host(),
// sum_of_squares() and check_deferred_errors() wait for the device (on the
// CUDA backend); every other op is queued on the ops' stream and returns at
// once. A training step needs only a few of them, whatever its micro-batch
// and layer counts (SyncCountingOps in sync_counting_ops.h counts them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/kernel_scratch.h"
#include "kernels/dtype.h"

namespace paraplan::kernels {

enum class Backend { kCpu, kCuda };

const char* backend_name(Backend backend);

// How a backward op stores an input gradient g (linear_backward's dinp,
// gelu_backward, swiglu_backward, attention_backward):
// - kAccumulate: dx += g, rounded once (storage dx = round(float(dx) + g));
// - kOverwrite: dx = round(0 + g), dx never read (it may hold anything, NaN
//   included): bitwise what kAccumulate gives on a zeroed dx, up to the sign
//   of an exact zero from a GEMM (cuBLAS and OpenBLAS with beta = 0).
enum class GradientWrite { kAccumulate, kOverwrite };

// Occurrences of one token summed together before being added, in
// token_embedding_backward's order (below): the GPU sums each segment in its
// own block, so a run of n occurrences is n / 32 sums in parallel (the
// scratch of their sums: common/kernel_scratch.h).
constexpr int kTokenEmbeddingSegment = static_cast<int>(kernel_scratch::kTokenEmbeddingSegment);

// One AdamW step's settings (Ops::adamw). step counts from 1.
struct AdamWStep {
  float learning_rate = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0;
  int step = 1;
  float gradient_scale = 1.0f;  // every gradient is multiplied by it first
};

// 1 - beta^step, computed in double and rounded to float: every backend's
// AdamW divides by these same floats.
float adamw_bias_correction(float beta, int step);

// One run of parameters for Ops::adamw_runs: n elements at each pointer, as
// Ops::adamw takes them, with the run's own weight decay.
struct AdamWRun {
  float* master = nullptr;
  void* params = nullptr;       // storage; with fp32 storage possibly master itself
  const void* grads = nullptr;  // storage dtype, or fp32 (adamw_runs' float_gradients)
  float* first_moment = nullptr;
  float* second_moment = nullptr;
  size_t n = 0;
  float weight_decay = 0;
};

// Global-norm clipping as Ops::adamw_runs applies it: where max_norm > 0 and
// clip_scale (below) of *sum_of_squares is under 1, every gradient is
// multiplied by it. sum_of_squares is one double of backend memory (the
// device on CUDA, where the backend reads it itself: no host round trip).
struct GradientClip {
  const double* sum_of_squares = nullptr;  // null: no clipping
  float max_norm = 0;                      // 0: no clipping
};

// torch's clip_grad_norm_ factor, max_norm / (sqrt(sum_of_squares) + 1e-6),
// in double, rounded to float; 1 where it is not below 1 or max_norm is 0.
// The CUDA kernel computes the same expression on the device.
float clip_scale(double sum_of_squares, float max_norm);

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Backend backend() const = 0;
  // The element type of every storage (void*) tensor the ops take.
  virtual DType storage_dtype() const = 0;
  size_t storage_bytes(size_t elements) const { return elements * dtype_bytes(storage_dtype()); }

  // ---- memory ---------------------------------------------------------------
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* pointer) = 0;
  virtual void copy_to_host(void* host_destination, const void* source, size_t bytes) = 0;
  // Waits until the copy is done: the host buffer may then be reused.
  virtual void copy_from_host(void* destination, const void* host_source, size_t bytes) = 0;
  // The same without waiting: the host buffer may still be reused as soon as
  // the call returns (the CUDA backend copies it into pinned staging memory,
  // double-buffered, and the transfer runs in stream order).
  virtual void copy_from_host_async(void* destination, const void* host_source, size_t bytes) = 0;
  virtual void copy(void* destination, const void* source, size_t bytes) = 0;
  // Zeroes bytes of backend memory (a storage tensor: storage_bytes(n); fp32: 4n).
  virtual void zero_bytes(void* x, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Throws, once, the first error an op recorded on the device instead of
  // throwing at once (the CUDA loss kernels' targets outside the vocabulary),
  // and clears it. Waits for the device; meant for once per step. The CPU
  // backend throws at once, so it has nothing to report.
  virtual void check_deferred_errors() {}
  // Device memory the backend allocated for itself (cuBLAS workspace, kernel
  // scratch, staging), not through allocate(): the memory tracker adds it.
  virtual size_t internal_bytes() const { return 0; }
  // Backend memory: out (storage) = in (fp32) rounded; out (fp32) = in (storage).
  virtual void convert_from_float(void* out, const float* in, size_t n) = 0;
  virtual void convert_to_float(float* out, const void* in, size_t n) = 0;

  // ---- device ---------------------------------------------------------------
  // What the ops run on, for logs and profile provenance ("NVIDIA H100 80GB
  // HBM3", "cpu").
  virtual std::string device_name() const = 0;
  // Names the physical device among the processes of one host (the PCI bus id
  // for CUDA), so ranks can tell that they share a GPU. Empty for the CPU
  // backend: its ranks share cores, not a device.
  virtual std::string device_identity() const = 0;
  // The stream the ops are ordered on (a cudaStream_t for CUDA, null for the
  // CPU), so a device communicator can order its work after theirs.
  virtual void* stream() const { return nullptr; }
  // Marks: a point in the ops' stream that another stream (a communicator's)
  // can wait for without the host waiting (a cudaEvent_t for CUDA).
  // record_mark(m) moves m to the work queued so far; a mark never recorded
  // is reached at once. Null on the CPU, whose ops finish before returning.
  virtual void* create_mark() { return nullptr; }
  virtual void record_mark(void* /*mark*/) {}
  virtual void destroy_mark(void* /*mark*/) {}
  // Host memory for staging transfers: page-locked for CUDA, so copies between
  // it and the device run at full speed and asynchronously.
  virtual void* allocate_host(size_t bytes) = 0;
  virtual void deallocate_host(void* pointer) = 0;

  // ---- embeddings -------------------------------------------------------------
  // out[i, :] = wte[tokens[i] - vocab_start, :] when tokens[i] lies in
  // [vocab_start, vocab_start + vocab_local), else 0. num_tokens = B*T rows.
  // (vocab_start = 0, vocab_local = vocab gives the ordinary lookup.)
  virtual void token_embedding_forward(void* out, const int32_t* tokens, const void* wte,
                                       int num_tokens, int vocab_start, int vocab_local,
                                       int channels) = 0;
  // dwte[tokens[i] - vocab_start, :] += dout[i, :] for tokens in range, in one
  // summation order on every backend (deterministic, bitwise across backends in
  // fp32): a row's occurrences in ascending i, in segments of
  // kTokenEmbeddingSegment. The first segment adds onto the row's value; each
  // later one is summed from zero on its own and then added, in order:
  //   ((row + d_0 + ... + d_31) + (d_32 + ... + d_63)) + (d_64 + ...) ...
  // so a frequent token's ("the", ",") occurrences sum in parallel on a GPU. In
  // fp32; bf16 storage widens the row once and rounds it once.
  virtual void token_embedding_backward(void* dwte, const void* dout, const int32_t* tokens,
                                        int num_tokens, int vocab_start, int vocab_local,
                                        int channels) = 0;
  // out[b, t, :] += wpe[t, :] for a [B, T, C] activation.
  virtual void position_embedding_forward(void* out, const void* wpe, int batch, int seq_len,
                                          int channels) = 0;
  // dwpe[t, :] += sum_b dout[b, t, :].
  virtual void position_embedding_backward(void* dwpe, const void* dout, int batch, int seq_len,
                                           int channels) = 0;

  // ---- layer norm ---------------------------------------------------------------
  // out = (inp - mean) * rstd * weight + bias over the last dimension of [rows, C].
  // mean and rstd ([rows]) are saved for backward.
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int rows, int channels,
                                 float epsilon) = 0;
  virtual void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                                  const void* inp, const void* weight, const float* mean,
                                  const float* rstd, int rows, int channels) = 0;

  // ---- RMS norm (Llama) ---------------------------------------------------------------------
  // out = inp * rstd * weight over the last dimension of [rows, C], rstd = 1 /
  // sqrt(mean(inp^2) + epsilon) ([rows], saved for backward). No mean, no bias.
  virtual void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight,
                               int rows, int channels, float epsilon) = 0;
  // dinp += d(out)/d(inp)^T dout; dweight += sum_rows dout * inp * rstd.
  virtual void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                                const void* weight, const float* rstd, int rows, int channels) = 0;

  // ---- linear -------------------------------------------------------------------------
  // out[rows, out_features] = inp[rows, in_features] @ weight^T + bias (bias may be null).
  virtual void linear_forward(void* out, const void* inp, const void* weight, const void* bias,
                              int rows, int in_features, int out_features) = 0;
  // dinp (+)= dout @ weight (as dinp_write says); dweight += dout^T @ inp;
  // dbias += sum_rows dout. Any of dinp, dweight, dbias may be null to skip it
  // (dinp_write is then ignored).
  virtual void linear_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                               const void* inp, const void* weight, int rows, int in_features,
                               int out_features, GradientWrite dinp_write) = 0;

  // A linear layer whose output joins the residual stream (an attention or
  // MLP output projection): out = residual + (inp @ weight^T + bias), bias
  // may be null, [rows, out_features]; out overlaps neither inp nor
  // residual. What linear_forward then residual_forward give; the CUDA
  // backend adds the residual as the GEMM's C operand (one pass, one
  // rounding, instead of a second pass over three tensors).
  virtual void linear_residual_forward(void* out, const void* inp, const void* weight,
                                       const void* bias, const void* residual, int rows,
                                       int in_features, int out_features);
  // A linear layer followed by GELU (GPT-2's MLP up-projection): pre_gelu =
  // inp @ weight^T + bias (bias may be null), out = gelu(pre_gelu), both
  // [rows, out_features]: what linear_forward then gelu_forward give. The
  // CUDA backend computes both in the GEMM's epilogue (cuBLASLt
  // GELU_AUX_BIAS: one pass over the output instead of three), its GELU from
  // the unrounded sum.
  virtual void linear_gelu_forward(void* pre_gelu, void* out, const void* inp, const void* weight,
                                   const void* bias, int rows, int in_features, int out_features);
  // The input gradient of a linear layer whose input was gelu(pre_gelu),
  // carried through the GELU: dpre_gelu = gelu'(pre_gelu) * (dout @ weight),
  // overwritten, [rows, in_features]: what linear_backward's dinp (written
  // into dpre_gelu) then gelu_backward in place give. The CUDA backend
  // applies gelu' in the GEMM's epilogue (cuBLASLt DGELU). The layer's
  // weight and bias gradients are linear_backward's, with dinp null.
  virtual void linear_backward_gelu(void* dpre_gelu, const void* dout, const void* weight,
                                    const void* pre_gelu, int rows, int in_features,
                                    int out_features);

  // ---- weight gradients beside the backward ------------------------------------------
  // A linear layer's weight and bias gradients (linear_backward with dinp
  // null: dweight += dout^T @ inp, dbias += sum_rows dout; dbias may be
  // null) queued where they may run beside the ops that follow: the CUDA
  // backend puts them on a second stream, after every op queued before the
  // call, so they fill the GPU beside memory-bound kernels. Until the next
  // join_weight_gradients() no op may write dout or inp, or read or write
  // dweight or dbias; after it every op sees them done, as do synchronize()
  // and copy_to_host(). The default runs them at once (the CPU backend, whose
  // ops finish before returning; the same bits either way).
  virtual void linear_weight_gradients(void* dweight, void* dbias, const void* dout,
                                       const void* inp, int rows, int in_features,
                                       int out_features);
  virtual void join_weight_gradients() {}

  // ---- recorded launches -------------------------------------------------------------
  // Runs launches(), the ops of one compute step (a micro-batch's forward or
  // backward), as the backend sees fit. The CUDA backend with
  // PARAPLAN_CUDA_GRAPHS=1 records them into a CUDA graph the second time a
  // key is seen (the first run fills every cache and workspace) and from then
  // on launches that graph instead of calling launches(): one launch for
  // hundreds of kernels. So for a key, launches() must queue the same ops on
  // the same buffers with the same arguments every time; it must not wait for
  // the device, copy to or from the host, or read back a value; and nothing
  // the caller needs may happen on the host inside it, as a replay skips the
  // host. A launches() that breaks the recording is run as it is, from then
  // on, for its key. Weight gradients queued before the call are joined at
  // its start, those queued inside it at its end. A graph keeps the buffers'
  // addresses: a key must not outlive them (a new stage, new keys). The
  // default calls launches() every time.
  virtual void run_recorded(uint64_t /*key*/, const std::function<void()>& launches) { launches(); }
  // Whether run_recorded may replay instead of calling launches().
  virtual bool records_launches() const { return false; }
  // Drops every recording (the next run of each key is plain again): the
  // buffers they used may be gone. A new schedule executor calls it.
  virtual void forget_recorded() {}

  // ---- elementwise -----------------------------------------------------------------------
  // GELU, tanh approximation (as GPT-2).
  virtual void gelu_forward(void* out, const void* inp, size_t n) = 0;
  // dinp (+)= gelu'(inp) * dout, as write says.
  virtual void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n,
                             GradientWrite write) = 0;
  // out = a + b.
  virtual void residual_forward(void* out, const void* a, const void* b, size_t n) = 0;
  // dx += dout (the residual backward for both operands, one call each).
  virtual void accumulate(void* dx, const void* dout, size_t n) = 0;
  // x (fp32) += y (storage), widened: sums of storage tensors kept in fp32
  // (ZeRO-2's gradient shard adds each micro-batch's reduced chunk so, as
  // Megatron's main_grad does, instead of rounding every partial sum to
  // bf16). One fp32 addition per element; with fp32 storage, accumulate's.
  virtual void accumulate_into_float(float* x, const void* y, size_t n) = 0;
  // x (fp32) += y (fp32), whatever the storage dtype: fp32 partial sums
  // combined without rounding (the context-parallel ring's dK/dV shares).
  virtual void accumulate_float32(float* x, const float* y, size_t n) = 0;
  // x *= factor.
  virtual void scale(void* x, float factor, size_t n) = 0;
  // SwiGLU (Llama's MLP activation): out[r, i] = silu(gate_up[r, i]) *
  // gate_up[r, hidden + i] for i < hidden, from gate_up [rows, 2 * hidden]
  // (each row the gate projection, then the up projection: one GEMM of the
  // two weights stacked); out [rows, hidden]. silu(x) = x * sigmoid(x).
  virtual void swiglu_forward(void* out, const void* gate_up, int rows, int hidden) = 0;
  // dgate_up [rows, 2 * hidden] (+)= the gradient of out with respect to
  // gate_up, as write says.
  virtual void swiglu_backward(void* dgate_up, const void* gate_up, const void* dout, int rows,
                               int hidden, GradientWrite write) = 0;

  // ---- rotary position embedding ---------------------------------------------------------------
  // Applied in place to the query and key heads of qkv [B, T, (H + 2 Hkv) * D]
  // (the attention layout below; the value heads are left alone), in Hugging
  // Face's rotate-half convention: for a head's vector x at position t and i < D/2,
  //   x[i] <- x[i] cos[t, i] - x[i + D/2] sin[t, i],
  //   x[i + D/2] <- x[i + D/2] cos[t, i] + x[i] sin[t, i].
  // cos and sin are fp32 [T, D/2] tables of the angles t * inv_freq[i], made
  // once by the model (its rope_theta and frequency scaling). D must be even.
  virtual void rope_forward(void* qkv, const float* cos, const float* sin, int batch, int seq_len,
                            int num_heads, int num_kv_heads, int head_dim) = 0;
  // The backward: rotates the query and key parts of the gradient dqkv in
  // place by the inverse (transposed) rotation, turning d(rotated qkv) into
  // d(qkv); the value part is left as it is. (In place, so unlike the other
  // backward ops it does not accumulate.)
  virtual void rope_backward(void* dqkv, const float* cos, const float* sin, int batch, int seq_len,
                             int num_heads, int num_kv_heads, int head_dim) = 0;

  // ---- attention -------------------------------------------------------------------------
  // Causal self-attention with grouped KV heads over qkv [B, T, (H + 2 Hkv) * D]
  // laid out as (q heads | k heads | v heads), fused (flash attention): nothing
  // of size T x T is stored. Query head h attends with KV head h / (H / Hkv)
  // (Hkv divides H; Hkv = H is multi-head attention, GPT-2's [B, T, 3 * H * D]);
  // no K or V is repeated in memory. out [B, T, H * D] = softmax(Q K^T /
  // sqrt(D), causal) V per query head; logsumexp [B, H, T] receives log(sum_j
  // exp(s_tj)) of each row's scaled scores s, all backward needs besides qkv
  // and out. The CUDA backend takes head_dim <= 128 (std::invalid_argument beyond).
  virtual void attention_forward(void* out, float* logsumexp, const void* qkv, int batch,
                                 int seq_len, int num_heads, int num_kv_heads, int head_dim) = 0;
  // dqkv (+)= the gradient of out with respect to qkv, as write says, given
  // dout, and qkv, out and logsumexp from attention_forward; the
  // probabilities are recomputed as exp(s - logsumexp). A KV head's dK and dV sum over the query
  // heads of its group. scratch holds B*H*T floats (it receives the rows' D_t = sum_d dout[t, d] *
  // out[t, d]; its contents on entry do not matter).
  virtual void attention_backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                                  const void* out, const float* logsumexp, int batch, int seq_len,
                                  int num_heads, int num_kv_heads, int head_dim,
                                  GradientWrite write) = 0;

  // ---- attention by blocks (context parallelism, document masking) ------------------------
  // Attention of a rank's queries against one block of keys and values at a
  // time, the mask given by token positions within the sequence (and by
  // documents): query i sees key j when kv_positions[j] <= q_positions[i]
  // and, with documents (non-null), documents[b, kv_positions[j]] ==
  // documents[b, q_positions[i]]. Positions ([q_len], [kv_len], int32, backend
  // memory) are the same for every sequence of the batch; documents is
  // [batch, seq_len] int32 (each position's document number). The
  // context-parallel ring (runtime/model/context_parallel.h) runs these over
  // the blocks of the ring; with one block of the whole sequence they are
  // attention_forward / attention_backward with a document mask.
  // Layout: q rows [batch, q_len] of q_row_stride elements with the H query
  // heads at 0 (head h at h * D); kv rows [batch, kv_len] of kv_row_stride
  // elements with the Hkv key heads at 0 and the Hkv value heads at
  // kv_value_offset (a qkv tensor: q = qkv, kv = qkv + H * D, value offset
  // Hkv * D; a packed key/value block: stride 2 Hkv D). Query head h uses KV
  // head h / (H / Hkv).
  struct AttentionBlockShape {
    int batch = 0, q_len = 0, kv_len = 0;
    int seq_len = 0;  // the whole sequence's length: the documents' row length
    int num_heads = 0, num_kv_heads = 0, head_dim = 0;
    int q_row_stride = 0, kv_row_stride = 0, kv_value_offset = 0;
  };
  // Folds one block into a running result: out_accumulator [batch, q_len,
  // H * D] (fp32) holds each row's softmax-weighted values over the keys seen
  // so far and logsumexp [batch, H, q_len] (fp32) their log-sum-exp. first:
  // the block's own result overwrites both (they may hold anything); else
  // the two are combined by their log-sum-exp, (out, lse) <- (out e^(lse -
  // lse') + out_b e^(lse_b - lse'), lse') with lse' = log(e^lse + e^lse_b);
  // a row that sees no key of the block is left as it was (a row that has
  // seen no key at all holds 0 and -inf). Scores scaled by 1 / sqrt(D).
  virtual void attention_block_forward(float* out_accumulator, float* logsumexp, const void* q,
                                       const void* kv, const int32_t* q_positions,
                                       const int32_t* kv_positions, const int32_t* documents,
                                       const AttentionBlockShape& shape, bool first) = 0;
  // The backward of one block given the whole result: out [batch, q_len,
  // H * D] (storage, the output rounded as stored) with its gradient dout
  // (storage, same layout) and logsumexp [batch, H, q_len] over all blocks;
  // the probabilities are recomputed as exp(s - logsumexp). Accumulates (+=,
  // fp32) dq_accumulator [batch, q_len, H * D] and dkv_accumulator [batch,
  // kv_len, 2 Hkv D] (packed: dK at 0, dV at Hkv D; a KV head's gradients sum
  // over the query heads of its group).
  virtual void attention_block_backward(float* dq_accumulator, float* dkv_accumulator,
                                        const void* dout, const void* out, const float* logsumexp,
                                        const void* q, const void* kv, const int32_t* q_positions,
                                        const int32_t* kv_positions, const int32_t* documents,
                                        const AttentionBlockShape& shape) = 0;
  // rows rows of row_bytes bytes from source (rows source_stride bytes apart)
  // to destination (rows destination_stride bytes apart): the gather of a
  // qkv tensor's key/value heads into a packed block, and back.
  virtual void copy_rows(void* destination, size_t destination_stride, const void* source,
                         size_t source_stride, size_t rows, size_t row_bytes) = 0;

  // ---- loss ------------------------------------------------------------------------------
  // Fused softmax + cross-entropy over logits [rows, V]: losses[i] = -log
  // softmax(logits[i])[targets[i]] and dlogits[i, :] = (softmax(logits[i]) - onehot(targets[i])) *
  // loss_scale (overwritten, may alias logits: the probabilities are never stored separately).
  // dlogits may be null for a forward-only (evaluation) pass. A target outside
  // [0, V) is an error (std::out_of_range: at once on the CPU, from
  // check_deferred_errors on CUDA). loss_sum, where not null (one double of
  // backend memory): *loss_sum += the sum of the rows' losses, queued, as
  // accumulate_sum(loss_sum, losses, rows) would add it (the CPU: bitwise;
  // the CUDA backend: in a fixed order of its own, folded into the loss
  // kernel instead of two launches more per micro-batch).
  virtual void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                                     const int32_t* targets, int rows, int vocab, float loss_scale,
                                     double* loss_sum) = 0;

  // Vocab-parallel softmax + cross-entropy (Megatron style) for tensor
  // parallelism: logits [rows, vocab_local] hold the columns [vocab_start,
  // vocab_start + vocab_local) of the whole vocabulary; targets are global ids.
  // Three steps; the caller all-reduces row_max (max) after step 1, and exp_sum
  // and target_logit (sum) after step 2. With one shard (vocab_start = 0,
  // vocab_local = vocab) the steps give the fused op's results.
  // Step 1: per row, this shard's max logit, and the target's logit when the
  // target lies in this shard (else 0). A negative target is an error
  // (std::out_of_range: at once on the CPU, from check_deferred_errors on CUDA).
  virtual void cross_entropy_shard_stats(float* row_max, float* target_logit, const void* logits,
                                         const int32_t* targets, int rows, int vocab_local,
                                         int vocab_start) = 0;
  // Step 2: per row, sum over this shard of exp(logit - row_max) (row_max global).
  virtual void cross_entropy_shard_exp_sums(float* exp_sum, const void* logits,
                                            const float* row_max, int rows, int vocab_local) = 0;
  // Step 3: losses[i] = log(exp_sum[i]) + row_max[i] - target_logit[i]; dlogits (may alias
  // logits, may be null) = (exp(logit - row_max) / exp_sum - onehot) * loss_scale, where
  // onehot is zero in every shard but the target's (overwritten, like the fused op);
  // loss_sum (may be null) as the fused op's.
  virtual void cross_entropy_shard_finish(float* losses, void* dlogits, const void* logits,
                                          const int32_t* targets, const float* row_max,
                                          const float* exp_sum, const float* target_logit, int rows,
                                          int vocab_local, int vocab_start, float loss_scale,
                                          double* loss_sum) = 0;

  // ---- optimizer ---------------------------------------------------------------------------
  // One AdamW step (decoupled weight decay, bias-corrected moments) over n
  // elements of fp32 master weights, from storage gradients times
  // hyperparameters.gradient_scale (the clip factor, applied here rather than
  // in a pass of its own; the gradients are left as they were). params
  // (storage) receives the updated master weights rounded; with fp32 storage
  // it may be master itself (then the master weights are the params).
  virtual void adamw(float* master, void* params, const void* grads, float* first_moment,
                     float* second_moment, size_t n, const AdamWStep& hyperparameters) = 0;
  // adamw with fp32 gradients whatever the storage dtype (ZeRO-2 and 3 keep
  // the rank's gradient shard in fp32); with fp32 storage it is adamw.
  virtual void adamw_float_gradients(float* master, void* params, const float* grads,
                                     float* first_moment, float* second_moment, size_t n,
                                     const AdamWStep& hyperparameters) = 0;
  // AdamW over every run in one pass (one launch on CUDA), each run as adamw
  // (or adamw_float_gradients, with float_gradients) with the run's weight
  // decay instead of hyperparameters.weight_decay, and the gradients scaled
  // by clip's factor where clipping applies, else by
  // hyperparameters.gradient_scale: bitwise what those per-run calls give.
  // A backend that reports errors late (CUDA: a bad loss target) changes
  // nothing while one is pending; check_deferred_errors() then reports it.
  virtual void adamw_runs(const std::vector<AdamWRun>& runs, bool float_gradients,
                          const AdamWStep& hyperparameters, const GradientClip& clip) = 0;
  // Sum of squares of the storage tensor x, accumulated in double in a fixed
  // order (waits for the device).
  virtual double sum_of_squares(const void* x, size_t n) = 0;
  // *accumulator += the same sum of squares, queued (accumulator: one double
  // of backend memory). Summed in the same order as sum_of_squares, so adding
  // several tensors' sums this way gives bitwise what adding their
  // sum_of_squares on the host would.
  virtual void accumulate_sum_of_squares(double* accumulator, const void* x, size_t n) = 0;
  // The same over fp32 values whatever the storage dtype (the fp32 gradient
  // shard of ZeRO-2 and 3), in the same order; with fp32 storage it is
  // accumulate_sum_of_squares.
  virtual void accumulate_float_sum_of_squares(double* accumulator, const float* x, size_t n) = 0;
  // *accumulator += x[0] + x[1] + ... + x[n-1] (fp32 values, summed in double
  // in that order on the CPU, in a fixed order on the device), queued.
  virtual void accumulate_sum(double* accumulator, const float* x, size_t n) = 0;
};

// The CPU backend (OpenBLAS sgemm + plain C++). Always available.
// num_threads sets OpenBLAS's thread count: 0 leaves it alone (OpenBLAS's
// default, from OPENBLAS_NUM_THREADS or else the core count, unless an earlier
// call changed it); n > 0 calls openblas_set_num_threads(n), e.g. 1 when
// several MPI ranks share a machine. The setting is process-wide (OpenBLAS has
// one thread pool), so it also applies to Ops objects made earlier. Results
// are bitwise reproducible for a fixed thread count. Throws
// std::invalid_argument for n < 0.
// storage picks the storage dtype: kBFloat16 keeps bf16 tensors and rounds
// as the GPU does (each op computes in fp32 on the widened inputs).
std::unique_ptr<Ops> make_cpu_ops(int num_threads = 0, DType storage = DType::kFloat32);

// The CUDA backend on the given device. Throws std::runtime_error with a clear
// message when CUDA support was not compiled in or no device is present.
std::unique_ptr<Ops> make_cuda_ops(int device, DType storage = DType::kFloat32);

// Number of CUDA devices visible (0 when CUDA is not compiled in).
int cuda_device_count();

// Whether the CUDA backend can run attention on cuDNN's SDPA in this process:
// built with the cuDNN frontend's headers and libcudnn.so.9 loaded (tried
// once, at the first call or the first attention that asks); *description
// receives what loaded ("cuDNN 9.19.0 (path)") or why not. Never throws.
bool cuda_cudnn_available(std::string* description = nullptr);
// Whether this process's CUDA_DEVICE_MAX_CONNECTIONS is the CUDA backend's
// default (set before main where the environment had none), not the user's:
// `launch` then forwards none, and each rank sets its own. False without CUDA.
bool cuda_connections_defaulted();

// Starts (true) or stops (false) the CUDA profiler's collection
// (cudaProfilerStart/Stop), so `ncu --profile-from-start off` measures only
// the kernels in between (replay's measured steps). Without a profiler
// attached, or without CUDA, it does nothing; errors are ignored.
void cuda_profiler_range(bool collect);

}  // namespace paraplan::kernels
