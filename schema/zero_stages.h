// zero_stages.h: the ZeRO stages a plan may name (Rajbhandari et al. 2020),
// in one place: the plan validator, the job config and the planner's search
// ask here which stages exist and what each shards.
//
// 0: nothing sharded (data parallelism replicates everything);
// 1: the optimizer state (fp32 master weights and moments);
// 2: the gradients too, reduce-scattered as backward produces them;
// 3: the parameters too, gathered layer by layer ahead of use.
// The runtime runs all four and the planner plans all four, so one bound
// serves the plan validator, the job's [planner] zero_stage and the search.
#pragma once

#include <string>

namespace paraplan {

// The highest stage a plan may name and a job may ask the planner for.
inline constexpr int kHighestZeroStage = 3;

// The valid values of a plan's zero.stage and a job's [planner] zero_stage,
// for a message.
inline std::string zero_stages_text() {
  return "0 (off), 1 (optimizer state sharded over data parallel), 2 (gradients too), "
         "3 (parameters too)";
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
