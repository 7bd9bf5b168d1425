// setting_enumeration.cc: the settings a plan search tries
// (setting_enumeration.h).
#include "planner/search/setting_enumeration.h"

#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "planner/schedule/schedule_kinds.h"
#include "schema/zero_stages.h"

namespace paraplan {
namespace {

std::string str(int64_t value) {
  return std::to_string(value);
}

// The ZeRO settings (stage, groups) a mesh tries over its dp x cp ranks
// holding the same parameters; a zero_ngroups that does not divide them is
// rejected (once per mesh).
std::vector<std::pair<int, int>> zero_settings(const JobConfig& config, const SearchSpace& space,
                                               const ParallelShape& shape, SearchResult& result) {
  const int dp = shape.gradient_replicas();
  std::vector<std::pair<int, int>> settings;  // (stage, groups)
  bool rejected = false;
  for (int zero : space.zero_stages) {
    if (!shards_optimizer_state(zero)) {
      settings.push_back({zero, 1});
    } else if (dp % space.zero_ngroups != 0) {
      if (rejected) continue;
      rejected = true;
      PlanSetting setting;
      setting.shape = shape;
      setting.layout = space.layout;
      setting.zero_stage = zero;
      add_rejection(result, setting, RejectionKind::ZeroGroups,
                    "[planner] zero_ngroups = " + str(space.zero_ngroups) + " does not divide dp " +
                        (shape.context_parallel > 1 ? "x cp " : "") + str(dp));
    } else if (dp > 1 || config.was_set("planner.zero_stage")) {
      settings.push_back({zero, space.zero_ngroups});
    }
  }
  return settings;
}

// Why the global batch splits into no micro-batch size on a mesh of dp.
std::string no_micro_batch_reason(const JobConfig& config, const SearchSpace& space, int dp) {
  return "[training] global_batch_size (" + str(config.training.global_batch_size) +
         ") must equal " +
         (space.fixed_micro_batch_size > 0
              ? space.micro_batch_field + " (" + str(space.fixed_micro_batch_size) + ")"
              : std::string("micro_batch_size")) +
         " x " +
         (space.fixed_num_micro_batches > 0
              ? "[planner] update_freq (" + str(space.fixed_num_micro_batches) + ")"
              : std::string("the micro-batch count")) +
         " x data-parallel degree (" + str(dp) + ")";
}

// Why a pipeline of this setting's bubble ratio is filtered out ("" when it
// is not): max_pipeline_bubble_ratio, unless the pipeline degree is fixed.
std::string bubble_filter_reason(const JobConfig& config, const SearchSpace& space,
                                 const PlanSetting& setting) {
  const PlannerOptions& options = config.planner;
  // ZB-H1's bubble is counted as 1F1B's here and the V kinds' as
  // interleaved's at v = 2 (their W share is not known yet).
  const double bubble = pipeline_bubble_ratio(setting);
  if (space.pipeline_fixed || setting.shape.pipeline_stages <= 1 ||
      bubble <= options.max_pipeline_bubble_ratio)
    return "";
  char text[200];
  std::snprintf(text, sizeof(text),
                setting.schedule.virtual_stages > 1
                    ? "bubble ratio %.3f = ((p - 1) / v) / (m + (p - 1) / v) exceeds "
                      "max_pipeline_bubble_ratio = %g"
                    : "bubble ratio %.3f = (p - 1) / (m + p - 1) exceeds "
                      "max_pipeline_bubble_ratio = %g",
                bubble, options.max_pipeline_bubble_ratio);
  return text;
}

// The setting context_parallel_dominated measures s against: dp x g, cp / g
// and micro-batch b / g, g = gcd(b, cp), the rest the same.
PlanSetting shorter_ring(PlanSetting s) {
  const int g = std::gcd(s.micro_batch_size, s.shape.context_parallel);
  s.shape.data_parallel *= g;
  s.shape.context_parallel /= g;
  s.micro_batch_size /= g;
  return s;
}

PlanSetting any_schedule(PlanSetting s) {
  s.schedule = {};
  return s;
}

}  // namespace

SettingKey setting_key(const PlanSetting& s) {
  return {s.shape.pipeline_stages,
          s.shape.tensor_parallel,
          s.shape.sequence_parallel,
          s.shape.context_parallel,
          s.shape.data_parallel,
          -s.micro_batch_size,
          s.zero_stage,
          s.zero_ngroups,
          static_cast<int>(s.schedule.kind),
          s.schedule.virtual_stages};
}

void add_rejection(SearchResult& result, const PlanSetting& setting, RejectionKind kind,
                   std::string reason) {
  SettingRejection rejection;
  rejection.setting = setting;
  rejection.kind = kind;
  rejection.reason = std::move(reason);
  result.rejections.push_back(std::move(rejection));
}

std::vector<PendingSetting> enumerate_settings(const JobConfig& config, const SearchSpace& space,
                                               const MeasuredProfile* profile, SearchResult& result,
                                               std::vector<PendingSetting>* dominated) {
  std::vector<PendingSetting> pending;
  for (const ParallelShape& shape : space.meshes) {
    const int dp = shape.data_parallel;
    const std::vector<std::pair<int, int>> zeros = zero_settings(config, space, shape, result);
    const std::vector<int> sizes = micro_batch_sizes(space, config, dp);
    if (sizes.empty()) {
      PlanSetting setting;
      setting.shape = shape;
      setting.layout = space.layout;
      add_rejection(result, setting, RejectionKind::MicroBatch,
                    no_micro_batch_reason(config, space, dp));
      continue;
    }
    for (int b : sizes) {
      const bool left_out = context_parallel_dominated(space, config, shape, b, profile != nullptr);
      const int m = config.training.global_batch_size / (dp * b);
      for (const auto& [zero, groups] : zeros) {
        PlanSetting base{shape, space.layout, b, m, zero, groups, {}};
        base.zero_layers_per_unit = fixed_zero_unit(config, zero);
        if (left_out) {
          dominated->push_back({base, 0});
          continue;
        }
        const bool restricted = space.boundaries_restricted || !space.pinned_layers.empty();
        if (std::string why = why_no_schedule_choice(config, base, restricted); !why.empty()) {
          add_rejection(result, base, RejectionKind::Schedule, std::move(why));
          continue;
        }
        for (const ScheduleChoice& choice : schedule_choices(config, base, restricted)) {
          PlanSetting setting = base;
          setting.schedule = choice;
          ++result.statistics.settings;
          result.settings.push_back(setting);
          if (std::string why = bubble_filter_reason(config, space, setting); !why.empty()) {
            add_rejection(result, setting, RejectionKind::Bubble, std::move(why));
            continue;
          }
          pending.push_back({setting, 0});
        }
      }
    }
  }
  return pending;
}

std::vector<PendingSetting> dominated_to_try(const JobConfig& config, const SearchSpace& space,
                                             const std::vector<PendingSetting>& dominated,
                                             SearchResult& result) {
  std::set<SettingKey> unbalanced, unbalanced_any_schedule;
  for (const SettingRejection& rejection : result.rejections) {
    if (rejection.kind != RejectionKind::Unbalanced) continue;
    unbalanced.insert(setting_key(rejection.setting));
    unbalanced_any_schedule.insert(setting_key(any_schedule(rejection.setting)));
  }
  std::vector<PendingSetting> to_try;
  const bool restricted = space.boundaries_restricted || !space.pinned_layers.empty();
  for (const PendingSetting& left_out : dominated) {
    const PlanSetting& base = left_out.setting;
    if (!unbalanced_any_schedule.contains(setting_key(any_schedule(shorter_ring(base))))) continue;
    if (!why_no_schedule_choice(config, base, restricted).empty()) continue;
    for (const ScheduleChoice& choice : schedule_choices(config, base, restricted)) {
      PlanSetting setting = base;
      setting.schedule = choice;
      if (!unbalanced.contains(setting_key(shorter_ring(setting)))) continue;
      if (!bubble_filter_reason(config, space, setting).empty()) continue;
      ++result.statistics.settings;
      result.settings.push_back(setting);
      to_try.push_back({setting, 0});
    }
  }
  return to_try;
}

}  // namespace paraplan
