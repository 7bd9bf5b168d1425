// step_logger.h: the per-step log line as torchtitan prints it, the same
// fields as one JSON object per line in --log-json, and as TensorBoard
// scalars in --tensorboard-dir (tensorboard_writer.h).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/multiple_choice.h"
#include "runtime/train/tensorboard_writer.h"

namespace paraplan {

struct StepMetrics {
  int step = 0;  // 1-based, as printed
  double loss = 0;
  double grad_norm = 0;
  double learning_rate = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;
  double tflops = 0;               // achieved model TFLOP/s per device
  double mfu = 0;                  // fraction of peak
  uint64_t peak_memory_bytes = 0;  // this rank's tracked peak
  uint64_t memory_capacity_bytes = 0;
  std::optional<double> validation_loss;
  // The multiple-choice score (--hellaswag) where this step evaluated it.
  std::optional<MultipleChoiceScore> hellaswag;
  // Times the leader's host waited for its device during the step
  // (kernels/sync_counting_ops.h): a small constant, whatever the micro-batch
  // and layer counts.
  uint64_t host_synchronizations = 0;
  uint64_t bytes_zeroed = 0;  // Ops::zero_bytes during the step (this rank)
};

// "step:    10  loss:  4.1234  grad_norm:  0.8123  lr: 3.0e-04  memory:  0.05GiB(0.6%)
//  tps: 12,345  tflops: 0.12  mfu: 1.23%", and where evaluated
// "  val_loss: 3.9876  hellaswag: 2967/10042 = 0.2955"
std::string format_step_line(const StepMetrics& metrics);

// The TensorBoard scalars of a step, by tag: loss/train (and
// loss/validation, eval/hellaswag_accuracy), optimizer/grad_norm and lr,
// throughput/tokens_per_second (per device), tflops and mfu_percent, memory/peak_gib,
// time/step_seconds.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepMetrics& metrics);

class StepLogger {
 public:
  // json_path empty: no JSON. append: keep earlier lines (a resumed run).
  // tensorboard_dir empty: no event file; else a new one there. Either that
  // cannot be opened is an error here; a later write that fails is one
  // warning, and the run goes on without that output.
  StepLogger(const std::string& json_path, bool append, const std::string& tensorboard_dir = "");
  void log(const StepMetrics& metrics);

 private:
  std::string json_path_;
  std::ofstream json_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace paraplan
