// step_logger_test.cc: a log that can no longer be written is said once and
// the run goes on (a full disk must not end a multi-day run over its metrics).
#include "runtime/train/step_logger.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <sstream>

namespace paraplan {
namespace {

TEST(StepLogger, AJsonLogThatFillsUpIsSaidOnceAndTheRunGoesOn) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  StepLogger logger("/dev/full", false);
  std::ostringstream said;
  std::streambuf* console = std::cout.rdbuf(said.rdbuf());
  StepMetrics metrics;
  metrics.step = 1;
  EXPECT_NO_THROW(logger.log(metrics));
  metrics.step = 2;
  EXPECT_NO_THROW(logger.log(metrics));
  std::cout.rdbuf(console);
  const std::string text = said.str();
  const std::string warning =
      "--log-json: warning: write to '/dev/full' failed; no more JSON lines this run";
  EXPECT_NE(text.find(warning), std::string::npos) << text;
  EXPECT_EQ(text.find(warning), text.rfind(warning)) << "once: " << text;
  EXPECT_NE(text.find("step:     2"), std::string::npos) << "the step lines go on: " << text;
}

TEST(StepLogger, ShowsTheHellaSwagScoreWhereEvaluated) {
  StepMetrics metrics;
  metrics.step = 7;
  EXPECT_EQ(format_step_line(metrics).find("hellaswag"), std::string::npos);
  metrics.validation_loss = 3.25;
  metrics.hellaswag = MultipleChoiceScore{.examples = 8, .right_by_mean = 3, .right_by_sum = 2};
  const std::string line = format_step_line(metrics);
  EXPECT_NE(line.find("  val_loss: 3.2500  hellaswag: 3/8 = 0.3750"), std::string::npos) << line;
  int found = 0;
  for (const auto& [tag, value] : tensorboard_scalars(metrics)) {
    if (tag == "eval/hellaswag_accuracy") {
      EXPECT_DOUBLE_EQ(value, 0.375);
      ++found;
    }
    if (tag == "eval/hellaswag_accuracy_by_sum") {
      EXPECT_DOUBLE_EQ(value, 0.25);
      ++found;
    }
  }
  EXPECT_EQ(found, 2);
}

}  // namespace
}  // namespace paraplan
