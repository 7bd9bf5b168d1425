// plan_candidate.h: a planned job as the search and the oracle return it: its
// setting (mesh, micro-batching, ZeRO, schedule), its stages and the model's
// estimate. plan_writer.h turns one into a plan file.
#pragma once

#include <vector>

#include "planner/cost/cost_model.h"
#include "planner/cost/plan_estimate.h"
#include "planner/cost/stage_cost.h"

namespace paraplan {

struct PlanCandidate {
  PlanSetting setting;
  std::vector<StageLayout> stages;  // per pipeline rank, per-layer recompute filled
  PlanEstimate estimate;
};

}  // namespace paraplan
