// autotune_trial_test.cc: an experiment's outcome read from its exit, its log and its clock.
#include "launcher/autotune_trial.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace paraplan {
namespace {

// One log per test: ctest runs the tests of this file in parallel processes.
std::string log_path() {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return (std::filesystem::temp_directory_path() /
          ("experiment_" + test + "_" + std::to_string(getpid()) + ".log"))
      .string();
}

ExperimentOutcome shell(const std::string& script, double timeout = 30) {
  return run_experiment({"sh", "-c", script}, log_path(), timeout);
}

TEST(Experiment, ExitZeroIsMeasured) {
  EXPECT_EQ(shell("echo fine").status, ExperimentStatus::kMeasured);
}

TEST(Experiment, OutOfDeviceMemoryIsRecognised) {
  const ExperimentOutcome outcome = shell(
      "echo starting; echo 'paraplan: error: [rank 1] out of device memory: 2.0 MiB' >&2; "
      "exit 1");
  EXPECT_EQ(outcome.status, ExperimentStatus::kOutOfMemory);
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_EQ(outcome.message, "paraplan: error: [rank 1] out of device memory: 2.0 MiB");
}

TEST(Experiment, ACrashIsAFailureWithItsLastLine) {
  const ExperimentOutcome outcome = shell("echo 'segfault in rank 2'; kill -SEGV $$");
  EXPECT_EQ(outcome.status, ExperimentStatus::kFailed);
  EXPECT_EQ(outcome.exit_code, 128 + 11);
  EXPECT_EQ(outcome.message, "segfault in rank 2");
}

TEST(Experiment, MpirunsBannerIsReadForItsReason) {
  // Open MPI's refusal of root, as mpirun prints it: the reason sits between
  // rows of dashes, and the last line is dashes.
  const std::string dashes(74, '-');
  const ExperimentOutcome root =
      shell("echo " + dashes + "; echo 'mpirun has detected an attempt to run as root.'; echo; " +
            "echo 'Running as root is *strongly* discouraged as any mistake (e.g., in'; echo " +
            dashes + "; exit 1");
  EXPECT_EQ(root.status, ExperimentStatus::kFailed);
  EXPECT_EQ(root.message,
            "mpirun refuses to run as root: set OMPI_ALLOW_RUN_AS_ROOT=1 and "
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (as containers do), or run as another user");
  const ExperimentOutcome other =
      shell("echo " + dashes + "; echo 'There are not enough slots available'; echo " + dashes +
            "; exit 1");
  EXPECT_EQ(other.message, "mpirun: There are not enough slots available");
  // A start-up warning's banner first, then the fatal one: the fatal one.
  const ExperimentOutcome warned =
      shell("echo " + dashes +
            "; echo 'WARNING: There was an error initializing an OpenFabrics "
            "device.'; echo " +
            dashes + "; echo " + dashes +
            "; echo 'mpirun noticed that process rank 1 exited on signal 9 (Killed).'; echo " +
            dashes + "; exit 1");
  EXPECT_EQ(warned.message, "mpirun noticed that process rank 1 exited on signal 9 (Killed).");
}

TEST(Experiment, AHangIsKilledWithItsChildrenAtTheTimeout) {
  // The child's own child (as mpirun's ranks) goes too: its process group is killed.
  const ExperimentOutcome outcome = shell("sleep 30 & sleep 30", 0.3);
  EXPECT_EQ(outcome.status, ExperimentStatus::kTimedOut);
  EXPECT_LT(outcome.seconds, 5);
}

TEST(Experiment, AMissingProgramFails) {
  const ExperimentOutcome outcome = run_experiment({"/nonexistent/paraplan"}, log_path(), 10);
  EXPECT_EQ(outcome.status, ExperimentStatus::kFailed);
  EXPECT_EQ(outcome.exit_code, 127);
}

}  // namespace
}  // namespace paraplan
