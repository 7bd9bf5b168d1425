// recording_ops.h: an Ops decorator that does what the CUDA backend's
// graphs do (kernels/ops.h run_recorded, kernels/cuda/cuda_graphs.cuh), on
// any backend: per key the first run is plain, the second records every op
// call (its arguments by value) instead of running it and then runs the
// record, and later runs replay the record without calling launches() at
// all. An op that waits for the device or copies to or from the host inside
// a recording throws (a capture would break). So a CPU test comparing runs
// with and without it finds a step whose launches change between runs
// (another buffer, another argument) or whose host work a replay would
// skip. Test code only. The overrides are one per recordable op of
// kernels/forwarding_ops.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/forwarding_ops.h"

namespace paraplan::testing {

class RecordingOps final : public kernels::ForwardingOps {
 public:
  using GradientWrite = kernels::GradientWrite;
  using AdamWStep = kernels::AdamWStep;
  using AdamWRun = kernels::AdamWRun;
  using GradientClip = kernels::GradientClip;

  explicit RecordingOps(std::unique_ptr<kernels::Ops> inner) : ForwardingOps(std::move(inner)) {}

  bool records_launches() const override { return true; }
  void run_recorded(uint64_t key, const std::function<void()>& launches) override {
    Entry& entry = entries_[key];
    if (entry.recorded) {
      ++replays_;
      for (const std::function<void()>& call : entry.calls) call();
      return;
    }
    if (entry.runs++ == 0) {
      launches();
      return;
    }
    recording_ = &entry.calls;
    try {
      launches();
    } catch (...) {
      recording_ = nullptr;
      throw;
    }
    recording_ = nullptr;
    entry.recorded = true;
    for (const std::function<void()>& call : entry.calls) call();
  }

  void forget_recorded() override {
    entries_.clear();
    ForwardingOps::forget_recorded();
  }

  // Keys with a record.
  size_t recorded_keys() const {
    return std::count_if(entries_.begin(), entries_.end(),
                         [](const auto& entry) { return entry.second.recorded; });
  }
  // Compute steps replayed from a record, since construction.
  int replays() const { return replays_; }

  void* allocate(size_t bytes) override {
    refuse_while_recording("allocate");
    return ForwardingOps::allocate(bytes);
  }
  double sum_of_squares(const void* x, size_t n) override {
    refuse_while_recording("sum_of_squares");
    return ForwardingOps::sum_of_squares(x, n);
  }
  void* create_mark() override {
    refuse_while_recording("create_mark");
    return ForwardingOps::create_mark();
  }
  void* allocate_host(size_t bytes) override {
    refuse_while_recording("allocate_host");
    return ForwardingOps::allocate_host(bytes);
  }

