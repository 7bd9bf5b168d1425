// cpu_bfloat16_ops.cc: the CPU backend with bf16 storage (kernels/ops.h's
// mixed precision), the reference the CUDA bf16 ops are tested against.
//
// Each op widens its bf16 inputs to fp32 scratch, runs the fp32 CPU op on
// them, and rounds each output once to bf16 (nearest even, kernels/dtype.h).
// An accumulating output is widened too, so the fp32 op adds into its exact
// value and the sum is rounded once: dx += y stores round(float(dx) + y), as
// a GPU kernel (or cuBLAS with beta = 1) does. An overwritten input gradient
// (GradientWrite::kOverwrite) is not widened: the fp32 op overwrites scratch
// and dx = round(0 + y) is stored, dx never read. Cheap ops whose results need
// no fp32 intermediate (copies, elementwise sums) work on bf16 directly.
// Scratch grows to the largest op and is reused: no allocation per call in a
// steady state. Not thread-safe, like every Ops object.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/dtype.h"

namespace paraplan::kernels::cpu {
namespace {

using Bits = uint16_t;  // one bf16 element

const Bits* bits(const void* x) {
  return static_cast<const Bits*>(x);
}
Bits* bits(void* x) {
  return static_cast<Bits*>(x);
}

class CpuBfloat16Ops final : public Ops {
 public:
  explicit CpuBfloat16Ops(int threads) : fp32_(make_float32_ops(threads)), pool_(threads) {}

  Backend backend() const override { return Backend::kCpu; }
  DType storage_dtype() const override { return DType::kBFloat16; }

  // ---- memory and device: the fp32 backend's ------------------------------------------------
  void* allocate(size_t bytes) override { return fp32_->allocate(bytes); }
  void deallocate(void* pointer) override { fp32_->deallocate(pointer); }
  void copy_to_host(void* host, const void* source, size_t bytes) override {
    fp32_->copy_to_host(host, source, bytes);
  }
  void copy_from_host(void* destination, const void* host, size_t bytes) override {
    fp32_->copy_from_host(destination, host, bytes);
  }
  void copy_from_host_async(void* destination, const void* host, size_t bytes) override {
    fp32_->copy_from_host_async(destination, host, bytes);
  }
  void copy(void* destination, const void* source, size_t bytes) override {
    fp32_->copy(destination, source, bytes);
  }
  void zero_bytes(void* x, size_t bytes) override { fp32_->zero_bytes(x, bytes); }
  void synchronize() override {}
  void convert_from_float(void* out, const float* in, size_t n) override {
    host_from_float(out, in, DType::kBFloat16, n);
  }
  void convert_to_float(float* out, const void* in, size_t n) override {
    host_to_float(out, in, DType::kBFloat16, n);
  }
  std::string device_name() const override { return fp32_->device_name(); }
  std::string device_identity() const override { return fp32_->device_identity(); }
  void* allocate_host(size_t bytes) override { return fp32_->allocate_host(bytes); }
  void deallocate_host(void* pointer) override { fp32_->deallocate_host(pointer); }

  // ---- embeddings ------------------------------------------------------------------------------
  void token_embedding_forward(void* out, const int32_t* tokens, const void* wte, int num_tokens,
                               int vocab_start, int vocab_local, int channels) override {
    // A row copy (or zeros): exact in bf16.
    const size_t row_bytes = static_cast<size_t>(channels) * sizeof(Bits);
    for (int i = 0; i < num_tokens; i++) {
      Bits* out_row = bits(out) + static_cast<size_t>(i) * channels;
      const int64_t local = static_cast<int64_t>(tokens[i]) - vocab_start;
      if (local >= 0 && local < vocab_local)
        std::memcpy(out_row, bits(wte) + static_cast<size_t>(local) * channels, row_bytes);
      else
        std::memset(out_row, 0, row_bytes);
    }
  }

