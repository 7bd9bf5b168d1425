// plan_writer.h: a planned job (search/plan_candidate.h: setting, stages,
// estimate) serialized as a plan file (schema/plan.fbs), whichever solver found it.
//
// Field conventions beyond plan.fbs: Mesh.num_nodes x devices_per_node are the
// job's devices; Zero.num_groups is zero_ngroups under ZeRO-1 to 3 and 1 without;
// Zero.layers_per_unit the setting's under ZeRO-2 and 3 and 1 below;
// StagePrediction.communication_seconds is the stage's communication per step:
// m x (tensor-parallel all-reduces + point-to-point sends) + the gradient
// reduction; under ZeRO-3 gradient_reduction_seconds holds the step's
// parameter all-gathers too (replay measures both on the ZeRO group), and
// StageSchedule.keep_parameters_gathered is each pipeline rank's choice
// (StageLayout); StageMemory.optimizer_state holds the resident state plus the
// optimizer step's transient; Predictions.cluster is the [cluster] spec with the
// job's nodes and devices per node and the peak FLOP/s of the model's dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost/cost_model.h"
#include "planner/cost/plan_estimate.h"
#include "planner/job/job_config.h"
#include "planner/schedule/schedule.h"
#include "planner/search/plan_candidate.h"

namespace paraplan {

inline constexpr const char* kPlannerVersion = "0.2.0";

// The instruction streams of a candidate ([planner] pipeline_scheduler),
// verified; throws std::logic_error if the generator produced a bad schedule.
PipelineSchedule candidate_schedule(const JobConfig& config, const PlanCandidate& candidate);

// The plan's stages from a candidate's per-rank layouts: with v > 1 chunks
// per rank, pipeline_parallel x v virtual stages in model order, the virtual
// stage of chunk c of rank r (the kind's layout, schema/pipeline_layout.h)
// taking chunk c's share of rank r's layers (sizes differ by at most one),
// the embedding on the first and the head on the last.
std::vector<StageLayout> virtual_stage_layouts(
    const std::vector<StageLayout>& ranks, int virtual_stages,
    schema::ScheduleKind kind = schema::ScheduleKind::Interleaved1F1B);

class MeasuredProfile;

// A finished FlatBuffer with the PPLN identifier. profile (may be null) is the
// measured profile the estimate used; Predictions.time_model names it.
std::vector<uint8_t> serialize_plan(const JobConfig& config, const PlanCandidate& candidate,
                                    const MeasuredProfile* profile = nullptr);

// "analytic roofline (...)" or "profile <path> (<device>, measured <date> on
// <description>)" with what part of it this candidate's estimate used.
std::string time_model_description(const JobConfig& config, const PlanCandidate& candidate,
                                   const MeasuredProfile* profile);

}  // namespace paraplan
