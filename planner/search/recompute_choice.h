// recompute_choice.h: the fastest recompute assignment of one stage that fits
// its memory limit.
//
// Each layer may take the recompute modes of an interval [lowest, highest] of
// None < Selective < Full: recompute_modules raises `lowest` where it names a
// layer, a partition-constraints file may narrow either end. Blocks are identical
// in cost, so the choice depends only on how many layers of each interval a stage
// holds. Every step up the order costs time and saves memory (selective drops the
// attention output and logsumexp, full keeps only the block input), so the fastest fitting
// assignment is found by counting upgrades:
//   x = layers moved None -> Selective (taken from [None, Full] layers first,
//       then [None, Selective]),
//   y = layers moved Selective -> Full (from [Selective, Full] layers first, then
//       the [None, Full] layers x moved).
// choose_recompute() searches (x, y) exactly: memory is non-increasing in each,
// time increasing, so for each y the least fitting x is found by bisection and
// the walk over y stops once even the least x is slower than the best so far.
// Under ZeRO-3 a rank also chooses whether to keep its parameters gathered
// (RecomputeCounts::keep_parameters_gathered): more memory, fewer gathers,
// the same saving at any (x, y). Kept where it fits with the recompute that
// freeing them would take, else the faster of the two searches.
#pragma once

#include <vector>

#include "planner/cost/stage_cost.h"

namespace paraplan {

struct RecomputeRange {
  schema::RecomputeMode lowest = schema::RecomputeMode::None;
  schema::RecomputeMode highest = schema::RecomputeMode::Full;
  bool operator==(const RecomputeRange&) const = default;
};

// Layers of a stage counted by their allowed interval: count[lowest][highest].
struct RecomputeClassCounts {
  int count[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  void add(const RecomputeRange& range, int layers = 1);
  int layers() const;
  bool operator==(const RecomputeClassCounts&) const = default;
};

RecomputeClassCounts count_classes(const std::vector<RecomputeRange>& layers, int first, int count);

struct RecomputeChoice {
  bool fits = false;     // false: even the most recompute does not fit (then the
                         // fields describe that most-recompute assignment)
  int to_selective = 0;  // x
  int to_full = 0;       // y
  RecomputeCounts counts;
  double slot_seconds = 0;
  MemoryBreakdown memory;
};

RecomputeChoice choose_recompute(const StageCostModel& model, int pipeline_rank,
                                 const RecomputeClassCounts& classes);

// Every assignment that fits and is not dominated: for each y, the least x that
// fits (more x at the same y only costs time), under ZeRO-3 with the
// parameters freed and kept gathered. Empty when nothing fits. The ILP
// offers these to its solver as the stage's recompute options.
std::vector<RecomputeChoice> fitting_recompute_options(const StageCostModel& model,
                                                       int pipeline_rank,
                                                       const RecomputeClassCounts& classes);

// The per-layer modes of a choice, for the stage's layers in order.
std::vector<schema::RecomputeMode> assign_recompute(const std::vector<RecomputeRange>& layers,
                                                    int to_selective, int to_full);

}  // namespace paraplan
