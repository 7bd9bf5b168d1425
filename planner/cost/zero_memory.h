// zero_memory.h: what a ZeRO stage (schema/zero_stages.h) divides of the
// model state, in one place, and ZeRO-2's gradient storage as the runtime
// allocates it.
//
// - zero_sharding(stage, group): which of weights, gradients and optimizer
//   state a stage divides by its group. model_state_memory (cost_model.h)
//   applies it; the ZeRO paper's idealized table (zero_paper_model_state_bytes)
//   and the planner's stage memory (stage_memory) both go through it, so the
//   table cannot drift from the model.
// - ZeRO-2 (runtime/parallel/sharded_gradients.h): a rank's gradients live
//   in units backward finishes one at a time: the embedding (token and
//   position embeddings), each block, and the final norm with the head.
//   A unit holding a tied tensor (the tied embedding, or a head's copy of
//   it) or written over the whole backward (the embedding of a stage whose
//   tied head writes it first) is resident: whole for the step. The others
//   share a pool of two slots, each the largest of them padded to a
//   multiple of 8 x z elements (shard_unit_elements) plus its reduce-scatter
//   receive chunk (1 / z of that). Schedules that split backward keep units
//   from their B to their W, and the pool grows to the units held at once:
//   at most every streamed unit, the bound taken here (a slot each, of the
//   largest unit's size: never below the runtime's; above it where fewer
//   are held at once, as replays of an untied first stage show). Every
//   unit's chunk (padded / z) sits in the rank's gradient shard, fp32
//   whatever the storage dtype (micro-batches are summed there in fp32);
//   under a narrower dtype each resident unit also has a receive chunk
//   (padded / z) in it for its reduce-scatter. The stage's parameter buffer is 8 x z - 1 elements
//   longer (the last unit's all-gather spills its padding).
// - ZeRO-3 (runtime/parallel/sharded_parameters.h): the parameters over the
//   same units, resident ones alike, with no parameter buffer (so no
//   spill): every unit's chunk in the shard, the resident units whole, and
//   gathered slots of the largest streamed unit, padded: two (the unit read
//   and the next one prefetched), or, where the rank keeps its parameters
//   gathered across its micro-batches, one per streamed unit (the first
//   forward reads every one and none is freed before the step ends). The
//   storage starts with two slots, so never fewer. Gradients and optimizer
//   state are ZeRO-2's.
#pragma once

#include <algorithm>
#include <cstdint>

#include "planner/job/job_config.h"
#include "schema/pipeline_layout.h"
#include "schema/zero_stages.h"