  void token_embedding_backward(void* dwte, const void* dout, const int32_t* tokens, int num_tokens,
                                int vocab_start, int vocab_local, int channels) override {
    // Each touched row is widened once, takes its tokens' gradients in fp32
    // (in the fp32 op's order, ops.h) and is rounded once: one rounding per
    // row, whatever the token repeats.
    const size_t C = channels;
    row_slot_.assign(std::max(vocab_local, 0), -1);
    touched_rows_.clear();
    for (int i = 0; i < num_tokens; i++) {
      const int64_t local = static_cast<int64_t>(tokens[i]) - vocab_start;
      if (local < 0 || local >= vocab_local) continue;
      if (row_slot_[local] < 0) {
        row_slot_[local] = static_cast<int>(touched_rows_.size());
        touched_rows_.push_back(static_cast<int>(local));
      }
    }
    float* rows = scratch(0, touched_rows_.size() * C);
    for (size_t slot = 0; slot < touched_rows_.size(); slot++)
      host_to_float(rows + slot * C, bits(dwte) + static_cast<size_t>(touched_rows_[slot]) * C,
                    DType::kBFloat16, C);
    cpu::sum_token_gradients(
        rows, static_cast<int>(touched_rows_.size()), num_tokens, C,
        [&](int i) {
          const int64_t local = static_cast<int64_t>(tokens[i]) - vocab_start;
          return local >= 0 && local < vocab_local ? row_slot_[local] : -1;
        },
        [&](float* row, int i) {
          const Bits* dout_row = bits(dout) + static_cast<size_t>(i) * C;
          for (size_t c = 0; c < C; c++) row[c] += float_from_bfloat16(dout_row[c]);
        },
        token_gradients_);
    for (size_t slot = 0; slot < touched_rows_.size(); slot++)
      narrow(bits(dwte) + static_cast<size_t>(touched_rows_[slot]) * C, rows + slot * C, C);
  }

  void position_embedding_forward(void* out, const void* wpe, int batch, int seq_len,
                                  int channels) override {
    const size_t TC = static_cast<size_t>(seq_len) * channels;
    for (int b = 0; b < batch; b++) add_into(bits(out) + b * TC, bits(wpe), TC);
  }

  void position_embedding_backward(void* dwpe, const void* dout, int batch, int seq_len,
                                   int channels) override {
    const size_t TC = static_cast<size_t>(seq_len) * channels;
    float* dwpe32 = widen(0, dwpe, TC);
    fp32_->position_embedding_backward(dwpe32, widen(1, dout, batch * TC), batch, seq_len,
                                       channels);
    narrow(dwpe, dwpe32, TC);
  }

  // ---- layer norm
  // ----------------------------------------------------------------------------------
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int rows, int channels, float epsilon) override {
    const size_t n = static_cast<size_t>(rows) * channels;
    float* out32 = scratch(0, n);
    fp32_->layernorm_forward(out32, mean, rstd, widen(1, inp, n), widen(2, weight, channels),
                             widen(3, bias, channels), rows, channels, epsilon);
    narrow(out, out32, n);
  }

  void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                          const void* weight, const float* mean, const float* rstd, int rows,
                          int channels) override {
    const size_t n = static_cast<size_t>(rows) * channels;
    float* dinp32 = widen(0, dinp, n);
    float* dweight32 = widen(1, dweight, channels);
    float* dbias32 = widen(2, dbias, channels);
    fp32_->layernorm_backward(dinp32, dweight32, dbias32, widen(3, dout, n), widen(4, inp, n),
                              widen(5, weight, channels), mean, rstd, rows, channels);
    narrow(dinp, dinp32, n);
    narrow(dweight, dweight32, channels);
    narrow(dbias, dbias32, channels);
  }

