// autotune.h: `paraplan autotune --config job.toml`: the measured search on
// top of the planner, after the autotuning principle in shared/reference:
//
// 1. Rank: the planner's cost model ranks the job's settings; the memory model
//    prunes those that cannot fit. The best `max_meshes` (pp, dp, tp) meshes
//    are tuned, in predicted order.
// 2. Micro-batch: per mesh and ZeRO stage, a binary search between the
//    smallest micro-batch size and the largest the memory model accepts finds
//    the largest that really runs; then sizes are measured from the smallest
//    up, stopping at a plateau (a gain below `plateau`, 5% by default).
// 3. ZeRO, progressively (0, 1, 2 as the search space holds them): a higher
//    stage is explored for a mesh only where it can beat the best of the
//    stages below: they were memory-bound (a larger micro-batch did not fit),
//    or the cost model predicts the higher stage faster than the best result
//    so far. Every skipped stage gets a note saying why.
// 4. Trial parameters (autotune_parameters.h): around the best measured
//    setting, a grid of at most 4 more experiments over the communication
//    bucket sizes (and whatever other job keys are listed there), values
//    known to be bad or equivalent skipped before running, with the reason.
// Each experiment is `paraplan launch ... -- replay` in its own processes
// with a time limit; an out-of-memory, crash or timeout is recorded and tuning
// goes on. The fastest measured plan is written to --output (or [planner]
// save_plan_path) and a summary table is printed, with every trial
// parameter's value and the grid's values tried and skipped.
#pragma once

#include <string>
#include <vector>

namespace paraplan {

struct AutotuneOptions {
  std::string config;
  std::string model_from;                 // launcher/model_from.h
  std::string output;                     // the best plan; default [planner] save_plan_path
  std::string work_dir = "out/autotune";  // plans, logs and reports of every experiment
  std::string backend = "cpu";
  std::string report;  // optional: the summary as JSON
  int steps = 3;       // measured steps per experiment
  int warmup = 1;
  int max_meshes = 3;
  double plateau = 0.05;            // stop growing the micro-batch below this gain
  double experiment_timeout = 600;  // seconds
  std::string mpirun = "mpirun";
};

// Returns 0 when a plan was measured and written; throws when nothing ran.
int run_autotune(const AutotuneOptions& options, const std::vector<std::string>& extras);

}  // namespace paraplan
