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
  constexpr double kPi = 3.141592653589793;
  const bool stable_decay = decay == LrDecay::kWarmupStableDecay;
  const int decaying = stable_decay ? decay_steps : total_steps - warmup_steps;
  if (decaying <= 0) return min_learning_rate;
  const int decay_start = total_steps - decaying;
  if (step < decay_start) return learning_rate;  // warmup-stable-decay's stable phase
  const double progress = static_cast<double>(step - decay_start) / decaying;
  double coefficient = 0;
  if (stable_decay) {
    switch (wsd_shape) {
      case WsdShape::kLinear:
        coefficient = 1.0 - progress;
        break;
      case WsdShape::kCosine:
        coefficient = 0.5 * (1.0 + std::cos(kPi * progress));
        break;
      case WsdShape::kMinusSqrt:
        coefficient = 1.0 - std::sqrt(progress);
        break;
    }
  } else {
    coefficient =
        decay == LrDecay::kCosine ? 0.5 * (1.0 + std::cos(kPi * progress)) : 1.0 - progress;
  }
  return min_learning_rate + static_cast<float>(coefficient) * (learning_rate - min_learning_rate);
}

}  // namespace paraplan
