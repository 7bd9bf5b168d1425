// lr_schedule.cc: warm-up then decay, as Megatron and nanoGPT schedule it.
#include "runtime/train/lr_schedule.h"

#include <cmath>

namespace paraplan {

float LrSchedule::at(int step) const {
  // Warm-up reaches the peak at step warmup_steps - 1, so step 0 already learns.
  if (step < warmup_steps)
    return learning_rate * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (decay == LrDecay::kConstant || step >= total_steps) {
    return decay == LrDecay::kConstant ? learning_rate : min_learning_rate;
  }
  const int decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 0) return min_learning_rate;
  const double progress = static_cast<double>(step - warmup_steps) / decay_steps;
  const double coefficient = decay == LrDecay::kCosine
                                 ? 0.5 * (1.0 + std::cos(3.141592653589793 * progress))
                                 : 1.0 - progress;
  return min_learning_rate + static_cast<float>(coefficient) * (learning_rate - min_learning_rate);
}

}  // namespace paraplan
