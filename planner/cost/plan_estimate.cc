// plan_estimate.cc: a plan's step and summary from its stages
// (plan_estimate.h).
#include "planner/cost/plan_estimate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "planner/schedule/pipeline_simulation.h"
#include "schema/pipeline_layout.h"
#include "schema/schedule_kinds.h"

namespace paraplan {

bool ranks_share_cores(const JobConfig& config, const PlanSetting& setting) {
  const double cores = config.cluster.cores_per_node;
  return cores > 0 && setting.layout.num_nodes == 1 && setting.layout.devices_per_node > cores &&
         config.planner.is_train;
}

bool ranks_have_own_cores(const JobConfig& config, const PlanSetting& setting) {
  const double cores = config.cluster.cores_per_node;
  return cores <= 0 || setting.layout.devices_per_node <= std::lround(cores);
}

double busy_wall_factor(const JobConfig& config, const PlanSetting& setting) {
  if (!ranks_share_cores(config, setting)) return 1;
  return setting.layout.devices_per_node / config.cluster.cores_per_node;
}

namespace {

// The step played out with the node's cores shared (pipeline_simulation.h):
// each stage's times become what its ranks take while the others compute or
// wait. The per-stage times are with every rank of the node busy at once,
// i.e. at cores / ranks of a dedicated core's speed; the simulation takes a
// dedicated core's work. On the CPU backend the collectives and transfers are
// the ranks' own copies and reductions: work too.
void simulate_schedule(const JobConfig& config, const PlanSetting& setting, PlanEstimate& plan) {
  const int p = setting.shape.pipeline_stages;
  const double cores = config.cluster.cores_per_node;
  const double share = cores / setting.layout.devices_per_node;
  std::vector<SimulatedStageInput> inputs;
  for (int s = 0; s < p; ++s) {
    const StageEstimate& stage = plan.stages[s];
    // The sends pipeline_p2p_seconds counts: one per neighbour, interleaved's 2 (v - 1) more.
    const int sends = (s + 1 < p ? 1 : 0) + (s > 0 ? 1 : 0) +
                      (schedule_kind_traits(setting.schedule.kind).chunked()
                           ? 2 * (setting.schedule.virtual_stages - 1)
                           : 0);
    // (ZeRO-3's gathers of a rank freeing its parameters: collective work of
    // the passes that read them, as the tensor-parallel calls are.)
    const double collectives = (stage.tensor_parallel_seconds + stage.context_parallel_seconds +
                                stage.parameter_gather_seconds) *
                               share / 2;
    inputs.push_back({.forward_work = stage.forward_seconds * share,
                      .backward_work = stage.backward_seconds * share,
                      .forward_collectives = collectives,
                      .backward_collectives = collectives,
                      // Wall time: not the cores' work.
                      .forward_group_waits = stage.tensor_parallel_wait_seconds / 2,
                      .backward_group_waits = stage.tensor_parallel_wait_seconds / 2,
                      .p2p_seconds = sends > 0 ? stage.pipeline_p2p_seconds * share / sends : 0,
                      .reduction_work = stage.gradient_reduction_seconds * share,
                      .optimizer_work = stage.optimizer_seconds * share});
  }
  for (SimulatedStageInput& input : inputs)
    input.weight_fraction = setting.schedule.weight_of_backward;
  const SimulatedStep step =
      simulate_step(*shared_schedule(setting.schedule.kind, p, setting.num_micro_batches,
                                     setting.schedule.virtual_stages),
                    inputs, setting.shape.stage_ranks(), cores);
  // Compute as a dedicated core does it (replay counts a rank's compute by
  // the CPU time it got); the rest of the step is waiting.
  for (int s = 0; s < p; ++s) {
    StageEstimate& stage = plan.stages[s];
    stage.forward_seconds = inputs[s].forward_work;
    stage.backward_seconds = inputs[s].backward_work;
    stage.tensor_parallel_seconds *= share;
    stage.context_parallel_seconds *= share;
    stage.parameter_gather_seconds *= share;
    stage.pipeline_p2p_seconds = step.stages[s].transfer_seconds / setting.num_micro_batches;
    stage.gradient_reduction_seconds *= share;
    stage.optimizer_seconds = inputs[s].optimizer_work;
    stage.bubble_seconds = step.stages[s].waiting_seconds;
  }
  plan.prediction.step_seconds = step.step_seconds;
}

}  // namespace

PlanEstimate combine_stage_estimates(const JobConfig& config, const PlanSetting& setting,
                                     std::vector<StageEstimate> stages) {
  PlanEstimate plan;
  plan.stages = std::move(stages);
  double fastest_slot = std::numeric_limits<double>::infinity();
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const StageEstimate& stage = plan.stages[s];
    plan.slot_seconds = std::max(plan.slot_seconds, stage.slot_seconds());
    fastest_slot = std::min(fastest_slot, stage.slot_seconds());
    plan.tail_seconds = std::max(plan.tail_seconds, stage.tail_seconds());
    if (stage.memory.total() > plan.peak_memory) {
      plan.peak_memory = stage.memory.total();
      plan.peak_memory_stage = static_cast<int>(s);
    }
  }
  plan.unbalance_ratio = plan.slot_seconds > 0 ? fastest_slot / plan.slot_seconds : 1;
  const int m = setting.num_micro_batches, p = setting.shape.pipeline_stages;
  plan.pipeline_seconds = (m + bubble_slots(setting)) * plan.slot_seconds;
  StepPrediction& prediction = plan.prediction;
  prediction.step_seconds = step_seconds(setting, plan.slot_seconds, plan.tail_seconds);
  for (StageEstimate& stage : plan.stages)
    stage.bubble_seconds =
        std::max(0.0, prediction.step_seconds - m * stage.slot_seconds() - stage.tail_seconds()) +
        m * stage.tensor_parallel_wait_seconds;
  if (ranks_share_cores(config, setting)) simulate_schedule(config, setting, plan);
  prediction.bubble_ratio = pipeline_bubble_ratio(setting);
  const int global = config.training.global_batch_size;
  const int devices = p * setting.shape.stage_ranks();
  if (prediction.step_seconds > 0) {
    prediction.tokens_per_second =
        static_cast<double>(global) * config.model.seq_len / prediction.step_seconds;
    double flops = model_flops_per_step(config.model, global);
    if (!config.planner.is_train) flops /= 3;  // forward only
    prediction.mfu =
        flops / (prediction.step_seconds * config.cluster.peak_flops(config.model.dtype) * devices);
  }
  return plan;
}

PlanEstimate evaluate_plan(const JobConfig& config, const PlanSetting& setting,
                           const std::vector<StageLayout>& stages, const MeasuredProfile* profile) {
  const StageCostModel model(config, setting, profile);
  std::vector<StageEstimate> estimates;
  for (size_t s = 0; s < stages.size(); ++s)
    estimates.push_back(model.estimate(static_cast<int>(s), count_recompute(stages[s])));
  // The model's setting carries the schedule's time figures it derived.
  return combine_stage_estimates(config, model.setting(), std::move(estimates));
}

}  // namespace paraplan
