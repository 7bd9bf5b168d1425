// lr_schedule.h: the learning rate at each step: linear warm-up from 0, then
// cosine (or linear) decay to min_learning_rate at total_steps, constant after.
#pragma once

namespace paraplan {

enum class LrDecay { kCosine, kLinear, kConstant };

struct LrSchedule {
  float learning_rate = 6e-4f;
  float min_learning_rate = 6e-5f;
  int warmup_steps = 0;
  int total_steps = 1;
  LrDecay decay = LrDecay::kCosine;

  // step counts from 0 (the first optimizer step).
  float at(int step) const;
};

}  // namespace paraplan
