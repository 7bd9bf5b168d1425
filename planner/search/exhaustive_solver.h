// exhaustive_solver.h: the test oracle. Enumerates every plan of a small job —
// every mesh, micro-batch size and ZeRO setting, every split of the blocks into
// stages and every recompute mode of every block — and returns the fastest one
// under the cost model, with the same filters as the search. Independent of the
// search's algorithms (it shares only the cost model and the option parsing), so
// agreement on predicted step time is evidence the search is exact. Meant for up
// to about 8 blocks and 16 devices: the work grows as 3^blocks.
#pragma once

#include <optional>

#include "planner/job/job_config.h"
#include "planner/search/plan_candidate.h"

namespace paraplan {

class MeasuredProfile;

struct ExhaustiveResult {
  std::optional<PlanCandidate> best;
  long long plans_evaluated = 0;  // (setting, split) pairs whose stages all fit
};

ExhaustiveResult exhaustive_best_plan(const JobConfig& config,
                                      const MeasuredProfile* profile = nullptr);

}  // namespace paraplan
