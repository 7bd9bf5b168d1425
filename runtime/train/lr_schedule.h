// lr_schedule.h: the learning rate at each step: linear warm-up from 0, then
// cosine (or linear) decay to min_learning_rate at total_steps, constant
// after; or warmup-stable-decay: the peak until the last decay_steps steps,
// which decay in their own shape (Megatron's WSD, MiniCPM's schedule).
#pragma once

namespace paraplan {

enum class LrDecay { kCosine, kLinear, kConstant, kWarmupStableDecay };
// The shape of warmup-stable-decay's decay phase, of its progress p in [0, 1).
enum class WsdShape { kLinear, kCosine, kMinusSqrt };

struct LrSchedule {
  float learning_rate = 6e-4f;
  float min_learning_rate = 6e-5f;
  int warmup_steps = 0;
  int total_steps = 1;
  LrDecay decay = LrDecay::kCosine;
  int decay_steps = 0;  // kWarmupStableDecay: the steps that decay, at the end
  WsdShape wsd_shape = WsdShape::kLinear;

  // step counts from 0 (the first optimizer step).
  float at(int step) const;
};

}  // namespace paraplan
