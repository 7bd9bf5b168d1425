// zero_test_support.h: what the ZeRO memory tests (zero_memory_test.cc,
// zero_three_cost_test.cc) work out by hand from the runtime's units: a
// small GPT-2, the runtime's shard padding, and the bytes of a rank's
// sharded units.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "planner/job/job_config.h"

namespace paraplan::zero_test {

inline ModelConfig small_model(bool tied, int layers = 6) {
  ModelConfig model;  // GPT-2 layout, float32
  model.vocab_size = 1000;
  model.seq_len = 32;
  model.num_layers = layers;
  model.d_model = 64;
  model.num_heads = 4;
  model.ffn_size = 256;
  model.tied_embeddings = tied;
  return model;
}

// Padded to the runtime's shard unit, 8 x z elements.
inline int64_t pad(int64_t elements, int64_t z) {
  return (elements + 8 * z - 1) / (8 * z) * (8 * z);
}

// A rank's bytes of sharded units (runtime/parallel/sharded_gradients.h and
// sharded_parameters.h): resident units whole (padded), `slots` slots of the
// largest streamed unit, and every unit's chunk in the shard. gradients:
// each slot with its 1/z reduce-scatter receive chunk, the shard in fp32
// whatever the dtype, and under a narrower dtype each resident unit's
// receive chunk (padded / z) in it.
inline int64_t unit_storage_bytes(const std::vector<int64_t>& resident,
                                  const std::vector<int64_t>& streamed, int64_t slots, int64_t z,
                                  int64_t element_bytes, bool gradients) {
  int64_t elements = 0, largest = 0, shard = 0, resident_chunks = 0;
  for (int64_t unit : resident) elements += pad(unit, z), resident_chunks += pad(unit, z) / z;
  for (int64_t unit : streamed)
    largest = std::max(largest, pad(unit, z)), shard += pad(unit, z) / z;
  shard += resident_chunks;
  if (!gradients) return element_bytes * (elements + slots * largest + shard);
  const int64_t receive = element_bytes < 4 ? resident_chunks : 0;
  return element_bytes * (elements + slots * (largest + largest / z) + receive) + 4 * shard;
}

}  // namespace paraplan::zero_test
