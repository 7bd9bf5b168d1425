// no_compute_ops.h: an Ops decorator for tests that runs no compute: every
// kernel (embeddings, norms, GEMMs, attention, losses, the optimizer) and
// every fill or copy of backend memory returns at once. What is left is
// exactly the runtime's traffic with the ops — allocations, host copies,
// synchronizations — so a test can count a large model's synchronizations in
// no time and, since untouched allocations stay virtual, in little memory.
#pragma once

#include <memory>

#include "kernels/forwarding_ops.h"

namespace paraplan::testing {

class NoComputeOps final : public kernels::ForwardingOps {
 public:
  explicit NoComputeOps(std::unique_ptr<kernels::Ops> inner) : ForwardingOps(std::move(inner)) {}

  void copy(void*, const void*, size_t) override {}
  void zero_bytes(void*, size_t) override {}
  void convert_from_float(void*, const float*, size_t) override {}
  void convert_to_float(float*, const void*, size_t) override {}
  void token_embedding_forward(void*, const int32_t*, const void*, int, int, int, int) override {}
  void token_embedding_backward(void*, const void*, const int32_t*, int, int, int, int) override {}
  void position_embedding_forward(void*, const void*, int, int, int) override {}
  void position_embedding_backward(void*, const void*, int, int, int) override {}
  void layernorm_forward(void*, float*, float*, const void*, const void*, const void*, int, int,
                         float) override {}
  void layernorm_backward(void*, void*, void*, const void*, const void*, const void*, const float*,
                          const float*, int, int) override {}
  void rmsnorm_forward(void*, float*, const void*, const void*, int, int, float) override {}
  void rmsnorm_backward(void*, void*, const void*, const void*, const void*, const float*, int,
                        int) override {}
  void linear_forward(void*, const void*, const void*, const void*, int, int, int) override {}
  void linear_backward(void*, void*, void*, const void*, const void*, const void*, int, int, int,
                       kernels::GradientWrite) override {}
  void linear_residual_forward(void*, const void*, const void*, const void*, const void*, int, int,
                               int) override {}
  void linear_gelu_forward(void*, void*, const void*, const void*, const void*, int, int,
                           int) override {}
  void linear_backward_gelu(void*, const void*, const void*, const void*, int, int, int) override {}
  void linear_weight_gradients(void*, void*, const void*, const void*, int, int, int) override {}
  void gelu_forward(void*, const void*, size_t) override {}
  void gelu_backward(void*, const void*, const void*, size_t, kernels::GradientWrite) override {}
  void residual_forward(void*, const void*, const void*, size_t) override {}
  void accumulate(void*, const void*, size_t) override {}
  void accumulate_into_float(float*, const void*, size_t) override {}
  void accumulate_float32(float*, const float*, size_t) override {}
  void scale(void*, float, size_t) override {}
  void swiglu_forward(void*, const void*, int, int) override {}
  void swiglu_backward(void*, const void*, const void*, int, int, kernels::GradientWrite) override {
  }
  void rope_forward(void*, const float*, const float*, int, int, int, int, int) override {}
  void rope_backward(void*, const float*, const float*, int, int, int, int, int) override {}
  void attention_forward(void*, float*, const void*, int, int, int, int, int) override {}
  void attention_backward(void*, float*, const void*, const void*, const void*, const float*, int,
                          int, int, int, int, kernels::GradientWrite) override {}
  void attention_block_forward(float*, float*, const void*, const void*, const int32_t*,
                               const int32_t*, const int32_t*, const AttentionBlockShape&,
                               bool) override {}
  void attention_block_backward(float*, float*, const void*, const void*, const float*, const void*,
                                const void*, const int32_t*, const int32_t*, const int32_t*,
                                const AttentionBlockShape&) override {}
  void copy_rows(void*, size_t, const void*, size_t, size_t, size_t) override {}
  void softmax_cross_entropy(float*, void*, const void*, const int32_t*, int, int, float,
                             double*) override {}
  void cross_entropy_shard_stats(float*, float*, const void*, const int32_t*, int, int,
                                 int) override {}
  void cross_entropy_shard_exp_sums(float*, const void*, const float*, int, int) override {}
  void cross_entropy_shard_finish(float*, void*, const void*, const int32_t*, const float*,
                                  const float*, const float*, int, int, int, float,
                                  double*) override {}
  void adamw(float*, void*, const void*, float*, float*, size_t,
             const kernels::AdamWStep&) override {}
  void adamw_float_gradients(float*, void*, const float*, float*, float*, size_t,
                             const kernels::AdamWStep&) override {}
  void adamw_runs(const std::vector<kernels::AdamWRun>&, bool, const kernels::AdamWStep&,
                  const kernels::GradientClip&) override {}
  void accumulate_sum_of_squares(double*, const void*, size_t) override {}
  void accumulate_float_sum_of_squares(double*, const float*, size_t) override {}
  void accumulate_sum(double*, const float*, size_t) override {}
};

}  // namespace paraplan::testing
