// plan_estimate.h: a whole plan's prediction from its stages' estimates
// (stage_cost.h): the step, each stage's bubble (the time it waits for the
// others), the summary figures; and, where the node's ranks outnumber its
// cores, the step played out with the cores shared (pipeline_simulation.h).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/cost/stage_cost.h"

namespace paraplan {

struct PlanEstimate {
  std::vector<StageEstimate> stages;
  double slot_seconds = 0;      // slowest stage's slot
  double pipeline_seconds = 0;  // (m + p - 1) x slot
  double tail_seconds = 0;      // slowest stage's tail
  StepPrediction prediction;
  uint64_t peak_memory = 0;
  int peak_memory_stage = 0;
  double unbalance_ratio = 1;  // fastest slot / slowest slot
};

// Whether the setting's ranks share the node's cores ([cluster]
// cores_per_node, the cpu preset's profile): more ranks on the node than
// cores. Then combine_stage_estimates takes the step, and each stage's
// compute, optimizer and bubble times, from playing the schedule out with the
// cores shared (pipeline_simulation.h) instead of the closed form.
bool ranks_share_cores(const JobConfig& config, const PlanSetting& setting);

// Whether each of the node's ranks has a core of its own: no cores_per_node
// (devices), or at most as many ranks as the node's cores rounded (a
// measured 1.99 cores are 2 that other processes use a little of).
bool ranks_have_own_cores(const JobConfig& config, const PlanSetting& setting);

// What one second of a dedicated core's work takes with every rank of the
// node busy: ranks / cores where ranks_share_cores, else 1. A profile's
// CPU-clock times (profile_format.h) are scaled by it, so that every stage
// time is in the units the closed form and the simulation take.
double busy_wall_factor(const JobConfig& config, const PlanSetting& setting);

// Step time and the summary figures from per-stage estimates.
PlanEstimate combine_stage_estimates(const JobConfig& config, const PlanSetting& setting,
                                     std::vector<StageEstimate> stages);

// Every stage of a fully specified plan (layouts with per-layer recompute),
// estimated and combined: the model's prediction for that plan.
PlanEstimate evaluate_plan(const JobConfig& config, const PlanSetting& setting,
                           const std::vector<StageLayout>& stages,
                           const MeasuredProfile* profile = nullptr);

}  // namespace paraplan