  // ---- linear
  // ------------------------------------------------------------------------------------
  void linear_forward(void* out, const void* inp, const void* weight, const void* bias, int rows,
                      int in_features, int out_features) override {
    const size_t n = static_cast<size_t>(rows) * out_features;
    float* out32 = scratch(0, n);
    fp32_->linear_forward(out32, widen(1, inp, static_cast<size_t>(rows) * in_features),
                          widen(2, weight, static_cast<size_t>(out_features) * in_features),
                          bias ? widen(3, bias, out_features) : nullptr, rows, in_features,
                          out_features);
    narrow(out, out32, n);
  }

  void linear_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                       const void* weight, int rows, int in_features, int out_features,
                       GradientWrite dinp_write) override {
    const size_t in_n = static_cast<size_t>(rows) * in_features;
    const size_t weight_n = static_cast<size_t>(out_features) * in_features;
    float* dinp32 = dinp ? gradient(0, dinp, in_n, dinp_write) : nullptr;
    float* dweight32 = dweight ? widen(1, dweight, weight_n) : nullptr;
    float* dbias32 = dbias ? widen(2, dbias, out_features) : nullptr;
    fp32_->linear_backward(
        dinp32, dweight32, dbias32, widen(3, dout, static_cast<size_t>(rows) * out_features),
        dweight ? widen(4, inp, in_n) : nullptr, dinp ? widen(5, weight, weight_n) : nullptr, rows,
        in_features, out_features, dinp_write);
    if (dinp) narrow(dinp, dinp32, in_n);
    if (dweight) narrow(dweight, dweight32, weight_n);
    if (dbias) narrow(dbias, dbias32, out_features);
  }

  // ---- elementwise -----------------------------------------------------------------------------
  void gelu_forward(void* out, const void* inp, size_t n) override {
    float* out32 = scratch(0, n);
    fp32_->gelu_forward(out32, widen(1, inp, n), n);
    narrow(out, out32, n);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n,
                     GradientWrite write) override {
    float* dinp32 = gradient(0, dinp, n, write);
    fp32_->gelu_backward(dinp32, widen(1, inp, n), widen(2, dout, n), n, write);
    narrow(dinp, dinp32, n);
  }
  void residual_forward(void* out, const void* a, const void* b, size_t n) override {
    for (size_t i = 0; i < n; i++)
      bits(out)[i] =
          bfloat16_from_float(float_from_bfloat16(bits(a)[i]) + float_from_bfloat16(bits(b)[i]));
  }
  void accumulate(void* dx, const void* dout, size_t n) override {
    add_into(bits(dx), bits(dout), n);
  }
  void accumulate_into_float(float* x, const void* y, size_t n) override {
    for (size_t i = 0; i < n; i++) x[i] += float_from_bfloat16(bits(y)[i]);
  }
  void accumulate_float32(float* x, const float* y, size_t n) override {
    fp32_->accumulate_float32(x, y, n);
  }
  void scale(void* x, float factor, size_t n) override {
    for (size_t i = 0; i < n; i++)
      bits(x)[i] = bfloat16_from_float(float_from_bfloat16(bits(x)[i]) * factor);
  }

  // ---- RMS norm, SwiGLU, rotary embedding ------------------------------------------------------
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int rows,
                       int channels, float epsilon) override {
    const size_t n = static_cast<size_t>(rows) * channels;
    float* out32 = scratch(0, n);
    fp32_->rmsnorm_forward(out32, rstd, widen(1, inp, n), widen(2, weight, channels), rows,
                           channels, epsilon);
    narrow(out, out32, n);
  }
  void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                        const void* weight, const float* rstd, int rows, int channels) override {
    const size_t n = static_cast<size_t>(rows) * channels;
    float* dinp32 = widen(0, dinp, n);
    float* dweight32 = widen(1, dweight, channels);
    fp32_->rmsnorm_backward(dinp32, dweight32, widen(2, dout, n), widen(3, inp, n),
                            widen(4, weight, channels), rstd, rows, channels);
    narrow(dinp, dinp32, n);
    narrow(dweight, dweight32, channels);
  }
  void swiglu_forward(void* out, const void* gate_up, int rows, int hidden) override {
    const size_t n = static_cast<size_t>(rows) * hidden;
    float* out32 = scratch(0, n);
    fp32_->swiglu_forward(out32, widen(1, gate_up, 2 * n), rows, hidden);
    narrow(out, out32, n);
  }
  void swiglu_backward(void* dgate_up, const void* gate_up, const void* dout, int rows, int hidden,
                       GradientWrite write) override {
    const size_t n = static_cast<size_t>(rows) * hidden;
    float* dgate_up32 = gradient(0, dgate_up, 2 * n, write);
    fp32_->swiglu_backward(dgate_up32, widen(1, gate_up, 2 * n), widen(2, dout, n), rows, hidden,
                           write);
    narrow(dgate_up, dgate_up32, 2 * n);
  }
  void rope_forward(void* qkv, const float* cos, const float* sin, int batch, int seq_len,
                    int num_heads, int num_kv_heads, int head_dim) override {
    rope(&Ops::rope_forward, qkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim);
  }
  void rope_backward(void* dqkv, const float* cos, const float* sin, int batch, int seq_len,
                     int num_heads, int num_kv_heads, int head_dim) override {
    rope(&Ops::rope_backward, dqkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim);
  }

  // ---- attention
  // ---------------------------------------------------------------------------------
  void attention_forward(void* out, float* logsumexp, const void* qkv, int batch, int seq_len,
                         int num_heads, int num_kv_heads, int head_dim) override {
    const size_t n = static_cast<size_t>(batch) * seq_len * num_heads * head_dim;
    const size_t qkv_n = qkv_elements(batch, seq_len, num_heads, num_kv_heads, head_dim);
    float* out32 = scratch(0, n);
    fp32_->attention_forward(out32, logsumexp, widen(1, qkv, qkv_n), batch, seq_len, num_heads,
                             num_kv_heads, head_dim);
    narrow(out, out32, n);
  }
  void attention_backward(void* dqkv, float* row_scratch, const void* dout, const void* qkv,
                          const void* out, const float* logsumexp, int batch, int seq_len,
                          int num_heads, int num_kv_heads, int head_dim,
                          GradientWrite write) override {
    const size_t n = static_cast<size_t>(batch) * seq_len * num_heads * head_dim;
    const size_t qkv_n = qkv_elements(batch, seq_len, num_heads, num_kv_heads, head_dim);
    float* dqkv32 = gradient(0, dqkv, qkv_n, write);
    fp32_->attention_backward(dqkv32, row_scratch, widen(1, dout, n), widen(2, qkv, qkv_n),
                              widen(3, out, n), logsumexp, batch, seq_len, num_heads, num_kv_heads,
                              head_dim, write);
    narrow(dqkv, dqkv32, qkv_n);
  }

  // ---- attention by blocks: storage inputs widened, fp32 accumulators as they are ------------
  // q and kv are strided views (into one qkv tensor, possibly both): the span
  // from the first row to the last row's last element read is widened, and the
  // fp32 op reads the copies with the same strides.
  void attention_block_forward(float* out_accumulator, float* logsumexp, const void* q,
                               const void* kv, const int32_t* q_positions,
                               const int32_t* kv_positions, const int32_t* documents,
                               const AttentionBlockShape& shape, bool first) override {
    fp32_->attention_block_forward(out_accumulator, logsumexp, widen(1, q, query_span(shape)),
                                   widen(2, kv, key_value_span(shape)), q_positions, kv_positions,
                                   documents, shape, first);
  }
  void attention_block_backward(float* dq_accumulator, float* dkv_accumulator, const void* dout,
                                const void* out, const float* logsumexp, const void* q,
                                const void* kv, const int32_t* q_positions,
                                const int32_t* kv_positions, const int32_t* documents,
                                const AttentionBlockShape& shape) override {
    const size_t n = static_cast<size_t>(std::max(shape.batch, 0)) * std::max(shape.q_len, 0) *
                     std::max(shape.num_heads, 0) * std::max(shape.head_dim, 0);
    fp32_->attention_block_backward(dq_accumulator, dkv_accumulator, widen(3, dout, n),
                                    widen(4, out, n), logsumexp, widen(1, q, query_span(shape)),
                                    widen(2, kv, key_value_span(shape)), q_positions, kv_positions,
                                    documents, shape);
  }
  void copy_rows(void* destination, size_t destination_stride, const void* source,
                 size_t source_stride, size_t rows, size_t row_bytes) override {
    fp32_->copy_rows(destination, destination_stride, source, source_stride, rows, row_bytes);
  }

  // ---- loss: fp32 statistics from widened logits; dlogits rounded once
  // ---------------------------
  void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int rows, int vocab, float loss_scale,
                             double* loss_sum) override {
    const size_t n = static_cast<size_t>(rows) * vocab;
    float* logits32 = widen(0, logits, n);
    fp32_->softmax_cross_entropy(losses, dlogits ? logits32 : nullptr, logits32, targets, rows,
                                 vocab, loss_scale, loss_sum);
    if (dlogits) narrow(dlogits, logits32, n);
  }
  void cross_entropy_shard_stats(float* row_max, float* target_logit, const void* logits,
                                 const int32_t* targets, int rows, int vocab_local,
                                 int vocab_start) override {
    fp32_->cross_entropy_shard_stats(row_max, target_logit,
                                     widen(0, logits, static_cast<size_t>(rows) * vocab_local),
                                     targets, rows, vocab_local, vocab_start);
  }
  void cross_entropy_shard_exp_sums(float* exp_sum, const void* logits, const float* row_max,
                                    int rows, int vocab_local) override {
    fp32_->cross_entropy_shard_exp_sums(exp_sum,
                                        widen(0, logits, static_cast<size_t>(rows) * vocab_local),
                                        row_max, rows, vocab_local);
  }
  void cross_entropy_shard_finish(float* losses, void* dlogits, const void* logits,
                                  const int32_t* targets, const float* row_max,
                                  const float* exp_sum, const float* target_logit, int rows,
                                  int vocab_local, int vocab_start, float loss_scale,
                                  double* loss_sum) override {
    const size_t n = static_cast<size_t>(rows) * vocab_local;
    float* logits32 = widen(0, logits, n);
    fp32_->cross_entropy_shard_finish(losses, dlogits ? logits32 : nullptr, logits32, targets,
                                      row_max, exp_sum, target_logit, rows, vocab_local,
                                      vocab_start, loss_scale, loss_sum);
    if (dlogits) narrow(dlogits, logits32, n);
  }

  // ---- optimizer: fp32 master weights, the bf16 params their rounded copy
  // -------------------------
  void adamw(float* master, void* params, const void* grads, float* first_moment,
             float* second_moment, size_t n, const AdamWStep& hyperparameters) override {
    cpu::adamw(pool_, DType::kBFloat16, DType::kBFloat16, master, params, grads, first_moment,
               second_moment, n, hyperparameters);
  }
  void adamw_float_gradients(float* master, void* params, const float* grads, float* first_moment,
                             float* second_moment, size_t n,
                             const AdamWStep& hyperparameters) override {
    cpu::adamw(pool_, DType::kBFloat16, DType::kFloat32, master, params, grads, first_moment,
               second_moment, n, hyperparameters);
  }
  void adamw_runs(const std::vector<AdamWRun>& runs, bool float_gradients,
                  const AdamWStep& hyperparameters, const GradientClip& clip) override {
    cpu::adamw_runs(pool_, DType::kBFloat16, float_gradients ? DType::kFloat32 : DType::kBFloat16,
                    runs, hyperparameters, clip);
  }
  void accumulate_sum_of_squares(double* accumulator, const void* x, size_t n) override {
    *accumulator += sum_of_squares(x, n);
  }
  void accumulate_float_sum_of_squares(double* accumulator, const float* x, size_t n) override {
    *accumulator += cpu::sum_of_squares(pool_, block_sums_, DType::kFloat32, x, n);
  }
  void accumulate_sum(double* accumulator, const float* x, size_t n) override {
    fp32_->accumulate_sum(accumulator, x, n);  // fp32 values whatever the storage
  }

  double sum_of_squares(const void* x, size_t n) override {
    return cpu::sum_of_squares(pool_, block_sums_, DType::kBFloat16, x, n);
  }

 private:
  // The fp32 rotation `op` (rope_forward or rope_backward) on qkv widened,
  // rounded back once.
  template <typename Rotation>
  void rope(Rotation op, void* qkv, const float* cos, const float* sin, int batch, int seq_len,
            int num_heads, int num_kv_heads, int head_dim) {
    const size_t n = qkv_elements(batch, seq_len, num_heads, num_kv_heads, head_dim);
    float* qkv32 = widen(0, qkv, n);
    ((*fp32_).*op)(qkv32, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim);
    narrow(qkv, qkv32, n);
  }
  // Elements of qkv [B, T, (H + 2 Hkv) D].
  static size_t qkv_elements(int batch, int seq_len, int num_heads, int num_kv_heads,
                             int head_dim) {
    return static_cast<size_t>(batch) * seq_len * (num_heads + 2 * num_kv_heads) * head_dim;
  }
  // Elements from a strided view's first row to the last element it reads:
  // rows of `stride` elements, each read up to `width`.
  static size_t strided_span(int rows, int stride, int width) {
    return rows <= 0 || width <= 0 ? 0 : static_cast<size_t>(rows - 1) * stride + width;
  }
  static size_t query_span(const AttentionBlockShape& s) {
    return strided_span(s.batch * s.q_len, s.q_row_stride, s.num_heads * s.head_dim);
  }
  static size_t key_value_span(const AttentionBlockShape& s) {
    return strided_span(s.batch * s.kv_len, s.kv_row_stride,
                        std::max(s.kv_value_offset, 0) + s.num_kv_heads * s.head_dim);
  }
  // fp32 scratch buffer `index` with room for n floats.
  float* scratch(int index, size_t n) {
    std::vector<float>& buffer = scratch_[index];
    if (buffer.size() < n) buffer.resize(n);
    return buffer.data();
  }
  float* widen(int index, const void* x, size_t n) {
    float* out = scratch(index, n);
    host_to_float(out, x, DType::kBFloat16, n);
    return out;
  }
  // The fp32 copy of input gradient x for the fp32 op: x widened when it
  // accumulates, else scratch whose contents do not matter (it is overwritten).
  float* gradient(int index, const void* x, size_t n, GradientWrite write) {
    return write == GradientWrite::kOverwrite ? scratch(index, n) : widen(index, x, n);
  }
  static void narrow(void* out, const float* x, size_t n) {
    host_from_float(out, x, DType::kBFloat16, n);
  }
  // x += y elementwise in fp32, rounded once.
  static void add_into(Bits* x, const Bits* y, size_t n) {
    for (size_t i = 0; i < n; i++)
      x[i] = bfloat16_from_float(float_from_bfloat16(x[i]) + float_from_bfloat16(y[i]));
  }

  std::unique_ptr<Ops> fp32_;
  CpuThreadPool pool_;
  std::vector<double> block_sums_;  // sum_of_squares scratch
  std::vector<float> scratch_[6];
  std::vector<int> row_slot_;      // token embedding backward: local row -> touched slot
  std::vector<int> touched_rows_;  // in first-touch order
  cpu::TokenGradientScratch token_gradients_;
};

}  // namespace

std::unique_ptr<Ops> make_bfloat16_ops(int threads) {
  return std::make_unique<CpuBfloat16Ops>(threads);
}

}  // namespace paraplan::kernels::cpu
