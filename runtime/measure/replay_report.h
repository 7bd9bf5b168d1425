// replay_report.h: the measured-against-predicted report of `paraplan
// replay`, built from every rank's measurements and the plan's predictions,
// as JSON (--report) and as the printed table.
//
// Per stage (measurements averaged over the stage's ranks, memory its
// largest), the step's parts, per step, which add up to the job's step:
//   forward, backward     compute (instructions minus the collectives inside)
//   tensor_parallel       the tensor-parallel all-reduces' transfers
//   pipeline_p2p          the pipeline transfers' own time
//   gradient_reduction    the data-parallel / ZeRO-1 / tied-embedding transfers
//                         and the gradient norm's all-reduce over the world
//   optimizer             the optimizer step's compute
//   wait                  waiting for peers: the pipeline bubble, a slower rank
//                         reaching a collective or transfer, and the end of the
//                         step until the job's slowest rank finishes; and, on
//                         the CPU backend, for a core (compute is the CPU time
//                         a rank got, the rest of its compute spans waiting)
//   other                 the rest: loads, zeroing gradients, between
//                         instructions
// each beside the plan's prediction (the plan's StagePrediction terms; wait
// is its bubble_seconds, or the step less the other parts for plans written
// before it; other is predicted 0). Waits are told from transfers by
// wait_attribution.h. Also per micro-batch: forward, backward, tensor_parallel,
// pipeline_p2p. Errors are (measured - predicted) / predicted.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plan_generated.h"
#include "runtime/measure/wait_attribution.h"
#include "runtime/model/memory_tracker.h"

namespace paraplan {

// One rank's sums over the measured steps.
struct RankMeasurement {
  double forward_seconds = 0;  // Forward spans minus the collectives inside them
  double forward_count = 0;
  double backward_seconds = 0;
  double backward_count = 0;
  double load_seconds = 0;
  double optimizer_seconds = 0;  // OptimizerStep spans minus the collectives inside
  // CPU backend: the compute spans' wall time beyond the CPU time the rank
  // got (the compute above is that CPU time): waiting for a core.
  double core_wait_seconds = 0;
  double step_seconds = 0;    // this rank's steps
  TransferAndWait tensor;     // tensor-parallel groups
  TransferAndWait reduction;  // data-parallel, ZeRO and embedding groups
  TransferAndWait world;      // the world (the gradient norm)
  TransferAndWait pipeline;   // pipeline transfer instructions (filled on rank 0)
  double memory_peak[kNumMemoryCategories] = {};
  double memory_peak_total = 0;  // the tracker's (without NCCL's buffers)
  // NCCL's buffers as its communicators were made (ProcessGroups::
  // communicator_device_bytes); 0 on MPI and staged groups.
  double communicator_buffers = 0;

  static constexpr int kScalars = 16;
  static constexpr int kFields = kScalars + kNumMemoryCategories + 2;
  void to_array(double* out) const;
  static RankMeasurement from_array(const double* in);
};

struct ReplayRun {
  std::string plan_path;
  std::string backend;
  int steps = 0, warmup = 0;
  double job_step_seconds = 0;            // mean over measured steps of the slowest rank's step
  std::vector<double> each_step_seconds;  // each measured step's slowest rank's, in order
  // Each step's loss (warm-up steps first): a broken model (NaN, or no
  // learning) shows in a benchmark's report as it would in training.
  std::vector<double> each_step_loss;
};

nlohmann::json replay_report(const schema::Plan& plan, const ReplayRun& run,
                             const std::vector<RankMeasurement>& ranks);
std::string replay_table(const nlohmann::json& report);

}  // namespace paraplan
