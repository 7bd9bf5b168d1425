// training_step.cc: one optimizer step on this rank.
#include "runtime/train/training_step.h"

namespace paraplan {

TrainingStep run_training_step(RankState& rank, const SampleSource& data, int64_t first_sample,
                               float loss_scale, double learning_rate, int step) {
  const uint64_t synchronizations_before = rank.sync_counter->synchronizations();
  const uint64_t zeroed_before = rank.sync_counter->bytes_zeroed();
  rank.optimizer->zero_gradients();
  TrainingStep result;
  const ExecutorHooks hooks = optimizer_hooks(
      *rank.optimizer, [&] { rank.optimizer->step(static_cast<float>(learning_rate), step); });
  result.loss_sum = rank.executor->run_step(data, first_sample, loss_scale, hooks);
  // The loss read has drained the device: the norm's read waits for nothing,
  // and a bad target found late is raised here (the update skipped it).
  result.grad_norm = rank.optimizer->finish_step();  // samples the backend's memory
  result.host_synchronizations = rank.sync_counter->synchronizations() - synchronizations_before;
  result.bytes_zeroed = rank.sync_counter->bytes_zeroed() - zeroed_before;
  return result;
}

}  // namespace paraplan
