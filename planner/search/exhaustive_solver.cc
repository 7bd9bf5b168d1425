// exhaustive_solver.cc: brute force over meshes, micro-batches, ZeRO, splits and
// per-block recompute (see exhaustive_solver.h).
#include "planner/search/exhaustive_solver.h"

#include <functional>
#include <limits>
#include <map>
#include <optional>

#include "planner/cost/context_parallel_cost.h"
#include "planner/cost/model_counts.h"
#include "planner/cost/plan_estimate.h"
#include "planner/search/plan_search.h"
#include "planner/search/search_space.h"
#include "schema/zero_stages.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

// Meshes, enumerated here on their own: (pp, dp, cp, tp) multiplying to the world.
std::vector<ParallelShape> all_meshes(const JobConfig& config, const DeviceLayout& layout) {
  const ModelConfig& m = config.model;
  const PlannerOptions& p = config.planner;
  std::vector<ParallelShape> meshes;
  const int world = layout.world_size();
  for (int pp = 1; pp <= world; ++pp)
    for (int dp = 1; dp <= world; ++dp)
      for (int cp = 1; cp <= world; ++cp)
        for (int tp = 1; tp <= world; ++tp) {
          if (pp * dp * cp * tp != world) continue;
          if (p.pipeline_nstages > 0 && pp != p.pipeline_nstages) continue;
          if (p.data_parallel_degree > 0 && dp != p.data_parallel_degree) continue;
          if (p.context_parallel_degree > 0 && cp != p.context_parallel_degree) continue;
          if (p.tensor_parallel_degree > 0 && tp != p.tensor_parallel_degree) continue;
          if (layout.devices_per_node % tp || m.num_heads % tp || kv_heads(m) % tp ||
              m.d_model % tp || m.ffn_size % tp || m.vocab_size % tp)
            continue;
          if (pp > m.num_layers + 2 || config.training.global_batch_size % dp) continue;
          // (Context parallelism: 2 cp dividing seq_len, in chunks of an
          // attention tile or more unless fixed.)
          if (cp > 1 && m.seq_len % (2 * cp)) continue;
          if (p.context_parallel_degree == 0 && !context_parallel_searchable(m, cp)) continue;
          // Sequence parallelism: with tp > 1 where seq_len / cp divides, as asked.
          const std::optional<bool> asked = p.sequence_parallel;
          if (asked != true || tp == 1) meshes.push_back({pp, dp, tp, false, cp});
          if (asked != false && tp > 1 && (m.seq_len / cp) % tp == 0)
            meshes.push_back({pp, dp, tp, true, cp});
        }
  return meshes;
}

struct StageBest {
  bool fits = false;
  StageEstimate estimate;
  std::vector<RecomputeMode> modes;
  bool keep_gathered = false;  // ZeRO-3
};

// The fastest fitting recompute of blocks [first, first + count) on stage s, by
// trying every mode of every block.
StageBest best_stage(const StageCostModel& costs, const std::vector<RecomputeRange>& ranges, int s,
                     int first, int count) {
  StageBest best;
  std::vector<RecomputeMode> modes(count);
  // ZeRO-3: with the parameters freed and kept gathered.
  const bool keeping_is_a_choice = costs.gathers_parameters(s, count);
  std::function<void(int)> visit = [&](int k) {
    if (k == count) {
      RecomputeCounts counts;
      for (RecomputeMode mode : modes)
        (mode == RecomputeMode::Full        ? counts.full
         : mode == RecomputeMode::Selective ? counts.selective
                                            : counts.none)++;
      for (const bool keep : {false, true}) {
        if (keep && !keeping_is_a_choice) break;
        counts.keep_parameters_gathered = keep;
        const StageEstimate estimate = costs.estimate(s, counts);
        if (!costs.fits(estimate.memory)) continue;
        if (!best.fits || estimate.slot_seconds() < best.estimate.slot_seconds()) {
          best.fits = true;
          best.estimate = estimate;
          best.modes = modes;
          best.keep_gathered = keep;
        }
      }
      return;
    }
    const RecomputeRange& range = ranges[first + k];
    for (int mode = static_cast<int>(range.lowest); mode <= static_cast<int>(range.highest);
         ++mode) {
      modes[k] = static_cast<RecomputeMode>(mode);
      visit(k + 1);
    }
  };
  visit(0);
  return best;
}

}  // namespace

