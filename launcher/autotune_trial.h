// autotune_trial.h: one autotuning experiment — a command run in its own process
// group with a time limit, its output kept in a log file — and the outcome
// read back: measured, out of memory, timed out or crashed. A failed
// experiment is a result, never an exception: tuning goes on.
#pragma once

#include <string>
#include <vector>

namespace paraplan {

enum class ExperimentStatus { kMeasured, kOutOfMemory, kTimedOut, kFailed };
const char* experiment_status_name(ExperimentStatus status);

struct ExperimentOutcome {
  ExperimentStatus status = ExperimentStatus::kFailed;
  int exit_code = 0;
  double seconds = 0;   // wall time of the whole run
  std::string message;  // the error line of a failed run
};

// Runs arguments (argv[0] looked up on PATH) with stdout and stderr to
// log_path, killing its whole process group after timeout_seconds. The status
// is kMeasured for exit 0; kOutOfMemory when the log says "out of device
// memory" or "out of memory"; kTimedOut; else kFailed with the log's last
// "paraplan: error:" line (or its last line).
ExperimentOutcome run_experiment(const std::vector<std::string>& arguments,
                                 const std::string& log_path, double timeout_seconds);

}  // namespace paraplan
