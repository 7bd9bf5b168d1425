// stage_partition.h: the stage-partition dynamic program for one plan setting
// (mesh, micro-batch size, ZeRO): which contiguous blocks each pipeline stage
// holds and how each stage recomputes, minimising the predicted step time
//   step = (m + p - 1) x max_s slot_s + max_s tail_s
// subject to each stage's own memory limit (stage_cost.h).
//
// Method. Per stage, the fastest fitting recompute is chosen independently
// (recompute_choice.h): memory is per stage and the step time grows with every
// slot, so no stage gains from another recomputing more. A stage's slot and tail
// then depend on its position and layer range only, and grow with the range. For
// a bound tau on the slowest slot, the least slowest tail G(tau) is a min-max
// problem over partitions whose stages all have slot <= tau (and >= ratio x tau
// under max_pipeline_unbalance_ratio); step(tau) = (m + p - 1) tau + G(tau). The
// optimum is at a tau equal to some stage's slot, so candidate taus are visited in
// increasing order from the smallest feasible one, and the walk stops as soon as
// (m + p - 1) tau + (the least tail of any partition) cannot beat the best step.
//  - Uniform path (every block has the same recompute interval, no pivots, no
//    pins): a stage's cost depends on its layer count only; feasibility of tau is
//    "sum of per-stage maxima >= L", so the least feasible tau is the K-th
//    smallest of the stages' merged slot sequences, and G(tau) is a K'-th smallest
//    of their tail sequences: O(L log p) per tau, slots computed lazily. First,
//    the stages' model states alone (what no recompute changes) must leave
//    room for the L blocks, checked without the micro-batches in flight.
//  - General path (forced recompute on some blocks, pivots, pins): the same walk
//    with an O(p L^2) dynamic program over (stage, boundary) per tau.
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "planner/cost/stage_cost.h"
#include "planner/search/recompute_choice.h"

namespace paraplan {

struct PartitionProblem {
  const StageCostModel* costs = nullptr;
  const std::vector<RecomputeRange>* layers = nullptr;  // one per block
  // Positions 0..L where a stage may begin (the one after stage 0 included);
  // null = all.
  const std::vector<char>* boundary_allowed = nullptr;
  // (block, stage) pins; stage -1 = the last. Null = none.
  const std::vector<std::pair<int, int>>* pinned_layers = nullptr;
  double min_unbalance_ratio = 0;  // fastest slot >= ratio x slowest slot
  // Stop without a result when no step below this exists (top-k pruning).
  double prune_at_or_above = std::numeric_limits<double>::infinity();
  // May stop so (Pruned) before finding whether any partition fits memory,
  // as soon as the least slowest slot found so far cannot win: for settings
  // whose rejection nothing explains (the search sets it for context
  // parallelism's, whose report names only the plans without it that fail).
  bool prune_before_fit = false;
  bool force_general_path = false;  // tests compare both paths
};

struct StagePartition {
  std::vector<int> first_layer;  // per stage
  std::vector<int> num_layers;
  std::vector<RecomputeChoice> recompute;
  double step_seconds = 0;
};

enum class PartitionStatus { Found, Pruned, DoesNotFit, Unbalanced, NoValidBoundaries };

struct PartitionResult {
  PartitionStatus status = PartitionStatus::DoesNotFit;
  StagePartition partition;       // when Found
  std::string reason;             // when not Found: the binding constraint, with numbers
  long long slots_evaluated = 0;  // recompute choices computed (for benchmarks)
};

PartitionResult solve_partition(const PartitionProblem& problem);

// The lower bound on any partition's step for this setting used to skip whole
// settings: every block's fastest slot spread evenly over the stages plus the
// head and embedding, and no tail. Cheap (no memory model).
double partition_step_lower_bound(const StageCostModel& costs);

}  // namespace paraplan
