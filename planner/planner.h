// planner.h: the planner's front door, what `paraplan plan` calls.
//
// plan_job() takes a parsed job (model, training, cluster, planner options)
// and returns the chosen plan as a finished FlatBuffer plus a report for
// people: the chosen plan and the runners-up with why they lost. It never runs
// anything (no MPI, no CUDA). Throws std::runtime_error naming the file, the
// field and the binding constraint when no plan is feasible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/job_config.h"

namespace paraplan {

struct PlanOutcome {
  std::vector<uint8_t> plan;  // the best plan (schema/plan.fbs), identifier PPLN
  std::string report;         // human-readable: the top-k table and reasons
};

PlanOutcome plan_job(const JobConfig& config);

}  // namespace paraplan