ExhaustiveResult exhaustive_best_plan(const JobConfig& config, const MeasuredProfile* profile) {
  const SearchSpace space = resolve_search_space(config);
  const PlannerOptions& options = config.planner;
  const int L = config.model.num_layers, global = config.training.global_batch_size;
  ExhaustiveResult result;
  for (const ParallelShape& shape : all_meshes(config, space.layout)) {
    const int p = shape.pipeline_stages, dp = shape.data_parallel;
    for (int b = 1; b <= global; ++b) {
      if (global % (b * dp) != 0) continue;
      const int m = global / (b * dp);
      if (space.fixed_micro_batch_size > 0 && b != space.fixed_micro_batch_size) continue;
      if (space.fixed_num_micro_batches > 0 && m != space.fixed_num_micro_batches) continue;
      for (int zero : space.zero_stages) {
        const bool sharded = shards_optimizer_state(zero);
        const int replicas = shape.gradient_replicas();
        if (sharded && (replicas % space.zero_ngroups != 0 ||
                        (replicas == 1 && !config.was_set("planner.zero_stage"))))
          continue;
        const PlanSetting base{shape, space.layout, b, m, zero, sharded ? space.zero_ngroups : 1,
                               {}};
        for (const ScheduleChoice& choice : schedule_choices(
                 config, base, space.boundaries_restricted || !space.pinned_layers.empty())) {
          PlanSetting candidate_setting = base;
          candidate_setting.schedule = choice;
          if (!space.pipeline_fixed && p > 1 &&
              pipeline_bubble_ratio(candidate_setting) > options.max_pipeline_bubble_ratio)
            continue;
          candidate_setting.zero_layers_per_unit = fixed_zero_unit(config, zero);
          const StageCostModel costs(config, candidate_setting, profile);
          const PlanSetting& setting = costs.setting();
          std::optional<PlanCandidate> setting_best;
          const int chunks = choice.virtual_stages;
          std::map<std::tuple<int, int, int>, StageBest> cache;
          // Every split: counts[s] blocks on stage s.
          std::vector<int> counts(p);
          std::function<void(int, int)> split = [&](int s, int first) {
            if (s == p) {
              if (first != L) return;
              std::vector<StageEstimate> estimates;
              std::vector<StageLayout> layouts;
              int start = 0;
              for (int k = 0; k < p; ++k) {
                auto key = std::make_tuple(k, start, counts[k]);
                auto it = cache.find(key);
                if (it == cache.end())
                  it = cache
                           .emplace(key,
                                    best_stage(costs, space.layer_recompute, k, start, counts[k]))
                           .first;
                if (!it->second.fits) return;
                estimates.push_back(it->second.estimate);
                layouts.push_back({start, counts[k], k == 0, k == p - 1, it->second.modes,
                                   it->second.keep_gathered});
                start += counts[k];
              }
              double slowest = 0, fastest = std::numeric_limits<double>::infinity();
              for (const StageEstimate& e : estimates) {
                slowest = std::max(slowest, e.slot_seconds());
                fastest = std::min(fastest, e.slot_seconds());
              }
              if (p > 1 && fastest < options.max_pipeline_unbalance_ratio * slowest) return;
              for (int k = 0; k < p; ++k)
                if (counts[k] < chunks) return;  // a chunk per virtual stage needs a layer
              ++result.plans_evaluated;
              PlanEstimate estimate = combine_stage_estimates(config, setting, estimates);
              if (!setting_best || estimate.prediction.step_seconds <
                                       setting_best->estimate.prediction.step_seconds) {
                setting_best = PlanCandidate{setting, layouts, std::move(estimate)};
              }
              return;
            }
            const int least = p == 1 ? L : (s == 0 || s == p - 1) ? 0 : 1;
            for (int n = least; first + n <= L; ++n) {
              const int end = first + n;
              if (s < p - 1 && !space.boundary_allowed[end]) continue;
              bool pins_ok = true;
              for (const auto& [layer, stage] : space.pinned_layers) {
                const int pinned = stage < 0 ? p - 1 : stage;
                if (layer >= first && layer < end && pinned != s) pins_ok = false;
              }
              if (!pins_ok) continue;
              counts[s] = n;
              split(s + 1, end);
            }
          };
          split(0, 0);
          // ZeRO-2 and 3: the setting's best re-costed with the larger unit, as
          // the search does (with_larger_zero_units).
          if (!setting_best) continue;
          PlanCandidate best = with_larger_zero_units(config, std::move(*setting_best),
                                                      zero_unit_to_try(config, costs), profile);
          if (!result.best ||
              best.estimate.prediction.step_seconds < result.best->estimate.prediction.step_seconds)
            result.best = std::move(best);
        }
      }
    }
  }
  return result;
}

}  // namespace paraplan