namespace paraplan {

// The divisors of the model state's parts under a ZeRO stage over a group
// of `group` ranks: 1 where the stage keeps the part whole.
struct ZeroSharding {
  int weights_divisor = 1, gradients_divisor = 1, optimizer_divisor = 1;
  bool operator==(const ZeroSharding&) const = default;
};
ZeroSharding zero_sharding(int zero_stage, int group);

// The ZeRO group of a setting: data_parallel / zero_ngroups ranks where the
// stage shards anything, else 1. (With context parallelism data_parallel is
// the data x context-parallel ranks: ParallelShape::gradient_replicas.)
int zero_group_size(int zero_stage, int data_parallel, int zero_ngroups);

// The runtime's shard alignment (runtime/parallel/gradient_buckets.h): each
// shard 16-byte aligned, 8 x the group size elements (1 without a group).
inline int64_t shard_unit_elements(int group) {
  return group > 1 ? int64_t{8} * group : 1;
}
inline int64_t padded_to_shard_unit(int64_t elements, int group) {
  const int64_t unit = shard_unit_elements(group);
  return (elements + unit - 1) / unit * unit;
}

// The end units (embedding, head) of a pipeline rank under ZeRO-2, per
// device of the tensor-parallel group: at most two.
struct ZeroTwoEnds {
  int count = 0;
  int64_t elements[2] = {0, 0};
  bool resident[2] = {false, false};
};
// separate_ends: the rank holds the embedding and the head in two chunks (the
// V kinds' first rank), so a tied head is a copy of its own.
ZeroTwoEnds zero_two_ends(const ModelConfig& model, bool has_embedding, bool has_head,
                          bool separate_ends, int tensor_parallel, int64_t replicate_below);

// The largest unit the search tries where [planner] zero_layers_per_unit
// is unset (StageCostModel::larger_zero_unit), in blocks.
inline constexpr int kLargestZeroUnit = 8;

// A rank's ZeRO-2 gradient storage, in elements, for any number of blocks,
// its blocks in units of layers_per_unit (the last unit what is left). A
// rank of several model chunks (interleaved, the V kinds) splits its blocks
// over them as the plan writer does (the earlier chunks one more where they
// do not divide), and each chunk makes its own units
// (schema/zero_units.h), so a chunk's last unit may be short.
struct ZeroTwoGradients {
  int group = 1;                 // z
  bool split_backward = false;   // a slot per streamed unit
  int layers_per_unit = 1;       // Zero.layers_per_unit
  int chunks = 1;                // model chunks of the rank
  int64_t block_elements = 0;    // one block's parameters
  int64_t unit_padded = 0;       // a unit of layers_per_unit blocks, padded
  int64_t resident_padded = 0;   // the resident end units, padded, summed
  int64_t streamed_largest = 0;  // the largest streamed end unit, padded (0: none)
  int streamed_ends = 0;         // streamed end units
  int64_t ends_padded = 0;       // every end unit, padded, summed
  // The blocks of chunk c of a rank of `blocks` (schema/pipeline_layout.h).
  int chunk_blocks(int blocks, int c) const { return chunk_layers(std::max(blocks, 0), chunks, c); }
  // f over the chunks' block counts, summed: chunk_layers gives n % chunks
  // chunks one block more than the rest (the search asks millions of times:
  // no loop).
  template <typename PerChunk>
  int64_t over_chunks(int blocks, PerChunk f) const {
    const int n = std::max(blocks, 0), longer = n % chunks;
    return longer * f(n / chunks + 1) + (chunks - longer) * f(n / chunks);
  }
  // The units `blocks` blocks make, and n blocks' unit padded.
  int64_t block_units(int blocks) const {
    return over_chunks(blocks,
                       [&](int n) { return (int64_t{n} + layers_per_unit - 1) / layers_per_unit; });
  }
  int64_t padded_blocks(int n) const { return padded_to_shard_unit(block_elements * n, group); }
  // The pool's slots with `blocks` blocks: 2, or under split backward one
  // per streamed unit (at least 2: an upper bound); 0 when nothing streams.
  int64_t pool_slots(int blocks) const {
    const int64_t streamed = block_units(blocks) + streamed_ends;
    if (streamed == 0 || slot_elements(blocks) == 0) return 0;
    return split_backward ? std::max<int64_t>(2, streamed) : 2;
  }
  // The largest streamed unit with `blocks` blocks, padded (0: none streams).
  int64_t largest_streamed(int blocks) const {
    const int most = chunk_blocks(blocks, 0);  // the first chunk holds the most
    const int64_t largest_blocks = most <= 0                 ? 0
                                   : most >= layers_per_unit ? unit_padded
                                                             : padded_blocks(most);
    return std::max(largest_blocks, streamed_largest);
  }
  // One slot: the largest streamed unit, padded, and its receive chunk.
  int64_t slot_elements(int blocks) const {
    const int64_t largest = largest_streamed(blocks);
    return largest + largest / group;
  }
  // The rank's gradient shard: every unit's chunk.
  int64_t shard_elements(int blocks) const {
    const int64_t padded = over_chunks(blocks, [&](int n) {
      const int left = n % layers_per_unit;
      return n / layers_per_unit * unit_padded + (left > 0 ? padded_blocks(left) : 0);
    });
    return (padded + ends_padded) / group;
  }
  // Everything, in bytes for a storage dtype of element_bytes: resident
  // units, the pool and, under a dtype narrower than fp32, the resident
  // units' reduce-scatter receive chunks, all in that dtype; the shard in
  // fp32 whatever the dtype (the runtime sums micro-batches there in fp32).
  int64_t bytes(int blocks, int64_t element_bytes) const {
    const int64_t receive = element_bytes < 4 ? resident_padded / group : 0;
    return element_bytes *
               (resident_padded + pool_slots(blocks) * slot_elements(blocks) + receive) +
           4 * shard_elements(blocks);
  }
  // What the parameter buffer holds beyond the parameters.
  int64_t parameter_spill() const { return group > 1 ? shard_unit_elements(group) - 1 : 0; }
};
ZeroTwoGradients zero_two_gradients(const ZeroTwoEnds& ends, int64_t block_elements, int group,
                                    bool split_backward, int layers_per_unit = 1, int chunks = 1);

// ZeRO-3's gathered slots of a rank of `blocks` blocks over ZeRO-2's units:
// 2, or with keep_gathered one per streamed unit (at least 2); 0 when
// nothing streams. Each holds largest_streamed(blocks) elements.
inline int64_t zero_three_gathered_slots(const ZeroTwoGradients& units, int blocks,
                                         bool keep_gathered) {
  const int64_t streamed = units.block_units(blocks) + units.streamed_ends;
  if (streamed == 0 || units.largest_streamed(blocks) == 0) return 0;
  // Kept: every streamed unit stays in a slot of its own from its first read
  // to the step's end; freed: the one read and the one prefetched.
  return keep_gathered ? std::max<int64_t>(2, streamed) : 2;
}
// ZeRO-3's parameter storage of such a rank, in elements: what it owns (the
// shard and the resident units whole: StageMemory.weights) and its gathered
// working set (the slots: StageMemory.gathered).
inline int64_t zero_three_owned_elements(const ZeroTwoGradients& units, int blocks) {
  return units.resident_padded + units.shard_elements(blocks);
}
inline int64_t zero_three_gathered_elements(const ZeroTwoGradients& units, int blocks,
                                            bool keep_gathered) {
  return zero_three_gathered_slots(units, blocks, keep_gathered) * units.largest_streamed(blocks);
}

// The ZeRO paper's per-device model-state bytes (Rajbhandari et al. 2020,
// section 5 and Table 1): mixed-precision Adam with 2-byte weights and
// gradients and K bytes of optimizer state per parameter (K = 12: fp32
// master weights, momentum and variance), over data_parallel ranks.
// Stage 0: (2 + 2 + K) psi; 1: 2 psi + 2 psi + K psi / Nd; 2: 2 psi +
// (2 + K) psi / Nd; 3: (2 + 2 + K) psi / Nd. model_state_memory with
// zero_sharding(stage, Nd).
double zero_paper_model_state_bytes(double parameters, int zero_stage, int data_parallel,
                                    double optimizer_bytes_per_parameter = 12);

}  // namespace paraplan
