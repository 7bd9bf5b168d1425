// zero_memory.cc: ZeRO's sharding rule, ZeRO-2's gradient units, ZeRO-3's
// parameter storage over them and the ZeRO paper's model-state bytes (see
// zero_memory.h).
#include "planner/cost/zero_memory.h"

#include "planner/cost/cost_model.h"
#include "planner/cost/model_counts.h"

namespace paraplan {

ZeroSharding zero_sharding(int zero_stage, int group) {
  const int z = std::max(group, 1);
  ZeroSharding sharding;
  sharding.optimizer_divisor = shards_optimizer_state(zero_stage) ? z : 1;
  sharding.gradients_divisor = shards_gradients(zero_stage) ? z : 1;
  sharding.weights_divisor = shards_parameters(zero_stage) ? z : 1;
  return sharding;
}

int zero_group_size(int zero_stage, int data_parallel, int zero_ngroups) {
  if (!shards_optimizer_state(zero_stage)) return 1;
  return std::max(data_parallel / std::max(zero_ngroups, 1), 1);
}

ZeroTwoEnds zero_two_ends(const ModelConfig& model, bool has_embedding, bool has_head,
                          bool separate_ends, int tensor_parallel, int64_t replicate_below) {
  ZeroTwoEnds ends;
  const bool tied = model.tied_embeddings;
  // The embedding: resident when tied (summed with the head's copy on
  // another stage or chunk, or written first by the head on its own stage).
  if (has_embedding) {
    ends.elements[ends.count] = embedding_parameters(model, tensor_parallel, replicate_below);
    ends.resident[ends.count++] = tied;
  }
  // The final norm with the head: resident when it holds a tied copy.
  if (has_head) {
    const bool head_is_embedding = has_embedding && !separate_ends;
    ends.elements[ends.count] =
        head_parameters(model, head_is_embedding, tensor_parallel, replicate_below);
    ends.resident[ends.count++] = tied && !head_is_embedding;
  }
  return ends;
}

ZeroTwoGradients zero_two_gradients(const ZeroTwoEnds& ends, int64_t block_elements, int group,
                                    bool split_backward) {
  ZeroTwoGradients gradients;
  gradients.group = std::max(group, 1);
  gradients.split_backward = split_backward;
  gradients.block_padded = padded_to_shard_unit(block_elements, gradients.group);
  for (int i = 0; i < ends.count; ++i) {
    const int64_t padded = padded_to_shard_unit(ends.elements[i], gradients.group);
    gradients.ends_padded += padded;
    if (ends.resident[i]) {
      gradients.resident_padded += padded;
    } else {
      gradients.streamed_largest = std::max(gradients.streamed_largest, padded);
      ++gradients.streamed_ends;
    }
  }
  return gradients;
}

int64_t ZeroTwoGradients::slot_elements(int blocks) const {
  const int64_t largest = largest_streamed(blocks);
  return largest + largest / group;
}

int64_t ZeroTwoGradients::pool_slots(int blocks) const {
  const int64_t streamed = int64_t{blocks > 0 ? blocks : 0} + streamed_ends;
  if (streamed == 0 || slot_elements(blocks) == 0) return 0;
  return split_backward ? std::max<int64_t>(2, streamed) : 2;
}

int64_t zero_three_gathered_slots(const ZeroTwoGradients& units, int blocks, bool keep_gathered) {
  const int64_t streamed = int64_t{blocks > 0 ? blocks : 0} + units.streamed_ends;
  if (streamed == 0 || units.largest_streamed(blocks) == 0) return 0;
  // Kept: every streamed unit stays in a slot of its own from its first read
  // to the step's end; freed: the one read and the one prefetched.
  return keep_gathered ? std::max<int64_t>(2, streamed) : 2;
}

int64_t zero_three_owned_elements(const ZeroTwoGradients& units, int blocks) {
  return units.resident_padded + units.shard_elements(blocks);
}

int64_t zero_three_gathered_elements(const ZeroTwoGradients& units, int blocks,
                                     bool keep_gathered) {
  return zero_three_gathered_slots(units, blocks, keep_gathered) * units.largest_streamed(blocks);
}

double zero_paper_model_state_bytes(double parameters, int zero_stage, int data_parallel,
                                    double optimizer_bytes_per_parameter) {
  // 2-byte weights; the optimizer state is K / 2 x their bytes.
  const int weight_bytes = 2;
  return model_state_memory(parameters, weight_bytes, optimizer_bytes_per_parameter / weight_bytes,
                            0, zero_sharding(zero_stage, data_parallel))
      .total();
}

}  // namespace paraplan
