// tensor_parallel.h: Megatron's tensor-parallel mappings, by name, so reading
// a block shows where each collective sits.
//
//   f  (copy_to_tensor_parallel_region) sits before a column-parallel linear:
//      identity forward; backward all-reduces the input gradient, which each
//      rank holds a partial sum of.
//   g  (reduce_from_tensor_parallel_region) sits after a row-parallel linear:
//      forward all-reduces the partial outputs; identity backward.
//
// A transformer block has two of each: f before QKV and before the MLP
// up-projection, g after the attention projection and after the MLP
// down-projection. The embedding and the head are split by vocabulary rows:
// vocab_parallel_embedding_forward looks up this rank's rows (zeros for other
// tokens) and sums over the group; vocab_parallel_cross_entropy combines each
// shard's row maximum, exponential sum and target logit (two all-reduces:
// the maxima [B*T], then both sums in one [2 B*T] call) instead of gathering
// the logits.
//
// Sequence parallelism (Korthikanti et al. 2022, Megatron-core's names), when
// the plan sets it: the norm and residual regions hold this rank's shard of
// the micro-batch's B*T tokens (rows [rank*B*T/t, (rank+1)*B*T/t) of the
// [B*T, C] activations, contiguous), and f and g become
//   gather_from_sequence_parallel_region (before a column-parallel linear):
//      all-gather of the shards forward; reduce-scatter of the partial input
//      gradients backward;
//   reduce_scatter_to_sequence_parallel_region (after a row-parallel linear):
//      reduce-scatter of the partial outputs forward; all-gather of the
//      output gradient's shards backward.
// The same bytes cross the links as the all-reduce they replace (an
// all-reduce is a reduce-scatter then an all-gather). Parameters used inside
// the sequence region (the norms') get a partial gradient on each rank, over
// its tokens: all_reduce_sequence_parallel_gradients sums them.
//
// With a group of one (tensor_size 1) every mapping is the identity and no
// collective runs. Storage tensors are of the ops' storage dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/memory_tracker.h"

namespace paraplan {

class TensorParallel {
 public:
  // group: the tensor-parallel group, or null for tensor_size 1.
  // cross_entropy_rows: B * T on a stage with the head (the row statistics
  // the vocab-parallel cross-entropy keeps), else 0.
  // sequence_parallel: shard the norm and residual regions along the tokens
  // (ignored with a group of one).
  TensorParallel(Communicator* group, kernels::Ops& ops, MemoryTracker& memory,
                 size_t cross_entropy_rows, bool sequence_parallel = false);
  ~TensorParallel();
  TensorParallel(const TensorParallel&) = delete;
  TensorParallel& operator=(const TensorParallel&) = delete;

  int size() const { return group_ == nullptr ? 1 : group_->size(); }
  int rank() const { return group_ == nullptr ? 0 : group_->rank(); }

  // f's backward: sums the partial input gradients [count] of a
  // column-parallel linear over the group, in place.
  void f_backward(void* input_gradient, size_t count);
  // g's forward: sums the partial outputs [count] of a row-parallel linear
  // over the group, in place. (Its bias is added by tensor rank 0 only,
  // before this sum.)
  bool adds_row_parallel_bias() const { return rank() == 0; }
  void g_forward(void* output, size_t count);

  // Whether the norm and residual regions are sharded along the tokens
  // (the plan's sequence_parallel, with a group of more than one).
  bool sequence_parallel() const { return sequence_parallel_; }
  // shard_count = (B*T / t) * C elements, one rank's shard.
  // gather_from_sequence_parallel_region: full[t * shard_count] from every
  // rank's shard, in rank order (shard may be full + rank * shard_count).
  void gather_from_sequence_parallel_region(const void* shard, void* full, size_t shard_count);
  // Its backward: this rank's shard of the sum of the partial gradients.
  void gather_from_sequence_parallel_region_backward(const void* full_gradient,
                                                     void* shard_gradient, size_t shard_count);
  // reduce_scatter_to_sequence_parallel_region: this rank's shard of the sum
  // of the partial outputs full[t * shard_count].
  void reduce_scatter_to_sequence_parallel_region(const void* full, void* shard,
                                                  size_t shard_count);
  // Its backward: the whole gradient from every rank's shard.
  void reduce_scatter_to_sequence_parallel_region_backward(const void* shard_gradient,
                                                           void* full_gradient, size_t shard_count);
  // Sums, in place, gradients [count] of parameters used in the sequence
  // region, each rank's a partial sum over its tokens.
  void all_reduce_sequence_parallel_gradients(void* gradients, size_t count);

  // out[rows, C] = table[token - vocab_start] for the tokens of this rank's
  // vocabulary shard [vocab_start, vocab_start + local_vocab), summed over
  // the group (each token's row lives on exactly one rank).
  void vocab_parallel_embedding_forward(void* out, const int32_t* tokens, const void* table,
                                        int rows, int vocab_start, int local_vocab, int C);

  // Per-row losses[rows] of softmax cross-entropy over the whole vocabulary,
  // from this rank's logits [rows, local_vocab]; when dlogits is not null,
  // the gradient of loss_scale * sum(losses) with respect to this rank's
  // logits (dlogits may alias logits); loss_sum (may be null) += the sum of
  // the losses, in the loss op itself (Ops::softmax_cross_entropy). A group
  // of one runs the fused softmax_cross_entropy.
  void vocab_parallel_cross_entropy(float* losses, void* dlogits, const void* logits,
                                    const int32_t* targets, int rows, int local_vocab,
                                    int vocab_start, float loss_scale, double* loss_sum);

 private:
  void require_sequence_parallel(const char* mapping) const;

  Communicator* group_;
  bool sequence_parallel_;
  kernels::Ops& ops_;
  MemoryTracker& memory_;
  // The vocab-parallel cross-entropy's row statistics: the maxima
  // [cross_entropy_rows], and the sums [2 x cross_entropy_rows]: a call's
  // exponential sums for its rows, then its targets' logits right after
  // them, so one all-reduce sums both.
  float* row_max_ = nullptr;
  float* row_sums_ = nullptr;
};

}  // namespace paraplan
