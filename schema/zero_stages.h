// zero_stages.h: the ZeRO stages a plan may name (Rajbhandari et al. 2020),
// in one place: the plan validator, the job config and the planner's search
// ask here which stages exist and what each shards.
//
// 0: nothing sharded (data parallelism replicates everything);
// 1: the optimizer state (fp32 master weights and moments);
// 2: the gradients too, reduce-scattered as backward produces them;
// 3: the parameters too, gathered layer by layer ahead of use.
// Stage 3 is part of the format and of the planner's memory model (its
// table of model-state bytes), but no runtime runs it yet: plans refuse it.
#pragma once

#include <string>

namespace paraplan {

inline constexpr int kHighestZeroStage = 3;
// The highest stage paraplan's runtime executes; plans and jobs name at most this.
inline constexpr int kHighestRunnableZeroStage = 2;

// "0 (off), 1 (optimizer state sharded), 2 (gradients too)": the valid values
// for a message.
inline std::string runnable_zero_stages_text() {
  return "0 (off), 1 (optimizer state sharded over data parallel), 2 (gradients too)";
}

// Shards the optimizer state (and, from 1 up, everything of the stages below).
inline bool shards_optimizer_state(int stage) {
  return stage >= 1;
}
inline bool shards_gradients(int stage) {
  return stage >= 2;
}
inline bool shards_parameters(int stage) {
  return stage >= 3;
}

}  // namespace paraplan
