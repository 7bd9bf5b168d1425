// single_rank_planner.h: the complete v1 plan for a world of one device: one
// pipeline stage holding the embedding, every block and the head (mesh 1x1x1).
//
// Decisions:
// - Recompute per block from [planner] recompute_modules (see
//   recompute_modes_from_modules for the module names).
// - Micro-batching: a micro_batch_size given in [training] or [planner] fixes it; an
//   explicit [planner] update_freq fixes the micro-batch count; global_batch_size
//   must equal micro_batch_size x count. Otherwise the planner takes the largest
//   divisor of global_batch_size whose memory fits (one micro-batch per step when
//   it fits).
// - Memory must fit [planner] memory_constraint GB (2^30 bytes) when consider_mem.
// - ZeRO stage and groups are recorded as configured; on one rank they shard nothing.
// - The schedule is [planner] pipeline_scheduler's (1f1b or gpipe) for one stage.
// - Predictions come from cost_model.h (analytic time at kComputeEfficiency of the
//   cluster's peak for the model dtype).
// World size, mesh or fixed degrees above 1 and is_train = false are rejected:
// multi-rank planning arrives with the search.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/job_config.h"
#include "planner/schedule.h"

namespace paraplan {

inline constexpr const char* kPlannerVersion = "0.1.0";

// Module names (Hugging Face GPT-2 naming) and what recomputing them means:
//   ROOT, transformer, transformer.h        -> every block: full recompute
//   transformer.h.<i>                       -> block i: full recompute
//   transformer.h.<i>.attn.core_attention   -> block i: selective (attention core)
// recompute_modules is a comma-separated list; each entry matches a module when it
// equals the module's name or a dotted suffix of it ("h.3", "core_attention"), as
// in AutoDist. Full wins over selective. An entry matching no module is an error
// (source names the file).
std::vector<schema::RecomputeMode> recompute_modes_from_modules(
    const std::string& recompute_modules, int num_layers, const std::string& source);

// Every decision and prediction of a single-rank plan, before serialization.
struct SingleRankPlan {
  StageLayout stage;
  int micro_batch_size = 1;
  int num_micro_batches = 1;
  PipelineSchedule schedule;
  MemoryBreakdown memory;
  StageTime time;
  StepPrediction prediction;
};

// Makes the decisions; throws std::runtime_error naming the file and field when
// the job cannot be planned on one device.
SingleRankPlan plan_single_rank(const JobConfig& config);

// Serializes a plan made by plan_single_rank as a finished FlatBuffer (with the
// PPLN identifier).
std::vector<uint8_t> serialize_single_rank_plan(const JobConfig& config,
                                                const SingleRankPlan& plan);

// plan_single_rank then serialize_single_rank_plan.
std::vector<uint8_t> build_single_rank_plan(const JobConfig& config);

}  // namespace paraplan
