// model_from_plan.h: what a rank builds, read from the plan: the model config, its
// stage's part of the model and the recompute mode of each of its layers.
// Checks the plan against the world this process finds (world size, dtype,
// architecture) and refuses with the plan file's name before anything is
// allocated.
#pragma once

#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "runtime/model/gpt/gpt_layout.h"
#include "runtime/model/gpt/gpt_stage.h"
#include "schema/plan_io.h"

namespace paraplan {

struct StageModelSpec {
  GptConfig config;
  kernels::DType dtype = kernels::DType::kFloat32;  // storage of weights, activations, gradients
  StageSpec stage;
  std::vector<RecomputeMode> recompute;
};

// The model of the plan and the part of it pipeline stage `stage_index` holds.
StageModelSpec stage_model_from_plan(const LoadedPlan& plan, int stage_index);

// For a run in one process: the plan must need exactly one rank.
StageModelSpec single_process_model_from_plan(const LoadedPlan& plan);

}  // namespace paraplan
