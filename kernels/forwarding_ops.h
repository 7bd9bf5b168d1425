// forwarding_ops.h: an Ops that forwards every call to another (leveldb's
// EnvWrapper): a decorator derives from it and overrides only what it changes
// (sync_counting_ops.h counts host synchronizations; a test may stub compute).
#pragma once

#include <memory>
#include <string>

#include "kernels/ops.h"

namespace paraplan::kernels {

class ForwardingOps : public Ops {
 public:
  explicit ForwardingOps(std::unique_ptr<Ops> inner) : inner_(std::move(inner)) {}

  Ops& inner() { return *inner_; }

  Backend backend() const override { return inner_->backend(); }
  DType storage_dtype() const override { return inner_->storage_dtype(); }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void deallocate(void* pointer) override { inner_->deallocate(pointer); }
  void copy_to_host(void* host_destination, const void* source, size_t bytes) override {
    inner_->copy_to_host(host_destination, source, bytes);
  }
  void copy_from_host(void* destination, const void* host_source, size_t bytes) override {
    inner_->copy_from_host(destination, host_source, bytes);
  }
  void copy_from_host_async(void* destination, const void* host_source, size_t bytes) override {
    inner_->copy_from_host_async(destination, host_source, bytes);
  }
  void copy(void* destination, const void* source, size_t bytes) override {
    inner_->copy(destination, source, bytes);
  }
  void zero_bytes(void* x, size_t bytes) override { inner_->zero_bytes(x, bytes); }
  void synchronize() override { inner_->synchronize(); }
  void check_deferred_errors() override { inner_->check_deferred_errors(); }
  size_t internal_bytes() const override { return inner_->internal_bytes(); }
  void convert_from_float(void* out, const float* in, size_t n) override {
    inner_->convert_from_float(out, in, n);
  }
  void convert_to_float(float* out, const void* in, size_t n) override {
    inner_->convert_to_float(out, in, n);
  }
  std::string device_name() const override { return inner_->device_name(); }
  std::string device_identity() const override { return inner_->device_identity(); }
  void* stream() const override { return inner_->stream(); }
  void* create_mark() override { return inner_->create_mark(); }
  void record_mark(void* mark) override { inner_->record_mark(mark); }
  void destroy_mark(void* mark) override { inner_->destroy_mark(mark); }
  void* allocate_host(size_t bytes) override { return inner_->allocate_host(bytes); }
  void deallocate_host(void* pointer) override { inner_->deallocate_host(pointer); }
  void token_embedding_forward(void* out, const int32_t* tokens, const void* wte, int num_tokens,
                               int vocab_start, int vocab_local, int channels) override {
    inner_->token_embedding_forward(out, tokens, wte, num_tokens, vocab_start, vocab_local,
                                    channels);
  }
  void token_embedding_backward(void* dwte, const void* dout, const int32_t* tokens, int num_tokens,
                                int vocab_start, int vocab_local, int channels) override {
    inner_->token_embedding_backward(dwte, dout, tokens, num_tokens, vocab_start, vocab_local,
                                     channels);
  }
  void position_embedding_forward(void* out, const void* wpe, int batch, int seq_len,
                                  int channels) override {
    inner_->position_embedding_forward(out, wpe, batch, seq_len, channels);
  }
  void position_embedding_backward(void* dwpe, const void* dout, int batch, int seq_len,
                                   int channels) override {
    inner_->position_embedding_backward(dwpe, dout, batch, seq_len, channels);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int rows, int channels, float epsilon) override {
    inner_->layernorm_forward(out, mean, rstd, inp, weight, bias, rows, channels, epsilon);
  }
  void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                          const void* weight, const float* mean, const float* rstd, int rows,
                          int channels) override {
    inner_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, channels);
  }
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int rows,
                       int channels, float epsilon) override {
    inner_->rmsnorm_forward(out, rstd, inp, weight, rows, channels, epsilon);
  }
  void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                        const void* weight, const float* rstd, int rows, int channels) override {
    inner_->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, rows, channels);
  }
  void linear_forward(void* out, const void* inp, const void* weight, const void* bias, int rows,
                      int in_features, int out_features) override {
    inner_->linear_forward(out, inp, weight, bias, rows, in_features, out_features);
  }
  void linear_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                       const void* weight, int rows, int in_features, int out_features,
                       GradientWrite dinp_write) override {
    inner_->linear_backward(dinp, dweight, dbias, dout, inp, weight, rows, in_features,
                            out_features, dinp_write);
  }
  void linear_residual_forward(void* out, const void* inp, const void* weight, const void* bias,
                               const void* residual, int rows, int in_features,
                               int out_features) override {
    inner_->linear_residual_forward(out, inp, weight, bias, residual, rows, in_features,
                                    out_features);
  }
  void linear_gelu_forward(void* pre_gelu, void* out, const void* inp, const void* weight,
                           const void* bias, int rows, int in_features, int out_features) override {
    inner_->linear_gelu_forward(pre_gelu, out, inp, weight, bias, rows, in_features, out_features);
  }
  void linear_backward_gelu(void* dpre_gelu, const void* dout, const void* weight,
                            const void* pre_gelu, int rows, int in_features,
                            int out_features) override {
    inner_->linear_backward_gelu(dpre_gelu, dout, weight, pre_gelu, rows, in_features,
                                 out_features);
  }
  void linear_weight_gradients(void* dweight, void* dbias, const void* dout, const void* inp,
                               int rows, int in_features, int out_features) override {
    inner_->linear_weight_gradients(dweight, dbias, dout, inp, rows, in_features, out_features);
  }
  void join_weight_gradients() override { inner_->join_weight_gradients(); }
  void run_recorded(uint64_t key, const std::function<void()>& launches) override {
    inner_->run_recorded(key, launches);
  }
  bool records_launches() const override { return inner_->records_launches(); }
  void forget_recorded() override { inner_->forget_recorded(); }
  void gelu_forward(void* out, const void* inp, size_t n) override {
    inner_->gelu_forward(out, inp, n);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n,
                     GradientWrite write) override {
    inner_->gelu_backward(dinp, inp, dout, n, write);
  }
  void residual_forward(void* out, const void* a, const void* b, size_t n) override {
    inner_->residual_forward(out, a, b, n);
  }
  void accumulate(void* dx, const void* dout, size_t n) override {
    inner_->accumulate(dx, dout, n);
  }
  void accumulate_into_float(float* x, const void* y, size_t n) override {
    inner_->accumulate_into_float(x, y, n);
  }
  void accumulate_float32(float* x, const float* y, size_t n) override {
    inner_->accumulate_float32(x, y, n);
  }
  void scale(void* x, float factor, size_t n) override { inner_->scale(x, factor, n); }
  void swiglu_forward(void* out, const void* gate_up, int rows, int hidden) override {
    inner_->swiglu_forward(out, gate_up, rows, hidden);
  }
  void swiglu_backward(void* dgate_up, const void* gate_up, const void* dout, int rows, int hidden,
                       GradientWrite write) override {
    inner_->swiglu_backward(dgate_up, gate_up, dout, rows, hidden, write);
  }
  void rope_forward(void* qkv, const float* cos, const float* sin, int batch, int seq_len,
                    int num_heads, int num_kv_heads, int head_dim) override {
    inner_->rope_forward(qkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim);
  }
  void rope_backward(void* dqkv, const float* cos, const float* sin, int batch, int seq_len,
                     int num_heads, int num_kv_heads, int head_dim) override {
    inner_->rope_backward(dqkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim);
  }
  void attention_forward(void* out, float* logsumexp, const void* qkv, int batch, int seq_len,
                         int num_heads, int num_kv_heads, int head_dim) override {
    inner_->attention_forward(out, logsumexp, qkv, batch, seq_len, num_heads, num_kv_heads,
                              head_dim);
  }
  void attention_backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                          const void* out, const float* logsumexp, int batch, int seq_len,
                          int num_heads, int num_kv_heads, int head_dim,
                          GradientWrite write) override {
    inner_->attention_backward(dqkv, scratch, dout, qkv, out, logsumexp, batch, seq_len, num_heads,
                               num_kv_heads, head_dim, write);
  }
  void attention_block_forward(float* out_accumulator, float* logsumexp, const void* q,
                               const void* kv, const int32_t* q_positions,
                               const int32_t* kv_positions, const int32_t* documents,
                               const AttentionBlockShape& shape, bool first) override {
    inner_->attention_block_forward(out_accumulator, logsumexp, q, kv, q_positions, kv_positions,
                                    documents, shape, first);
  }
  void attention_block_backward(float* dq_accumulator, float* dkv_accumulator, const void* dout,
                                const void* out, const float* logsumexp, const void* q,
                                const void* kv, const int32_t* q_positions,
                                const int32_t* kv_positions, const int32_t* documents,
                                const AttentionBlockShape& shape) override {
    inner_->attention_block_backward(dq_accumulator, dkv_accumulator, dout, out, logsumexp, q, kv,
                                     q_positions, kv_positions, documents, shape);
  }
  void copy_rows(void* destination, size_t destination_stride, const void* source,
                 size_t source_stride, size_t rows, size_t row_bytes) override {
    inner_->copy_rows(destination, destination_stride, source, source_stride, rows, row_bytes);
  }
  void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int rows, int vocab, float loss_scale,
                             double* loss_sum) override {
    inner_->softmax_cross_entropy(losses, dlogits, logits, targets, rows, vocab, loss_scale,
                                  loss_sum);
  }
  void cross_entropy_shard_stats(float* row_max, float* target_logit, const void* logits,
                                 const int32_t* targets, int rows, int vocab_local,
                                 int vocab_start) override {
    inner_->cross_entropy_shard_stats(row_max, target_logit, logits, targets, rows, vocab_local,
                                      vocab_start);
  }
  void cross_entropy_shard_exp_sums(float* exp_sum, const void* logits, const float* row_max,
                                    int rows, int vocab_local) override {
    inner_->cross_entropy_shard_exp_sums(exp_sum, logits, row_max, rows, vocab_local);
  }
  void cross_entropy_shard_finish(float* losses, void* dlogits, const void* logits,
                                  const int32_t* targets, const float* row_max,
                                  const float* exp_sum, const float* target_logit, int rows,
                                  int vocab_local, int vocab_start, float loss_scale,
                                  double* loss_sum) override {
    inner_->cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max, exp_sum,
                                       target_logit, rows, vocab_local, vocab_start, loss_scale,
                                       loss_sum);
  }
  void adamw(float* master, void* params, const void* grads, float* first_moment,
             float* second_moment, size_t n, const AdamWStep& hyperparameters) override {
    inner_->adamw(master, params, grads, first_moment, second_moment, n, hyperparameters);
  }
  void adamw_float_gradients(float* master, void* params, const float* grads, float* first_moment,
                             float* second_moment, size_t n,
                             const AdamWStep& hyperparameters) override {
    inner_->adamw_float_gradients(master, params, grads, first_moment, second_moment, n,
                                  hyperparameters);
  }
  void adamw_runs(const std::vector<AdamWRun>& runs, bool float_gradients,
                  const AdamWStep& hyperparameters, const GradientClip& clip) override {
    inner_->adamw_runs(runs, float_gradients, hyperparameters, clip);
  }
  double sum_of_squares(const void* x, size_t n) override { return inner_->sum_of_squares(x, n); }
  void accumulate_sum_of_squares(double* accumulator, const void* x, size_t n) override {
    inner_->accumulate_sum_of_squares(accumulator, x, n);
  }
  void accumulate_float_sum_of_squares(double* accumulator, const float* x, size_t n) override {
    inner_->accumulate_float_sum_of_squares(accumulator, x, n);
  }
  void accumulate_sum(double* accumulator, const float* x, size_t n) override {
    inner_->accumulate_sum(accumulator, x, n);
  }

 private:
  std::unique_ptr<Ops> inner_;
};

}  // namespace paraplan::kernels
