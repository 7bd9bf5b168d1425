// plan_report.h: the text `paraplan plan` prints: the search summary, the top-k
// table (mesh, micro-batch, ZeRO, recompute, step time, tokens/s, MFU, peak
// memory per stage) and, for each runner-up, why it lost to the best plan.
#pragma once

#include <string>

#include "planner/search.h"

namespace paraplan {

std::string format_search_report(const JobConfig& config, const SearchResult& result,
                                 const MeasuredProfile* profile);

// "+4.2%: slowest stage 10.31 ms vs 9.90 ms; bubble 27% vs 16%" — why
// candidate is slower than best.
std::string why_slower(const PlanCandidate& candidate, const PlanCandidate& best);

// "none", "selective x12", "full x4, selective x8".
std::string recompute_summary(const PlanCandidate& candidate);

}  // namespace paraplan
