// replay_report.h: the measured-against-predicted report of `paraplan
// replay`, built from every rank's measurements and the plan's predictions,
// as JSON (--report) and as the printed table.
//
// Per stage (measurements averaged over the stage's ranks, memory its largest):
//   forward, backward     compute per micro-batch (the collectives inside excluded)
//   tensor_parallel       all-reduces inside forward and backward, per micro-batch
//   gradient_reduction    data-parallel / ZeRO-1 collectives, per step
//   optimizer             the optimizer step's compute, per step
//   pipeline_and_bubble   the rest of the step: transfers, waits, loads
//   step                  the job's step (slowest rank), the same for every stage
// Errors are (measured - predicted) / predicted.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan_generated.h"
#include "runtime/model/memory_tracker.h"

namespace paraplan {

// One rank's sums over the measured steps.
struct RankMeasurement {
  double forward_seconds = 0;  // Forward spans minus the collectives inside them
  double forward_collective_seconds = 0;
  double forward_count = 0;
  double backward_seconds = 0;
  double backward_collective_seconds = 0;
  double backward_count = 0;
  // Pipeline transfer instructions and the optimizer's world all-reduce (the
  // gradient norm): waits for other stages, mostly.
  double transfer_seconds = 0;
  double load_seconds = 0;
  double reduce_seconds = 0;                // ReduceGradients spans
  double optimizer_seconds = 0;             // OptimizerStep spans minus the collectives inside
  double optimizer_collective_seconds = 0;  // its data-parallel collectives (ZeRO-1 all-gather)
  double step_seconds = 0;                  // this rank's steps
  double memory_peak[kNumMemoryCategories] = {};
  double memory_peak_total = 0;

  static constexpr int kFields = 12 + kNumMemoryCategories + 1;
  void to_array(double* out) const;
  static RankMeasurement from_array(const double* in);
};

struct ReplayRun {
  std::string plan_path;
  std::string backend;
  int steps = 0, warmup = 0;
  double job_step_seconds = 0;  // mean over measured steps of the slowest rank's step
};

nlohmann::json replay_report(const schema::Plan& plan, const ReplayRun& run,
                             const std::vector<RankMeasurement>& ranks);
std::string replay_table(const nlohmann::json& report);

}  // namespace paraplan
