// plan_search.h: the plan search over meshes x micro-batch sizes x ZeRO x stage
// partitions, keeping the top-k plans under the cost model.
//
// For every setting (mesh from search_space.h, micro-batch size, ZeRO stage and
// groups) the partition search (stage_partition.h, or the ILP when solver =
// 'ilp') finds its best partition and recompute. Settings are visited in order of
// a cheap lower bound on their step time and skipped once that bound cannot beat
// the k-th best plan so far, so the result is the exact top-k of the per-setting
// optima. Filters: max_pipeline_bubble_ratio (when the pipeline degree is searched,
// 'auto'), max_pipeline_unbalance_ratio (any pipeline). nproc threads share the
// settings and the bound; the result does not depend on nproc.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/search/plan_candidate.h"
#include "planner/search/search_space.h"
#include "planner/search/stage_partition.h"

namespace paraplan {

class MeasuredProfile;

enum class RejectionKind {
  DoesNotFit,         // no partition fits the memory limit
  Unbalanced,         // max_pipeline_unbalance_ratio
  Bubble,             // max_pipeline_bubble_ratio
  NoValidBoundaries,  // pivots / pins leave no partition
  ZeroGroups,         // zero_ngroups does not divide dp
  MicroBatch,         // the fixed micro-batching does not divide the batch
  Schedule,           // the fixed pipeline_scheduler cannot run the setting
};

struct SettingRejection {
  PlanSetting setting;
  RejectionKind kind = RejectionKind::DoesNotFit;
  std::string reason;  // filled for the rejections the report names
};

struct SearchStatistics {
  long long settings = 0;          // (mesh, micro-batch, ZeRO) combinations
  long long skipped_by_bound = 0;  // whose lower bound could not beat the top-k
  long long solved = 0;            // partition searches run (found, rejected or pruned)
  long long pruned_in_search = 0;  // of those, stopped early by the top-k bound
  long long slots_evaluated = 0;   // stage recompute choices computed
  double seconds = 0;
};

struct SearchResult {
  SearchSpace space;
  std::vector<PlanCandidate> ranked;  // best first, at most topk
  // The best plan of each schedule kind searched (any virtual stages), in
  // ScheduleKind order: the report's comparison of the kinds. The search
  // skips a setting only when it can beat neither the top-k nor its kind's best.
  std::vector<PlanCandidate> best_per_schedule;
  // The best plan of each ZeRO stage searched, in stage order (the report's
  // comparison of the stages); skipped likewise only when a setting can beat
  // neither the top-k nor its stage's best.
  std::vector<PlanCandidate> best_per_zero_stage;
  // Where the space has meshes with context parallelism (cp > 1) and
  // without: the best plan without it (the report's comparison), kept
  // alike. (The best with it is the first such plan in ranked, if any is.)
  std::optional<PlanCandidate> best_without_context_parallel;
  // Every setting enumerated (statistics.settings of them), in enumeration order.
  std::vector<PlanSetting> settings;
  std::vector<SettingRejection> rejections;
  SearchStatistics statistics;
  // [planner] verbose: one line per setting, what the search decided and why,
  // in setting order.
  std::vector<std::string> log;
};

// Runs the search. Throws std::runtime_error when no plan is feasible, naming the
// binding constraint with numbers (see explain_no_plan).
SearchResult search_plans(const JobConfig& config, const MeasuredProfile* profile = nullptr);

// The same without throwing: ranked may be empty.
SearchResult search_plans_unchecked(const JobConfig& config,
                                    const MeasuredProfile* profile = nullptr);

// The message search_plans throws when result.ranked is empty.
std::string explain_no_plan(const JobConfig& config, const SearchResult& result,
                            const MeasuredProfile* profile = nullptr);

// A partition turned into a full candidate (layouts with per-layer recompute,
// the model's estimate).
PlanCandidate make_candidate(const JobConfig& config, const PlanSetting& setting,
                             const std::vector<RecomputeRange>& layer_recompute,
                             const StagePartition& partition, const MeasuredProfile* profile);

// ZeRO-2 and 3's units: `candidate`, a setting's best plan with its own
// units, re-costed with `larger_unit` layers per unit (zero_unit_to_try: the
// larger unit its cost model prefers, where [planner] zero_layers_per_unit
// is unset; 1: none); that plan where it fits memory (consider_mem) and is
// faster, else `candidate`. One estimate, no partition solve: the stages
// and recomputation stay the ones found for the setting's own units.
PlanCandidate with_larger_zero_units(const JobConfig& config, PlanCandidate candidate,
                                     int larger_unit, const MeasuredProfile* profile);

// Orders candidates: faster first, then fewer stages, less TP, less context
// parallelism, the lower ZeRO stage, larger micro-batches, no sequence parallelism.
bool ranks_before(const PlanCandidate& a, const PlanCandidate& b);

}  // namespace paraplan
