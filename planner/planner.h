// planner.h: the planner's front door, what `paraplan plan` calls.
//
// plan_job() takes a parsed job (model, training, cluster, planner options)
// and returns the chosen plan as a finished FlatBuffer plus a report for
// people: the chosen plan and the runners-up with why they lost. With
// load_plan_path it reuses that plan instead (plan_reuse.h); with
// save_plan_path it also writes the plan there. It never runs
// anything (no MPI, no CUDA). Throws std::runtime_error naming the file, the
// field and the binding constraint when no plan is feasible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/job/job_config.h"
#include "planner/search/plan_search.h"

namespace paraplan {

struct PlanOutcome {
  std::vector<uint8_t> plan;  // the best plan (schema/plan.fbs), identifier PPLN
  std::string report;         // human-readable: the top-k table and reasons
  // load_plan_path: the plan was reused rather than searched, and how the
  // current job differs from the one it was made for ("model.d_model: plan 768,
  // now 1024"); see plan_reuse.h.
  bool reused = false;
  std::vector<std::string> differences;
};

PlanOutcome plan_job(const JobConfig& config);

// plan_job's search (the job validated, its profile loaded and its measured
// hardware applied) without writing, checking or reporting a plan: what a
// what-if needs of a job (replan.h). Throws as plan_job does.
SearchResult search_job(const JobConfig& config);

// A note for the report when planner.opt_resident_coef does not describe the
// optimizer state paraplan's runtime keeps for model.dtype: fp32 moments (2x
// fp32 weights), or under bf16 fp32 master weights too (6x bf16 weights);
// empty when it does. The option keeps AutoDist's default (2); the note says
// which value makes the memory prediction match the run.
std::string optimizer_state_note(const JobConfig& config);

// A note when [planner] memory_constraint was left at AutoDist's default and
// that default is under half of what the named device offers ("" otherwise):
// the limit binds long before the device would, and the only other trace is
// the report's "memory limit" figure.
std::string memory_limit_note(const JobConfig& config);

}  // namespace paraplan
