// gradient_buckets.h: how a stage's flat gradient buffer is cut into buckets
// for the data-parallel reduction, and which part of each bucket a ZeRO-1
// rank owns.
//
// Buckets let the reduction start while backward still runs (Megatron's
// overlapped DDP): backward finishes the gradients from the end of the buffer
// towards its start (head, last block, ..., first block, embeddings; see
// gpt_layout.h), so buckets are cut from the end, and a bucket is reduced as
// soon as backward has passed its first element. Every bucket's length is a
// multiple of the ZeRO group size, and under ZeRO-1 rank r owns the r-th
// equal chunk of every bucket (Megatron's distributed optimizer), so each
// bucket is one reduce-scatter and, after the step, one all-gather.
//
// The reduction sums every element in the same rank order whatever the
// bucketing, so bucketed and whole-buffer reductions give bitwise the same
// gradients.
#pragma once

#include <cstddef>
#include <vector>

namespace paraplan {

// Under ZeRO-1 every boundary (buffer end, bucket, each rank's chunk, its
// place in the shard) is a multiple of this many elements: 16 bytes of bf16,
// the alignment AdamW's and NCCL's vector paths need. With a chunk rounded
// only to the group size, a group of 3 put shards off 16-byte boundaries.
inline constexpr size_t kShardAlignmentElements = 8;

struct GradientBucket {
  size_t begin = 0, end = 0;  // buffer elements [begin, end)
  // ZeRO-1: this rank's chunk is [begin + rank * chunk, ... + chunk), stored at
  // shard_offset in the rank's gradient shard (its chunks in bucket order).
  size_t chunk = 0;
  size_t shard_offset = 0;
};

// Buckets over a buffer of buffer_elements, in buffer order, each at most
// bucket_elements long rounded up to a multiple of the shard unit (0: one
// bucket for everything), the short remainder at the start of the buffer.
// shards >= 1 is the ZeRO group size (1 without ZeRO-1); the unit is
// kShardAlignmentElements * shards with shards > 1, else 1. Throws
// std::invalid_argument if buffer_elements is not a multiple of the unit
// (shard_unit_elements; DistributedOptimizer::buffer_elements pads to it).
std::vector<GradientBucket> plan_gradient_buckets(size_t buffer_elements, size_t bucket_elements,
                                                  int shards);
size_t shard_unit_elements(int shards);

}  // namespace paraplan
