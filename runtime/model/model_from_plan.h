// model_from_plan.h: the model a rank builds, read from the plan: the model
// config, its stage's part of the model, the recompute mode of each of its
// layers and the storage dtype. Refuses, with the plan file's name, what this
// runtime cannot build, before anything is allocated.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "runtime/model/model_config.h"
#include "runtime/model/parameter_layout.h"
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

// The virtual stages pipeline rank `pipeline_rank` holds, chunk by chunk:
// with schedule.virtual_stages v, chunk c is plan.stages[c * p + pipeline_rank]
// (one chunk, its own stage, when v is 1).
std::vector<StageModelSpec> chunk_models_from_plan(const LoadedPlan& plan, int pipeline_rank);

// The parameters of that rank (tensor rank `tensor_rank` of `tensor_size`):
// its stage's layout, or with several chunks their ChunkedLayout
// (chunked_stage.h), as the rank's buffer holds them. max_positions: the
// context its checkpoints record (TransformerConfig::max_positions).
std::unique_ptr<ParameterLayout> rank_layout_from_plan(const LoadedPlan& plan, int pipeline_rank,
                                                       int tensor_rank, int tensor_size,
                                                       int max_positions = 0);

// For a run in one process: the plan must need exactly one rank.
StageModelSpec single_process_model_from_plan(const LoadedPlan& plan);

}  // namespace paraplan
