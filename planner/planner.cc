// planner.cc: plan_job(). For now one rank; the search replaces this.
#include "planner/planner.h"

#include "planner/single_rank_planner.h"

namespace paraplan {

PlanOutcome plan_job(const JobConfig& config) {
  PlanOutcome outcome;
  outcome.plan = build_single_rank_plan(config);
  return outcome;
}

}  // namespace paraplan
