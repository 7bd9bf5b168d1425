// plan_search.cc: bound-ordered pruning, threads and top-k of the plan search
// (see plan_search.h; the settings it tries: setting_enumeration.h).
#include "planner/search/plan_search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "planner/cost/plan_estimate.h"
#include "planner/cost/profile.h"
#include "planner/schedule/schedule_kinds.h"
#include "planner/search/ilp_solver.h"
#include "planner/search/setting_enumeration.h"
#include "schema/zero_stages.h"

namespace paraplan {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

std::string str(int64_t value) {
  return std::to_string(value);
}

std::string setting_name(const PlanSetting& setting) {
  return mesh_name(setting.shape) + ", micro-batch " + str(setting.micro_batch_size) + " x " +
         str(setting.num_micro_batches) + ", ZeRO " + str(setting.zero_stage) +
         (schedule_kind_row(setting.schedule.kind).runs_every_setting
              ? ""
              : ", " + schedule_choice_name(setting.schedule));
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", seconds);
  return text;
}

// Calls each(i) for every i below count on `threads` threads, indices handed
// out in order; the first exception stops the others and is rethrown here.
template <typename Each>
void for_each_on_threads(int threads, size_t count, Each&& each) {
  std::atomic<size_t> next{0};
  const auto run = [&] {
    for (size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) each(i);
  };
  threads = std::max(1, std::min<int>(threads, static_cast<int>(count)));
  if (threads == 1) return run();
  std::mutex mutex;
  std::exception_ptr failure;
  const auto guarded = [&] {
    try {
      run();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure) failure = std::current_exception();
      next.store(count);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(guarded);
  for (std::thread& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

PartitionProblem make_problem(const JobConfig& config, const SearchSpace& space,
                              const StageCostModel& costs, double prune) {
  PartitionProblem problem;
  problem.costs = &costs;
  problem.layers = &space.layer_recompute;
  problem.boundary_allowed = space.boundaries_restricted ? &space.boundary_allowed : nullptr;
  problem.pinned_layers = space.pinned_layers.empty() ? nullptr : &space.pinned_layers;
  if (costs.num_stages() > 1)
    problem.min_unbalance_ratio = config.planner.max_pipeline_unbalance_ratio;
  problem.prune_at_or_above = prune;
  problem.prune_before_fit = costs.setting_before_bubble().shape.context_parallel > 1;
  return problem;
}

PartitionResult solve_setting(const JobConfig& config, const PartitionProblem& problem) {
  if (config.planner.solver == PlannerSolver::IntegerLinearProgramming)
    return solve_partition_ilp(problem);
  return solve_partition(problem);
}

RejectionKind rejection_kind(PartitionStatus status) {
  switch (status) {
    case PartitionStatus::Unbalanced:
      return RejectionKind::Unbalanced;
    case PartitionStatus::NoValidBoundaries:
      return RejectionKind::NoValidBoundaries;
    case PartitionStatus::Found:  // not a rejection; asked only of the others
    case PartitionStatus::Pruned:
    case PartitionStatus::DoesNotFit:
      return RejectionKind::DoesNotFit;
  }
  return RejectionKind::DoesNotFit;
}

}  // namespace

bool ranks_before(const PlanCandidate& a, const PlanCandidate& b) {
  const auto key = [](const PlanCandidate& c) {
    const PlanSetting& s = c.setting;
    return std::make_tuple(c.estimate.prediction.step_seconds, s.shape.pipeline_stages,
                           s.shape.tensor_parallel, s.shape.context_parallel, s.zero_stage,
                           -s.micro_batch_size, s.zero_ngroups, s.shape.sequence_parallel,
                           static_cast<int>(s.schedule.kind), s.schedule.virtual_stages,
                           s.zero_layers_per_unit);
  };
  return key(a) < key(b);
}

PlanCandidate make_candidate(const JobConfig& config, const PlanSetting& setting,
                             const std::vector<RecomputeRange>& layer_recompute,
                             const StagePartition& partition, const MeasuredProfile* profile) {
  PlanCandidate candidate;
  candidate.setting = setting;
  const int p = setting.shape.pipeline_stages;
  for (int s = 0; s < p; ++s) {
    StageLayout layout;
    layout.first_layer = partition.first_layer[s];
    layout.num_layers = partition.num_layers[s];
    layout.has_embedding = s == 0;
    layout.has_head = s == p - 1;
    const std::vector<RecomputeRange> ranges(
        layer_recompute.begin() + layout.first_layer,
        layer_recompute.begin() + layout.first_layer + layout.num_layers);
    layout.recompute = assign_recompute(ranges, partition.recompute[s].to_selective,
                                        partition.recompute[s].to_full);
    layout.keep_parameters_gathered = partition.recompute[s].counts.keep_parameters_gathered;
    candidate.stages.push_back(std::move(layout));
  }
  candidate.estimate = evaluate_plan(config, setting, candidate.stages, profile);
  return candidate;
}

PlanCandidate with_larger_zero_units(const JobConfig& config, PlanCandidate candidate,
                                     int larger_unit, const MeasuredProfile* profile) {
  if (larger_unit <= candidate.setting.zero_layers_per_unit) return candidate;
  const double limit = config.planner.consider_mem
                           ? plan_memory_limit_gb(config) * 1024.0 * 1024.0 * 1024.0
                           : std::numeric_limits<double>::infinity();
  PlanCandidate larger = candidate;
  larger.setting.zero_layers_per_unit = larger_unit;
  larger.estimate = evaluate_plan(config, larger.setting, larger.stages, profile);
  const bool better =
      static_cast<double>(larger.estimate.peak_memory) <= limit &&
      larger.estimate.prediction.step_seconds < candidate.estimate.prediction.step_seconds;
  return better ? larger : candidate;
}

namespace {

// Why a found partition cannot run ("" when it can): a chunked schedule's
// every rank needs a block per chunk, any pipeline stage one block.
std::string empty_stage_reason(const PlanSetting& setting, const StagePartition& partition) {
  const int chunks = setting.schedule.virtual_stages;
  const std::vector<int>& layers = partition.num_layers;
  for (size_t s = 0; s < layers.size(); ++s) {
    if (layers[s] >= chunks) continue;
    // The embedding or the head alone outweighs what a stage of blocks does.
    return chunks > 1 ? schedule_choice_name(setting.schedule) + " with " + str(chunks) +
                            " chunks per rank needs as many blocks on every rank; the best "
                            "partition gives pipeline stage " +
                            str(static_cast<int>(s)) + " " + str(layers[s])
                      : "every pipeline stage needs a block; the best partition gives pipeline "
                        "stage " +
                            str(static_cast<int>(s)) +
                            " none (the embedding or head alone outweighs a stage of blocks): "
                            "fewer pipeline stages, or more layers";
  }
  return "";
}

// The pending settings solved on options.nproc threads, best bound first:
// each setting is skipped when its lower bound cannot beat the top-k (or its
// kind's best), else its stage partition is solved and the result ranked,
// counted, or rejected. Threads share the ranked list and its k-th step.
class SettingSolver {
 public:
  SettingSolver(const JobConfig& config, const MeasuredProfile* profile, SearchResult& result)
      : config_(config),
        profile_(profile),
        result_(result),
        kind_best_(static_cast<int>(schema::ScheduleKind::MAX) + 1),
        zero_best_(kHighestZeroStage + 1),
        context_classes_(has_both_context_classes(result.space)) {}

  void solve_all(const std::vector<PendingSetting>& pending) {
    for_each_on_threads(config_.planner.nproc, pending.size(),
                        [&](size_t index) { solve(pending[index]); });
  }
  // The bests kept while solving into the result, once every setting is solved.
  void publish() {
    for (auto& best : kind_best_)
      if (best) result_.best_per_schedule.push_back(std::move(*best));
    for (auto& best : zero_best_)
      if (best) result_.best_per_zero_stage.push_back(std::move(*best));
    result_.best_without_context_parallel = std::move(best_without_context_);
  }

  // [planner] verbose's lines, keyed by setting.
  std::vector<std::pair<PlanSetting, std::string>> log;

 private:
  // Whether the space has meshes with context parallelism and without: then
  // the best plan without it is kept (the report's comparison).
  static bool has_both_context_classes(const SearchSpace& space) {
    bool with = false, without = false;
    for (const ParallelShape& shape : space.meshes)
      (shape.context_parallel > 1 ? with : without) = true;
    return with && without;
  }
  // A setting is skipped only when it can beat neither the top-k, nor its
  // schedule kind's best, nor its ZeRO stage's best, nor, without context
  // parallelism, the best plan without it. (The best plan with it is the
  // first in the top-k, where one is: the report names no other.)
  double bound_of(const PlanSetting& setting) const {
    const auto step_of = [](const std::optional<PlanCandidate>& best) {
      return best ? best->estimate.prediction.step_seconds : kInfinity;
    };
    const bool without_context = context_classes_ && setting.shape.context_parallel == 1;
    return std::max({kth_step_, step_of(kind_best_[static_cast<int>(setting.schedule.kind)]),
                     step_of(zero_best_[setting.zero_stage]),
                     without_context ? step_of(best_without_context_) : 0.0});
  }

  void solve(const PendingSetting& item) {
    const PlannerOptions& options = config_.planner;
    double bound;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bound = bound_of(item.setting);
      if (item.lower_bound >= bound) {
        ++result_.statistics.skipped_by_bound;
        if (options.verbose)
          log.push_back({item.setting, "skipped: step lower bound " +
                                           seconds_text(item.lower_bound) +
                                           " s cannot beat the top-" + str(options.topk) +
                                           " bound " + seconds_text(bound) + " s"});
        return;
      }
    }
    const StageCostModel costs(config_, item.setting, profile_);
    Solved solved = solve_with(costs, bound);
    // ZeRO-2 and 3: the plan with the larger unit its cost model prefers.
    if (solved.status == PartitionStatus::Found)
      solved.candidate = with_larger_zero_units(config_, std::move(solved.candidate),
                                                zero_unit_to_try(config_, costs), profile_);
    std::lock_guard<std::mutex> lock(mutex_);
    ++result_.statistics.solved;
    result_.statistics.slots_evaluated += solved.slots_evaluated;
    if (options.verbose)
      log.push_back(
          {item.setting, verbose_line(solved.status, solved.candidate, solved.reason, bound)});
    if (solved.status == PartitionStatus::Found) {
      rank(std::move(solved.candidate));
    } else if (solved.status == PartitionStatus::Pruned) {
      ++result_.statistics.pruned_in_search;
    } else {
      add_rejection(result_, item.setting, rejection_kind(solved.status), solved.reason);
    }
  }

  // One setting's partition solved, and the plan it makes.
  struct Solved {
    PartitionStatus status = PartitionStatus::DoesNotFit;
    std::string reason;
    PlanCandidate candidate;
    long long slots_evaluated = 0;
  };
  Solved solve_with(const StageCostModel& costs, double bound) const {
    Solved solved;
    const PlanSetting setting = costs.setting_before_bubble();
    const PartitionResult partition =
        solve_setting(config_, make_problem(config_, result_.space, costs, bound));
    solved.status = partition.status;
    solved.reason = partition.reason;
    solved.slots_evaluated = partition.slots_evaluated;
    if (solved.status == PartitionStatus::Found) {
      solved.reason = empty_stage_reason(setting, partition.partition);
      if (!solved.reason.empty()) solved.status = PartitionStatus::NoValidBoundaries;
    }
    if (solved.status == PartitionStatus::Found)
      solved.candidate = make_candidate(config_, setting, result_.space.layer_recompute,
                                        partition.partition, profile_);
    return solved;
  }

  std::string verbose_line(PartitionStatus status, const PlanCandidate& candidate,
                           const std::string& reason, double bound) const {
    // Appended piece by piece: GCC 12's -Wrestrict misreads "literal" + string&&.
    std::string line;
    if (status == PartitionStatus::Found) {
      line.append("best partition: step ")
          .append(seconds_text(candidate.estimate.prediction.step_seconds))
          .append(" s, blocks per stage");
      for (const StageLayout& stage : candidate.stages)
        line.append(" ").append(str(stage.num_layers));
      return line;
    }
    if (status == PartitionStatus::Pruned)
      return line.append("stopped: no partition beats the top-")
          .append(str(config_.planner.topk))
          .append(" bound ")
          .append(seconds_text(bound))
          .append(" s");
    return line.append("rejected: ").append(reason);
  }

  // Under mutex_: the candidate into its kind's, its ZeRO stage's and its
  // best without context parallelism and the top-k.
  void rank(PlanCandidate candidate) {
    for (auto* best : {&kind_best_[static_cast<int>(candidate.setting.schedule.kind)],
                       &zero_best_[candidate.setting.zero_stage]})
      if (!*best || ranks_before(candidate, **best)) *best = candidate;
    if (context_classes_ && candidate.setting.shape.context_parallel == 1 &&
        (!best_without_context_ || ranks_before(candidate, *best_without_context_)))
      best_without_context_ = candidate;
    auto& ranked = result_.ranked;
    ranked.insert(std::upper_bound(ranked.begin(), ranked.end(), candidate, ranks_before),
                  std::move(candidate));
    const size_t topk = static_cast<size_t>(config_.planner.topk);
    if (ranked.size() > topk) ranked.pop_back();
    if (ranked.size() == topk) kth_step_ = ranked.back().estimate.prediction.step_seconds;
  }

  const JobConfig& config_;
  const MeasuredProfile* profile_;
  SearchResult& result_;
  std::mutex mutex_;
  double kth_step_ = kInfinity;
  std::vector<std::optional<PlanCandidate>> kind_best_;
  std::vector<std::optional<PlanCandidate>> zero_best_;  // per ZeRO stage
  const bool context_classes_;
  std::optional<PlanCandidate> best_without_context_;
};

}  // namespace

SearchResult search_plans_unchecked(const JobConfig& config, const MeasuredProfile* profile) {
  const auto start = std::chrono::steady_clock::now();
  SearchResult result;
  result.space = resolve_search_space(config);
  const PlannerOptions& options = config.planner;
  std::vector<PendingSetting> dominated;
  std::vector<PendingSetting> pending =
      enumerate_settings(config, result.space, profile, result, &dominated);

  // Each bound builds the setting's cost model, which plays out its schedule
  // the first time a shape is seen: on every thread. Context parallelism's
  // settings bring many shapes of their own (more micro-batches), most of
  // them skipped: their bound takes the bubble's lower bound where it would
  // be played out (bubble_slots_lower_bound).
  const auto set_lower_bounds = [&](std::vector<PendingSetting>& settings) {
    for_each_on_threads(options.nproc, settings.size(), [&](size_t i) {
      const PlanSetting& setting = settings[i].setting;
      settings[i].lower_bound = partition_step_lower_bound(
          StageCostModel(config, setting, profile,
                         setting.shape.context_parallel > 1 ? BubbleEstimate::kLowerBound
                                                            : BubbleEstimate::kPlayedOut));
    });
  };
  set_lower_bounds(pending);
  // Settings without context parallelism first: where they win (short
  // sequences) the top-k bound they set skips most of the others, whose
  // bounds count no bubble.
  std::stable_sort(pending.begin(), pending.end(),
                   [](const PendingSetting& a, const PendingSetting& b) {
                     const bool a_ring = a.setting.shape.context_parallel > 1,
                                b_ring = b.setting.shape.context_parallel > 1;
                     if (a_ring != b_ring) return b_ring;
                     return a.lower_bound < b.lower_bound;
                   });

  // [planner] verbose: lines keyed by setting so the order does not depend on threads.
  SettingSolver solver(config, profile, result);
  if (options.verbose)
    for (const SettingRejection& rejection : result.rejections)
      solver.log.push_back({rejection.setting, "rejected: " + rejection.reason});
  solver.solve_all(pending);
  // A setting left out as dominated by a shorter ring's is tried where
  // max_pipeline_unbalance_ratio refused that one: the ring's time per block
  // may pass the ratio where the shorter mesh fails it.
  std::vector<PendingSetting> after_all = dominated_to_try(config, result.space, dominated, result);
  set_lower_bounds(after_all);
  solver.solve_all(after_all);
  solver.publish();

  // Rejections in a fixed order whatever the thread timing.
  std::stable_sort(result.rejections.begin(), result.rejections.end(),
                   [](const SettingRejection& a, const SettingRejection& b) {
                     const auto key = [](const SettingRejection& r) {
                       const PlanSetting& s = r.setting;
                       return std::make_tuple(static_cast<int>(r.kind), s.shape.pipeline_stages,
                                              s.shape.tensor_parallel, s.micro_batch_size,
                                              s.zero_stage, s.shape.sequence_parallel,
                                              s.shape.context_parallel);
                     };
                     return key(a) < key(b);
                   });
  if (options.verbose) {
    std::stable_sort(solver.log.begin(), solver.log.end(), [](const auto& a, const auto& b) {
      return setting_key(a.first) < setting_key(b.first);
    });
    for (const auto& [setting, line] : solver.log)
      result.log.push_back(setting_name(setting) + ": " + line);
  }
  result.statistics.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::string explain_no_plan(const JobConfig& config, const SearchResult& result,
                            const MeasuredProfile* profile) {
  (void)profile;
  std::string message = config.source + ": no feasible plan for " +
                        str(result.space.layout.world_size()) + " devices (" +
                        str(result.space.layout.num_nodes) + " node" +
                        (result.space.layout.num_nodes == 1 ? "" : "s") + " x " +
                        str(result.space.layout.devices_per_node) + ").";
  // The most memory-friendly rejected setting explains the binding constraint:
  // smallest micro-batch, then most model parallelism, then ZeRO.
  const SettingRejection* closest = nullptr;
  int counts[7] = {};  // per RejectionKind
  for (const SettingRejection& rejection : result.rejections) {
    ++counts[static_cast<int>(rejection.kind)];
    if (rejection.kind != RejectionKind::DoesNotFit) continue;
    const auto key = [](const SettingRejection& r) {
      const PlanSetting& s = r.setting;
      return std::make_tuple(s.micro_batch_size, -s.shape.pipeline_stages * s.shape.tensor_parallel,
                             -s.zero_stage, -s.shape.pipeline_stages, -s.shape.context_parallel);
    };
    if (closest == nullptr || key(rejection) < key(*closest)) closest = &rejection;
  }
  if (closest != nullptr)
    message += " Memory binds: with " + setting_name(closest->setting) + ", " + closest->reason +
               (memory_constraint_binds(config)
                    ? ". Raise memory_constraint, add recompute, use more devices or a smaller "
                      "micro-batch."
                    : ". The device's memory binds, so raising memory_constraint cannot help: "
                      "add recompute or ZeRO-1, use more devices, a smaller micro-batch or a "
                      "device with more memory.");
  for (const SettingRejection& rejection : result.rejections) {
    if (rejection.kind == RejectionKind::DoesNotFit) continue;
    if (counts[static_cast<int>(rejection.kind)] < 0) continue;  // named already
    message.append(" ")
        .append(str(counts[static_cast<int>(rejection.kind)]))
        .append(" setting(s) like ")
        .append(setting_name(rejection.setting))
        .append(": ")
        .append(rejection.reason)
        .append(".");
    counts[static_cast<int>(rejection.kind)] = -1;
  }
  return message;
}

SearchResult search_plans(const JobConfig& config, const MeasuredProfile* profile) {
  SearchResult result = search_plans_unchecked(config, profile);
  if (result.ranked.empty()) throw std::runtime_error(explain_no_plan(config, result, profile));
  return result;
}

}  // namespace paraplan
