// distributed_optimizer.h: the optimizer step of one rank: data-parallel
// gradient reduction, ZeRO-1, global-norm clipping and AdamW.
//
// Per step:
//   reduce_gradients()  the tied embedding's gradient summed between the first
//                       and last pipeline stage; then, over the data-parallel
//                       ranks, an all-reduce of the whole gradient buffer, or
//                       under ZeRO-1 a reduce-scatter within this rank's ZeRO
//                       group (plus an all-reduce of the shard across the
//                       zero_ngroups groups) so each rank holds the summed
//                       gradient of its shard only;
//   step()              the global L2 norm over every parameter of the model,
//                       each counted once (tensor-parallel replicas, data-parallel
//                       replicas and the last stage's tied copy excluded), clip,
//                       AdamW on this rank's part with fp32 moments sized to that
//                       part, and under ZeRO-1 the all-gather of the updated
//                       parameters within the ZeRO group.
// Weight decay applies to matrices and embeddings only (the layout's flag).
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/ops.h"
#include "runtime/communicator.h"
#include "runtime/gpt_layout.h"
#include "runtime/gpt_model.h"
#include "runtime/memory_tracker.h"

namespace paraplan {

struct AdamWSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0 disables clipping
};

class DistributedOptimizer {
 public:
  // Buffer elements a stage needs so that ZeRO-1 shards it evenly.
  static size_t buffer_elements(size_t num_elements, int zero_stage, int zero_group_size);

  DistributedOptimizer(GptStage& stage, kernels::Ops& ops, MemoryTracker& memory,
                       ProcessGroups& groups, const AdamWSettings& settings, int zero_stage);
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  void reduce_gradients();
  // Returns the gradient norm before clipping (the same on every rank).
  double step(float learning_rate, int step);

  // The moments of all this rank's parameters, whole (ZeRO shards gathered),
  // in host memory: for checkpoints. Collective over the ZeRO group.
  void gather_moments(std::vector<float>& first, std::vector<float>& second);
  // Sets the moments from whole host buffers; this rank keeps its part.
  void load_moments(const float* first, const float* second);

 private:
  // Sum of squares of the gradient elements this rank counts, in [begin, end).
  double counted_sum_of_squares(const float* gradients, size_t begin, size_t end) const;

  GptStage& stage_;
  const GptLayout& layout_;
  kernels::Ops& ops_;
  MemoryTracker& memory_;
  ProcessGroups& groups_;
  AdamWSettings settings_;
  bool sharded_;
  size_t begin_ = 0, end_ = 0;  // this rank's part of the flat buffer
  size_t shard_elements_ = 0;   // end_ - begin_ rounded up to the ZeRO chunk
  float* first_moment_ = nullptr;
  float* second_moment_ = nullptr;
  float* gradient_shard_ = nullptr;  // ZeRO-1: this rank's summed gradients
  bool counts_replicas_;             // this data-parallel replica counts in the norm
};

}  // namespace paraplan
