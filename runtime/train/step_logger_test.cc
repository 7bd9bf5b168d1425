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

}  // namespace
}  // namespace paraplan
