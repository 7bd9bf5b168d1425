// training_step.h: one optimizer step of the plan on this rank, as `paraplan
// train` runs it: gradients zeroed, the stage's instruction stream (loads,
// forwards, backwards, transfers, the data-parallel reduction and the
// optimizer step at the places the plan puts them), the step's loss read back
// once, errors the device deferred raised.
//
// The host waits for the device only where the step needs a number back:
// the gradient norm (the clip factor) and the loss; plus one check for
// deferred errors. Nothing waits per micro-batch or per layer (token loads are
// asynchronous, losses and squares accumulate on the device); the staged
// transport's copies are the exception, by design.
#pragma once

#include <cstdint>

#include "runtime/data/sample_source.h"
#include "runtime/pipeline/rank_state.h"

namespace paraplan {

struct TrainingStep {
  double loss_sum = 0;  // this stage's per-token losses (0 off the last stage)
  double grad_norm = 0;
  uint64_t host_synchronizations = 0;  // waits for the device during the step
  uint64_t bytes_zeroed = 0;           // Ops::zero_bytes during the step
};

// step is 1-based (the optimizer's step count).
TrainingStep run_training_step(RankState& rank, const SampleSource& data, int64_t first_sample,
                               float loss_scale, double learning_rate, int step);

}  // namespace paraplan
