// replan.h: a saved plan's job planned again for another number of nodes of
// the same devices, from the options the plan recorded (its header's
// creation_options): what `paraplan launch --max-restarts` runs on the hosts
// left after losing one, and what `paraplan plan --what-if-lost-nodes` shows.
//
// Kept from the plan: the model, the training options (global batch, seed,
// optimizer, learning-rate schedule, steps), the data and its order (the
// plan's absolute paths, shuffle and seed), the cluster's figures (memory,
// bandwidths) and every planner option but those that fix the mesh. Given
// by the caller: the nodes and the devices on each (the hosts left and their
// slots), whatever made the original mesh (mesh_row x mesh_col, [cluster],
// a preset, world_size alone). Searched again: the pipeline, data and tensor
// degrees (the recorded ones were chosen for the old device count), and with
// them stages, micro-batching, recomputation and ZeRO; the context-parallel
// degree too unless the job fixed it (context_parallel_degree, kept: it is
// the job's sequence split, not the device count's).
#pragma once

#include <string>
#include <vector>

#include "planner/job/job_config.h"
#include "planner/planner.h"

namespace paraplan {
namespace schema {
struct Plan;
}

// The job of `plan` (read from plan_path, named in messages) on num_nodes
// nodes of devices_per_node devices each (0: the plan's own devices per
// node). Throws naming the plan when it recorded no options (plans written
// before creation_options existed) or the options no longer parse.
JobConfig job_for_nodes(const schema::Plan& plan, const std::string& plan_path, int num_nodes,
                        int devices_per_node = 0);

// plan_job(job_for_nodes(...)): throws the planner's own message when no
// plan fits the devices left.
PlanOutcome replan_for_nodes(const schema::Plan& plan, const std::string& plan_path, int num_nodes,
                             int devices_per_node = 0);

// What a plan decided, for a restart's or a what-if's line.
struct PlanDecisions {
  int pipeline = 1, data = 1, tensor = 1;
  int num_nodes = 1, devices_per_node = 1;
  int micro_batch_size = 1, num_micro_batches = 1;
  int zero_stage = 0;
  double step_seconds = 0;  // predicted
  int context = 1;          // context parallelism
};
PlanDecisions decisions_of(const schema::Plan& plan);

// The plan for the most nodes, from nodes_left down to min_nodes, that the
// job fits: a lost node can leave a device count no mesh divides (1016 GPUs
// for a global batch of 1536), where one node fewer fits.
struct FallbackPlan {
  PlanOutcome outcome;  // empty with FallbackDepth::kDecisionsOnly
  PlanDecisions decisions;
  int num_nodes = 0;
  int most_nodes_that_fit = 0;           // > num_nodes when fewer nodes plan a faster step
  std::vector<std::string> passed_over;  // "127 nodes: no mesh fits ..." per count tried
};
// kWholePlan writes and checks each plan tried (a restart runs it);
// kDecisionsOnly only searches (a what-if prints it): about half the time
// for a 1T GPT, whose plans hold 200k instructions.
enum class FallbackDepth { kWholePlan, kDecisionsOnly };
// Each node has devices_per_node devices (0: the plan's own). Throws naming
// nodes_left's reason when no count from nodes_left to min_nodes fits.
FallbackPlan plan_for_nodes_left(const schema::Plan& plan, const std::string& plan_path,
                                 int nodes_left, int devices_per_node = 0, int min_nodes = 1,
                                 FallbackDepth depth = FallbackDepth::kWholePlan);

// "pp 2 x dp 1 x tp 2 on 2 nodes x 2 devices, micro-batch 3 x 4, ZeRO-1,
// predicted step 1.25 s" (" x cp 2" before tp with context parallelism): the
// decisions a restart or a what-if names.
std::string plan_summary(const PlanDecisions& decisions);
inline std::string plan_summary(const schema::Plan& plan) {
  return plan_summary(decisions_of(plan));
}

// `paraplan plan --what-if-lost-nodes N`: the plan this job would fall back to
// on N fewer nodes, and its predicted slowdown; or why there is none.
std::string what_if_lost_nodes(const schema::Plan& plan, const std::string& plan_path, int lost);

}  // namespace paraplan