  void deallocate(void* pointer) override {
    refuse_while_recording("deallocate");
    ForwardingOps::deallocate(pointer);
  }
  void copy_to_host(void* host_destination, const void* source, size_t bytes) override {
    refuse_while_recording("copy_to_host");
    ForwardingOps::copy_to_host(host_destination, source, bytes);
  }
  void copy_from_host(void* destination, const void* host_source, size_t bytes) override {
    refuse_while_recording("copy_from_host");
    ForwardingOps::copy_from_host(destination, host_source, bytes);
  }
  void copy_from_host_async(void* destination, const void* host_source, size_t bytes) override {
    refuse_while_recording("copy_from_host_async");
    ForwardingOps::copy_from_host_async(destination, host_source, bytes);
  }
  void copy(void* destination, const void* source, size_t bytes) override {
    record([=, this] { ForwardingOps::copy(destination, source, bytes); });
  }
  void zero_bytes(void* x, size_t bytes) override {
    record([=, this] { ForwardingOps::zero_bytes(x, bytes); });
  }
  void synchronize() override {
    refuse_while_recording("synchronize");
    ForwardingOps::synchronize();
  }
  void check_deferred_errors() override {
    refuse_while_recording("check_deferred_errors");
    ForwardingOps::check_deferred_errors();
  }
  void convert_from_float(void* out, const float* in, size_t n) override {
    record([=, this] { ForwardingOps::convert_from_float(out, in, n); });
  }
  void convert_to_float(float* out, const void* in, size_t n) override {
    record([=, this] { ForwardingOps::convert_to_float(out, in, n); });
  }
  void record_mark(void* mark) override {
    refuse_while_recording("record_mark");
    ForwardingOps::record_mark(mark);
  }
  void destroy_mark(void* mark) override {
    refuse_while_recording("destroy_mark");
    ForwardingOps::destroy_mark(mark);
  }
  void deallocate_host(void* pointer) override {
    refuse_while_recording("deallocate_host");
    ForwardingOps::deallocate_host(pointer);
  }
  void token_embedding_forward(void* out, const int32_t* tokens, const void* wte, int num_tokens,
                               int vocab_start, int vocab_local, int channels) override {
    record([=, this] {
      ForwardingOps::token_embedding_forward(out, tokens, wte, num_tokens, vocab_start, vocab_local,
                                             channels);
    });
  }
  void token_embedding_backward(void* dwte, const void* dout, const int32_t* tokens, int num_tokens,
                                int vocab_start, int vocab_local, int channels) override {
    record([=, this] {
      ForwardingOps::token_embedding_backward(dwte, dout, tokens, num_tokens, vocab_start,
                                              vocab_local, channels);
    });
  }
  void position_embedding_forward(void* out, const void* wpe, int batch, int seq_len,
                                  int channels) override {
    record([=, this] {
      ForwardingOps::position_embedding_forward(out, wpe, batch, seq_len, channels);
    });
  }
  void position_embedding_backward(void* dwpe, const void* dout, int batch, int seq_len,
                                   int channels) override {
    record([=, this] {
      ForwardingOps::position_embedding_backward(dwpe, dout, batch, seq_len, channels);
    });
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int rows, int channels, float epsilon) override {
    record([=, this] {
      ForwardingOps::layernorm_forward(out, mean, rstd, inp, weight, bias, rows, channels, epsilon);
    });
  }
  void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                          const void* weight, const float* mean, const float* rstd, int rows,
                          int channels) override {
    record([=, this] {
      ForwardingOps::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows,
                                        channels);
    });
  }
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int rows,
                       int channels, float epsilon) override {
    record([=, this] {
      ForwardingOps::rmsnorm_forward(out, rstd, inp, weight, rows, channels, epsilon);
    });
  }
  void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                        const void* weight, const float* rstd, int rows, int channels) override {
    record([=, this] {
      ForwardingOps::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, rows, channels);
    });
  }
  void linear_forward(void* out, const void* inp, const void* weight, const void* bias, int rows,
                      int in_features, int out_features) override {
    record([=, this] {
      ForwardingOps::linear_forward(out, inp, weight, bias, rows, in_features, out_features);
    });
  }
  void linear_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                       const void* weight, int rows, int in_features, int out_features,
                       GradientWrite dinp_write) override {
    record([=, this] {
      ForwardingOps::linear_backward(dinp, dweight, dbias, dout, inp, weight, rows, in_features,
                                     out_features, dinp_write);
    });
  }
  void linear_residual_forward(void* out, const void* inp, const void* weight, const void* bias,
                               const void* residual, int rows, int in_features,
                               int out_features) override {
    record([=, this] {
      ForwardingOps::linear_residual_forward(out, inp, weight, bias, residual, rows, in_features,
                                             out_features);
    });
  }
  void linear_gelu_forward(void* pre_gelu, void* out, const void* inp, const void* weight,
                           const void* bias, int rows, int in_features, int out_features) override {
    record([=, this] {
      ForwardingOps::linear_gelu_forward(pre_gelu, out, inp, weight, bias, rows, in_features,
                                         out_features);
    });
  }
  void linear_backward_gelu(void* dpre_gelu, const void* dout, const void* weight,
                            const void* pre_gelu, int rows, int in_features,
                            int out_features) override {
    record([=, this] {
      ForwardingOps::linear_backward_gelu(dpre_gelu, dout, weight, pre_gelu, rows, in_features,
                                          out_features);
    });
  }
  void linear_weight_gradients(void* dweight, void* dbias, const void* dout, const void* inp,
                               int rows, int in_features, int out_features) override {
    record([=, this] {
      ForwardingOps::linear_weight_gradients(dweight, dbias, dout, inp, rows, in_features,
                                             out_features);
    });
  }
  void join_weight_gradients() override {
    record([=, this] { ForwardingOps::join_weight_gradients(); });
  }
  void gelu_forward(void* out, const void* inp, size_t n) override {
    record([=, this] { ForwardingOps::gelu_forward(out, inp, n); });
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n,
                     GradientWrite write) override {
    record([=, this] { ForwardingOps::gelu_backward(dinp, inp, dout, n, write); });
  }
  void residual_forward(void* out, const void* a, const void* b, size_t n) override {
    record([=, this] { ForwardingOps::residual_forward(out, a, b, n); });
  }
  void accumulate(void* dx, const void* dout, size_t n) override {
    record([=, this] { ForwardingOps::accumulate(dx, dout, n); });
  }
  void accumulate_into_float(float* x, const void* y, size_t n) override {
    record([=, this] { ForwardingOps::accumulate_into_float(x, y, n); });
  }
  void accumulate_float32(float* x, const float* y, size_t n) override {
    record([=, this] { ForwardingOps::accumulate_float32(x, y, n); });
  }
  void scale(void* x, float factor, size_t n) override {
    record([=, this] { ForwardingOps::scale(x, factor, n); });
  }
  void swiglu_forward(void* out, const void* gate_up, int rows, int hidden) override {
    record([=, this] { ForwardingOps::swiglu_forward(out, gate_up, rows, hidden); });
  }
  void swiglu_backward(void* dgate_up, const void* gate_up, const void* dout, int rows, int hidden,
                       GradientWrite write) override {
    record([=, this] {
      ForwardingOps::swiglu_backward(dgate_up, gate_up, dout, rows, hidden, write);
    });
  }
  void rope_forward(void* qkv, const float* cos, const float* sin, int batch, int seq_len,
                    int num_heads, int num_kv_heads, int head_dim) override {
    record([=, this] {
      ForwardingOps::rope_forward(qkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim);
    });
  }
  void rope_backward(void* dqkv, const float* cos, const float* sin, int batch, int seq_len,
                     int num_heads, int num_kv_heads, int head_dim) override {
    record([=, this] {
      ForwardingOps::rope_backward(dqkv, cos, sin, batch, seq_len, num_heads, num_kv_heads,
                                   head_dim);
    });
  }
  void attention_forward(void* out, float* logsumexp, const void* qkv, int batch, int seq_len,
                         int num_heads, int num_kv_heads, int head_dim) override {
    record([=, this] {
      ForwardingOps::attention_forward(out, logsumexp, qkv, batch, seq_len, num_heads, num_kv_heads,
                                       head_dim);
    });
  }
  void attention_backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                          const void* out, const float* logsumexp, int batch, int seq_len,
                          int num_heads, int num_kv_heads, int head_dim,
                          GradientWrite write) override {
    record([=, this] {
      ForwardingOps::attention_backward(dqkv, scratch, dout, qkv, out, logsumexp, batch, seq_len,
                                        num_heads, num_kv_heads, head_dim, write);
    });
  }
  void attention_block_forward(float* out_accumulator, float* logsumexp, const void* q,
                               const void* kv, const int32_t* q_positions,
                               const int32_t* kv_positions, const int32_t* documents,
                               const AttentionBlockShape& shape, bool first) override {
    record([=, this] {
      ForwardingOps::attention_block_forward(out_accumulator, logsumexp, q, kv, q_positions,
                                             kv_positions, documents, shape, first);
    });
  }
  void attention_block_backward(float* dq_accumulator, float* dkv_accumulator, const void* dout,
                                const void* out, const float* logsumexp, const void* q,
                                const void* kv, const int32_t* q_positions,
                                const int32_t* kv_positions, const int32_t* documents,
                                const AttentionBlockShape& shape) override {
    record([=, this] {
      ForwardingOps::attention_block_backward(dq_accumulator, dkv_accumulator, dout, out, logsumexp,
                                              q, kv, q_positions, kv_positions, documents, shape);
    });
  }
  void copy_rows(void* destination, size_t destination_stride, const void* source,
                 size_t source_stride, size_t rows, size_t row_bytes) override {
    record([=, this] {
      ForwardingOps::copy_rows(destination, destination_stride, source, source_stride, rows,
                               row_bytes);
    });
  }
  void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int rows, int vocab, float loss_scale,
                             double* loss_sum) override {
    record([=, this] {
      ForwardingOps::softmax_cross_entropy(losses, dlogits, logits, targets, rows, vocab,
                                           loss_scale, loss_sum);
    });
  }
  void cross_entropy_shard_stats(float* row_max, float* target_logit, const void* logits,
                                 const int32_t* targets, int rows, int vocab_local,
                                 int vocab_start) override {
    record([=, this] {
      ForwardingOps::cross_entropy_shard_stats(row_max, target_logit, logits, targets, rows,
                                               vocab_local, vocab_start);
    });
  }
  void cross_entropy_shard_exp_sums(float* exp_sum, const void* logits, const float* row_max,
                                    int rows, int vocab_local) override {
    record([=, this] {
      ForwardingOps::cross_entropy_shard_exp_sums(exp_sum, logits, row_max, rows, vocab_local);
    });
  }
  void cross_entropy_shard_finish(float* losses, void* dlogits, const void* logits,
                                  const int32_t* targets, const float* row_max,
                                  const float* exp_sum, const float* target_logit, int rows,
                                  int vocab_local, int vocab_start, float loss_scale,
                                  double* loss_sum) override {
    record([=, this] {
      ForwardingOps::cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max, exp_sum,
                                                target_logit, rows, vocab_local, vocab_start,
                                                loss_scale, loss_sum);
    });
  }
  void adamw(float* master, void* params, const void* grads, float* first_moment,
             float* second_moment, size_t n, const AdamWStep& hyperparameters) override {
    record([=, this] {
      ForwardingOps::adamw(master, params, grads, first_moment, second_moment, n, hyperparameters);
    });
  }
  void adamw_float_gradients(float* master, void* params, const float* grads, float* first_moment,
                             float* second_moment, size_t n,
                             const AdamWStep& hyperparameters) override {
    record([=, this] {
      ForwardingOps::adamw_float_gradients(master, params, grads, first_moment, second_moment, n,
                                           hyperparameters);
    });
  }
  void adamw_runs(const std::vector<AdamWRun>& runs, bool float_gradients,
                  const AdamWStep& hyperparameters, const GradientClip& clip) override {
    record([=, this] { ForwardingOps::adamw_runs(runs, float_gradients, hyperparameters, clip); });
  }
  void accumulate_sum_of_squares(double* accumulator, const void* x, size_t n) override {
    record([=, this] { ForwardingOps::accumulate_sum_of_squares(accumulator, x, n); });
  }
  void accumulate_float_sum_of_squares(double* accumulator, const float* x, size_t n) override {
    record([=, this] { ForwardingOps::accumulate_float_sum_of_squares(accumulator, x, n); });
  }
  void accumulate_sum(double* accumulator, const float* x, size_t n) override {
    record([=, this] { ForwardingOps::accumulate_sum(accumulator, x, n); });
  }

 private:
  struct Entry {
    int runs = 0;
    bool recorded = false;
    std::vector<std::function<void()>> calls;
  };

  template <typename Call>
  void record(Call call) {
    if (recording_ != nullptr) {
      recording_->push_back(std::move(call));
    } else {
      call();
    }
  }
  void refuse_while_recording(const char* op) const {
    if (recording_ != nullptr)
      throw std::logic_error(std::string("RecordingOps: ") + op +
                             " inside a recorded compute step (a CUDA graph capture would break)");
  }

  std::map<uint64_t, Entry> entries_;
  std::vector<std::function<void()>>* recording_ = nullptr;
  int replays_ = 0;
};

}  // namespace paraplan::testing
