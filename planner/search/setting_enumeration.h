// setting_enumeration.h: the settings a plan search tries: every mesh of the
// space with its micro-batch sizes, ZeRO settings and schedules, the cheap
// filters applied (ZeRO groups, micro-batches, schedules,
// max_pipeline_bubble_ratio), what they refuse recorded in the result. A
// context-parallel setting that a shorter ring's never loses to
// (search_space.h context_parallel_dominated) is left out, and tried only
// where max_pipeline_unbalance_ratio refused that shorter one.
#pragma once

#include <tuple>
#include <vector>

#include "planner/cost/profile.h"
#include "planner/search/plan_search.h"

namespace paraplan {

// A setting to solve, with its step's lower bound (set before solving).
struct PendingSetting {
  PlanSetting setting;
  double lower_bound = 0;
};

// A setting's fields in the order its report and verbose log sort them
// (and the search compares settings by).
using SettingKey = std::tuple<int, int, bool, int, int, int, int, int, int, int>;
SettingKey setting_key(const PlanSetting& s);

// Records that the search refused `setting`, and why.
void add_rejection(SearchResult& result, const PlanSetting& setting, RejectionKind kind,
                   std::string reason);

// Every setting of the space, with the cheap filters applied: what they
// refuse goes to result.rejections, the rest are counted and returned. The
// settings context_parallel_dominated leaves out go to *dominated (without
// their schedules, chosen only if they are tried), uncounted and unreported.
std::vector<PendingSetting> enumerate_settings(const JobConfig& config, const SearchSpace& space,
                                               const MeasuredProfile* profile, SearchResult& result,
                                               std::vector<PendingSetting>* dominated);

// Of the left-out settings, those whose shorter ring
// max_pipeline_unbalance_ratio refused (result.rejections, once the others
// are solved), with each schedule it refused there and the bubble filter
// applied; counted as searched.
std::vector<PendingSetting> dominated_to_try(const JobConfig& config, const SearchSpace& space,
                                             const std::vector<PendingSetting>& dominated,
                                             SearchResult& result);

}  // namespace paraplan
