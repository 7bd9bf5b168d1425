// plan_report_context_parallel.cc: the report's account of context
// parallelism (plan_report.h context_parallel_comparison): whether the
// winner splits its sequences over a ring, and the best plan of the other
// kind, or why none of that kind fits.
#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "planner/plan_report.h"
#include "planner/plan_report_text.h"

namespace paraplan {
namespace {

using report_text::duration;
using report_text::gigabytes;

// "cp 4" or "no cp".
std::string context_text(const PlanSetting& setting) {
  const int cp = setting.shape.context_parallel;
  return cp > 1 ? "cp " + std::to_string(cp) : std::string("no cp");
}

// "pp 1 x dp 2 x cp 4 x tp 8, micro-batch 1 x 16, step 10.2 s, 61.3 GB per rank".
std::string plan_text(const PlanCandidate& c) {
  const PlanSetting& s = c.setting;
  return mesh_words(s.shape) + (s.shape.sequence_parallel ? " sp" : "") + ", micro-batch " +
         std::to_string(s.micro_batch_size) + " x " + std::to_string(s.num_micro_batches) +
         ", step " + duration(c.estimate.prediction.step_seconds) + ", " +
         gigabytes(static_cast<double>(c.estimate.peak_memory)) + " GB per rank";
}

// The rejected setting without context parallelism that best says why none
// made it: one that did not fit memory, the most memory-friendly (smallest
// micro-batch, most model parallelism), as explain_no_plan picks; else any.
const SettingRejection* closest_rejection_without(const SearchResult& result) {
  const SettingRejection* closest = nullptr;
  const auto key = [](const SettingRejection& r) {
    const ParallelShape& shape = r.setting.shape;
    return std::make_tuple(r.kind != RejectionKind::DoesNotFit, r.setting.micro_batch_size,
                           -shape.pipeline_stages * shape.tensor_parallel, -r.setting.zero_stage,
                           -shape.pipeline_stages);
  };
  for (const SettingRejection& rejection : result.rejections)
    if (rejection.setting.shape.context_parallel == 1 &&
        (closest == nullptr || key(rejection) < key(*closest)))
      closest = &rejection;
  return closest;
}

// Why no plan without context parallelism made it (the search solves every
// such setting until one fits: its rejections say why).
std::string why_none_without(const SearchResult& result) {
  const SettingRejection* closest = closest_rejection_without(result);
  if (closest == nullptr) return "no setting without it\n";
  const PlanSetting& s = closest->setting;
  return std::string("without it no plan") +
         (closest->kind == RejectionKind::DoesNotFit ? " fits memory" : " passes the filters") +
         ", e.g. " + mesh_words(s.shape) + " micro-batch " + std::to_string(s.micro_batch_size) +
         (closest->reason.empty() ? "" : ": " + closest->reason) + "\n";
}

}  // namespace

std::string context_parallel_comparison(const SearchResult& result) {
  if (result.ranked.empty()) return "";
  bool with = false, without = false;
  for (const ParallelShape& shape : result.space.meshes)
    (shape.context_parallel > 1 ? with : without) = true;
  if (!with || !without) return "";
  const PlanCandidate& winner = result.ranked.front();
  const bool won_with = winner.setting.shape.context_parallel > 1;
  std::string text = "context parallelism: " +
                     (won_with ? context_text(winner.setting) + " won (" + plan_text(winner) + ")"
                               : "not used (" + plan_text(winner) + ")") +
                     "; ";
  // The best plan with context parallelism, where it lost, is the first in
  // the top-k if any is there (the search keeps no other).
  const auto first_with =
      std::find_if(result.ranked.begin(), result.ranked.end(),
                   [](const PlanCandidate& c) { return c.setting.shape.context_parallel > 1; });
  const PlanCandidate* other = nullptr;
  if (won_with && result.best_without_context_parallel)
    other = &*result.best_without_context_parallel;
  if (!won_with && first_with != result.ranked.end()) other = &*first_with;
  if (other == nullptr && !won_with)
    return text + "no plan with it ranks in the top " + std::to_string(result.ranked.size()) + "\n";
  if (other == nullptr) return text + why_none_without(result);
  return text + "the best plan " + (won_with ? "without it" : "with it") + ": " +
         (won_with ? std::string() : context_text(other->setting) + ", ") + plan_text(*other) +
         ", " + why_slower(*other, winner) + "\n";
}

}  // namespace paraplan
