// model_from_plan.h: the model a rank builds, read from the plan: the model
// config, its stage's part of the model, the recompute mode of each of its
// layers and the storage dtype. Refuses, with the plan file's name, what this
// runtime cannot build, before anything is allocated.
#pragma once

#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "runtime/model/model_config.h"
#include "schema/plan_io.h"

namespace paraplan {

struct StageModelSpec {
  TransformerConfig config;
  kernels::DType dtype = kernels::DType::kFloat32;  // storage of weights, activations, gradients
  StageSpec stage;
  std::vector<RecomputeMode> recompute;
};

// The model of the plan and the part of it pipeline stage `stage_index` holds.
StageModelSpec stage_model_from_plan(const LoadedPlan& plan, int stage_index);

// For a run in one process: the plan must need exactly one rank.
StageModelSpec single_process_model_from_plan(const LoadedPlan& plan);

}  // namespace paraplan
