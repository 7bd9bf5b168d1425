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
                                    bool split_backward, int layers_per_unit, int chunks) {
  ZeroTwoGradients gradients;
  gradients.group = std::max(group, 1);
  gradients.split_backward = split_backward;
  gradients.layers_per_unit = std::max(layers_per_unit, 1);
  gradients.chunks = std::max(chunks, 1);
  gradients.block_elements = block_elements;
  gradients.unit_padded = gradients.padded_blocks(gradients.layers_per_unit);
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

double zero_paper_model_state_bytes(double parameters, int zero_stage, int data_parallel,
                                    double optimizer_bytes_per_parameter) {
  // 2-byte weights; the optimizer state is K / 2 x their bytes.
  const int weight_bytes = 2;
  return model_state_memory(parameters, weight_bytes, optimizer_bytes_per_parameter / weight_bytes,
                            0, zero_sharding(zero_stage, data_parallel))
      .total();
}

}  // namespace paraplan
