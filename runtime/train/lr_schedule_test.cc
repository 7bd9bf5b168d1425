// lr_schedule_test.cc: warm-up and decay values at known steps.
#include "runtime/train/lr_schedule.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace paraplan
