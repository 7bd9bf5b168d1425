// tensor_parallel.cc: the f and g mappings and the vocabulary-parallel
// embedding and cross-entropy.
#include "runtime/model/tensor_parallel.h"

#include <stdexcept>
#include <string>

namespace paraplan {

TensorParallel::TensorParallel(Communicator* group, kernels::Ops& ops, MemoryTracker& memory,
                               size_t cross_entropy_rows, bool sequence_parallel)
    : group_(group),
      sequence_parallel_(sequence_parallel && group != nullptr && group->size() > 1),
      ops_(ops),
      memory_(memory) {
  if (size() > 1 && cross_entropy_rows > 0) {
    const size_t bytes = cross_entropy_rows * sizeof(float);
    row_max_ = static_cast<float*>(memory_.allocate(bytes, MemoryCategory::kWorkspace));
    row_sums_ = static_cast<float*>(memory_.allocate(2 * bytes, MemoryCategory::kWorkspace));
  }
}

TensorParallel::~TensorParallel() {
  for (float* rows : {row_max_, row_sums_})
    if (rows) memory_.release(rows);
}

void TensorParallel::f_backward(void* input_gradient, size_t count) {
  if (size() > 1) group_->all_reduce(input_gradient, count, ops_.storage_dtype(), ReduceOp::kSum);
}

void TensorParallel::g_forward(void* output, size_t count) {
  if (size() > 1) group_->all_reduce(output, count, ops_.storage_dtype(), ReduceOp::kSum);
}

// The sequence-parallel mappings run only with sequence_parallel_ (so a
// group of more than one); callers keep the plain f and g otherwise.
void TensorParallel::require_sequence_parallel(const char* mapping) const {
  if (!sequence_parallel_)
    throw std::logic_error(std::string("tensor parallel: ") + mapping +
                           " without sequence parallelism over a group of more than one");
}

void TensorParallel::gather_from_sequence_parallel_region(const void* shard, void* full,
                                                          size_t shard_count) {
  require_sequence_parallel("gather_from_sequence_parallel_region");
  group_->all_gather(shard, full, shard_count, ops_.storage_dtype());
}

void TensorParallel::gather_from_sequence_parallel_region_backward(const void* full_gradient,
                                                                   void* shard_gradient,
                                                                   size_t shard_count) {
  require_sequence_parallel("gather_from_sequence_parallel_region backward");
  group_->reduce_scatter(full_gradient, shard_gradient, shard_count, ops_.storage_dtype());
}

void TensorParallel::reduce_scatter_to_sequence_parallel_region(const void* full, void* shard,
                                                                size_t shard_count) {
  require_sequence_parallel("reduce_scatter_to_sequence_parallel_region");
  group_->reduce_scatter(full, shard, shard_count, ops_.storage_dtype());
}

void TensorParallel::reduce_scatter_to_sequence_parallel_region_backward(const void* shard_gradient,
                                                                         void* full_gradient,
                                                                         size_t shard_count) {
  require_sequence_parallel("reduce_scatter_to_sequence_parallel_region backward");
  group_->all_gather(shard_gradient, full_gradient, shard_count, ops_.storage_dtype());
}

void TensorParallel::all_reduce_sequence_parallel_gradients(void* gradients, size_t count) {
  if (sequence_parallel_)
    group_->all_reduce(gradients, count, ops_.storage_dtype(), ReduceOp::kSum);
}

void TensorParallel::vocab_parallel_embedding_forward(void* out, const int32_t* tokens,
                                                      const void* table, int rows, int vocab_start,
                                                      int local_vocab, int C) {
  ops_.token_embedding_forward(out, tokens, table, rows, vocab_start, local_vocab, C);
  if (size() > 1)
    group_->all_reduce(out, static_cast<size_t>(rows) * C, ops_.storage_dtype(), ReduceOp::kSum);
}

void TensorParallel::vocab_parallel_cross_entropy(float* losses, void* dlogits, const void* logits,
                                                  const int32_t* targets, int rows, int local_vocab,
                                                  int vocab_start, float loss_scale,
                                                  double* loss_sum) {
  if (size() == 1) {
    ops_.softmax_cross_entropy(losses, dlogits, logits, targets, rows, local_vocab, loss_scale,
                               loss_sum);
    return;
  }
  // Each shard's row statistics, combined across the group: the maximum, the
  // sum of exponentials relative to it, and the target's logit (held by one
  // rank, zero elsewhere). The two sums side by side, summed in one call
  // (two all-reduces a micro-batch, as the planner charges; the in-order
  // sum of each element is the same either way).
  float* exp_sums = row_sums_;
  float* target_logits = row_sums_ + rows;
  ops_.cross_entropy_shard_stats(row_max_, target_logits, logits, targets, rows, local_vocab,
                                 vocab_start);
  group_->all_reduce(row_max_, rows, ReduceOp::kMax);
  ops_.cross_entropy_shard_exp_sums(exp_sums, logits, row_max_, rows, local_vocab);
  group_->all_reduce(row_sums_, 2 * static_cast<size_t>(rows), ReduceOp::kSum);
  ops_.cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max_, exp_sums,
                                  target_logits, rows, local_vocab, vocab_start, loss_scale,
                                  loss_sum);
}

}  // namespace paraplan
