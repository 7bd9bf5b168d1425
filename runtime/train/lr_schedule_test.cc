// lr_schedule_test.cc: warm-up and decay values at known steps.
#include "runtime/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace paraplan {
namespace {

TEST(LrSchedule, WarmupIsLinearFromTheFirstStep) {
  LrSchedule schedule{.learning_rate = 1.0f,
                      .min_learning_rate = 0.1f,
                      .warmup_steps = 4,
                      .total_steps = 14,
                      .decay = LrDecay::kCosine};
  EXPECT_FLOAT_EQ(schedule.at(0), 0.25f);
  EXPECT_FLOAT_EQ(schedule.at(1), 0.5f);
  EXPECT_FLOAT_EQ(schedule.at(3), 1.0f);
}

TEST(LrSchedule, CosineDecaysToTheMinimum) {
  LrSchedule schedule{.learning_rate = 1.0f,
                      .min_learning_rate = 0.1f,
                      .warmup_steps = 4,
                      .total_steps = 14,
                      .decay = LrDecay::kCosine};
  EXPECT_FLOAT_EQ(schedule.at(4), 1.0f);
  EXPECT_NEAR(schedule.at(9), 0.55f, 1e-6);  // halfway: min + 0.5 * (max - min)
  EXPECT_FLOAT_EQ(schedule.at(14), 0.1f);
  EXPECT_FLOAT_EQ(schedule.at(100), 0.1f);
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule linear{.learning_rate = 1.0f,
                    .min_learning_rate = 0.0f,
                    .warmup_steps = 0,
                    .total_steps = 10,
                    .decay = LrDecay::kLinear};
  EXPECT_FLOAT_EQ(linear.at(0), 1.0f);
  EXPECT_NEAR(linear.at(5), 0.5f, 1e-6);
  LrSchedule constant{.learning_rate = 0.3f,
                      .min_learning_rate = 0.0f,
                      .warmup_steps = 2,
                      .total_steps = 10,
                      .decay = LrDecay::kConstant};
  EXPECT_FLOAT_EQ(constant.at(0), 0.15f);
  EXPECT_FLOAT_EQ(constant.at(50), 0.3f);
}

// Warmup-stable-decay: the peak from warm-up to the last decay_steps steps,
// then each shape from the peak to the minimum.
TEST(LrSchedule, WarmupStableDecayHoldsThePeakThenDecaysAtTheEnd) {
  LrSchedule schedule{.learning_rate = 1.0f,
                      .min_learning_rate = 0.1f,
                      .warmup_steps = 2,
                      .total_steps = 12,
                      .decay = LrDecay::kWarmupStableDecay,
                      .decay_steps = 4,
                      .wsd_shape = WsdShape::kLinear};
  EXPECT_FLOAT_EQ(schedule.at(0), 0.5f);
  for (int step = 1; step <= 8; ++step) EXPECT_FLOAT_EQ(schedule.at(step), 1.0f) << step;
  EXPECT_NEAR(schedule.at(10), 0.55f, 1e-6);  // halfway through the decay
  EXPECT_NEAR(schedule.at(11), 0.325f, 1e-6);
  EXPECT_FLOAT_EQ(schedule.at(12), 0.1f);
  schedule.wsd_shape = WsdShape::kCosine;
  EXPECT_NEAR(schedule.at(10), 0.55f, 1e-6);
  EXPECT_NEAR(schedule.at(9), 0.1f + 0.9f * 0.5f * (1.0f + std::cos(3.14159265f / 4)), 1e-6);
  schedule.wsd_shape = WsdShape::kMinusSqrt;
  EXPECT_NEAR(schedule.at(10), 0.1f + 0.9f * (1.0f - std::sqrt(0.5f)), 1e-6);
  EXPECT_FLOAT_EQ(schedule.at(8), 1.0f);
  EXPECT_FLOAT_EQ(schedule.at(40), 0.1f);
}

}  // namespace
}  // namespace paraplan
