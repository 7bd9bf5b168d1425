// plan_report.h: the text `paraplan plan` prints: the search summary, the top-k
// table (mesh, micro-batch, ZeRO, recompute, step time, tokens/s, MFU, peak
// memory per stage) and, for each runner-up, why it lost to the best plan; the
// time model in use and what the measured profile supplied.
#pragma once

#include <string>
#include <vector>

#include "planner/search/plan_search.h"

namespace paraplan {

// profile_lines (profile_report.h) follow the time-model line.
std::string format_search_report(const JobConfig& config, const SearchResult& result,
                                 const MeasuredProfile* profile,
                                 const std::vector<std::string>& profile_lines = {});

// "+4.2%: slowest stage 10.31 ms vs 9.90 ms; bubble 27% vs 16%" — why
// candidate is slower than best.
std::string why_slower(const PlanCandidate& candidate, const PlanCandidate& best);

// Which schedule won and by how much: the best plan of each schedule kind the
// search tried (step, bubble, peak memory, and its step against the best).
// Empty with fewer than two kinds.
std::string schedule_comparison(const SearchResult& result);

// The best plan of each ZeRO stage the search tried (mesh, micro-batch,
// step, peak memory per rank, against the winner), then a line per other
// stage saying why the winner beat it: the winner's own plan does not fit
// memory under that stage, or runs slower there (the largest causes), or
// no plan of that stage fitted (with fewer than two stages searched, none
// of this); then, where the winner shards gradients (ZeRO-2, 3), why its
// units hold the layers they do.
std::string zero_stage_comparison(const JobConfig& config, const SearchResult& result,
                                  const MeasuredProfile* profile);

// Where the search tried meshes with context parallelism and without: which
// won, and the best plan of the other (mesh, micro-batch, step, peak memory
// per rank, why it lost), or why none of it fits (the most memory-friendly
// setting's reason). Empty otherwise (plan_report_context_parallel.cc).
std::string context_parallel_comparison(const SearchResult& result);

// "none", "selective x12", "full x4, selective x8".
std::string recompute_summary(const PlanCandidate& candidate);

// The report's mesh texts: "2 x 4 x 8" ("2 x 4 x 8 cp2" with context
// parallelism), and "pp 2 x dp 4 x tp 8" ("pp 2 x dp 4 x cp 2 x tp 8").
std::string mesh_text(const PlanSetting& setting);
std::string mesh_words(const ParallelShape& shape);

}  // namespace paraplan
