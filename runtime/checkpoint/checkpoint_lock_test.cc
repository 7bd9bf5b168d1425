// checkpoint_lock_test.cc: a second writer is refused naming the first; the
// lock goes with its holder, even a killed one.
#include "runtime/checkpoint/checkpoint_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;

TEST(CheckpointDirLockTest, ASecondWriterIsRefusedNamingTheFirst) {
  TempDir dir;
  const std::string checkpoints = dir / "checkpoints";  // created by the lock
  auto first = std::make_unique<CheckpointDirLock>(checkpoints, "paraplan train, plan a.pplan");
  EXPECT_TRUE(std::filesystem::is_directory(checkpoints));
  const std::string refused =
      error_of([&] { CheckpointDirLock second(checkpoints, "paraplan train, plan b.pplan"); });
  EXPECT_TRUE(contains(refused, "--checkpoint-dir " + checkpoints +
                                    " is in use by another run (paraplan train, plan a.pplan, "
                                    "pid " +
                                    std::to_string(getpid()) + " on host "));
  EXPECT_TRUE(contains(refused, "give this run another directory, or stop that run"));
  first.reset();
  EXPECT_NO_THROW(CheckpointDirLock third(checkpoints, "paraplan train, plan c.pplan"));
}

// Where flock does not reach across hosts, a run on another host takes the
// directory as if it were free and writes its own line: the first run's
// writer sees that before publishing and stops.
TEST(CheckpointDirLockTest, ARunThatTookTheDirectoryFencesOutTheFirstWriter) {
  TempDir dir;
  const std::string checkpoints = dir / "checkpoints";
  CheckpointDirLock first(checkpoints, "paraplan train of plan a.pplan");
  EXPECT_NO_THROW(first.check_still_held());
  {
    // What the other host's run writes (its flock saw no holder).
    std::ofstream other(first.path(), std::ios::trunc);
    other << "paraplan train of plan b.pplan, pid 7 on host node2, since now, run 0123\n";
  }
  const std::string fenced = error_of([&] { first.check_still_held(); });
  EXPECT_TRUE(contains(fenced, "--checkpoint-dir " + checkpoints +
                                   " was taken by another run (paraplan train of plan b.pplan, "
                                   "pid 7 on host node2"))
      << fenced;
  EXPECT_TRUE(contains(
      fenced, "while this one (paraplan train of plan a.pplan, pid " + std::to_string(getpid())))
      << fenced;
  EXPECT_TRUE(contains(fenced, "publishes no checkpoint there and stops")) << fenced;
  // A lock file removed and made anew is not the one held either.
  std::filesystem::remove(first.path());
  EXPECT_TRUE(contains(error_of([&] { first.check_still_held(); }), "was removed"));
}

// Every holder's line is its own, even the same program's twice in a row.
TEST(CheckpointDirLockTest, EachHolderWritesALineOfItsOwn) {
  TempDir dir;
  const std::string checkpoints = dir / "checkpoints";
  const auto line_of = [&] {
    CheckpointDirLock held(checkpoints, "paraplan train");
    std::ifstream in(held.path());
    std::string line;
    std::getline(in, line);
    return line;
  };
  const std::string once = line_of(), again = line_of();
  EXPECT_TRUE(contains(once, ", run "));
  EXPECT_NE(once, again);
}

// A child process that takes the lock as `holder`, then holds it until
// killed, or for `seconds` when that is positive; returns once it holds it.
pid_t fork_holder(const std::string& checkpoints, const std::string& holder, double seconds) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    CheckpointDirLock held(checkpoints, holder);
    char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    if (seconds > 0) {
      usleep(static_cast<useconds_t>(seconds * 1e6));
    } else {
      pause();  // until killed
    }
    _exit(0);
  }
  char byte = 0;
  if (child < 0 || read(ready[0], &byte, 1) != 1) return -1;
  close(ready[0]);
  close(ready[1]);
  return child;
}

TEST(CheckpointDirLockTest, AKilledHolderLeavesNoLockBehind) {
  TempDir dir;
  const std::string checkpoints = dir / "checkpoints";
  const pid_t child = fork_holder(checkpoints, "the child", 0);
  ASSERT_GT(child, 0);
  EXPECT_TRUE(contains(error_of([&] { CheckpointDirLock second(checkpoints, "the parent"); }),
                       "(the child, pid " + std::to_string(child)));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_NO_THROW(CheckpointDirLock after(checkpoints, "the parent"));
}

TEST(CheckpointDirLockTest, ARestartWaitsForTheOldWriterToEnd) {
  TempDir dir;
  const std::string checkpoints = dir / "checkpoints";
  // A failed attempt's rank 0, ending itself 0.5 s later.
  const pid_t child = fork_holder(checkpoints, "the failed attempt", 0.5);
  ASSERT_GT(child, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(CheckpointDirLock restarted(checkpoints, "the restart", 30));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(waited, 0.2);
  EXPECT_LT(waited, 20);
  waitpid(child, nullptr, 0);
}

TEST(CheckpointDirLockTest, AWaitThatRunsOutNamesTheHolder) {
  TempDir dir;
  const std::string checkpoints = dir / "checkpoints";
  CheckpointDirLock first(checkpoints, "the other run");
  const std::string refused =
      error_of([&] { CheckpointDirLock second(checkpoints, "the restart", 0.3); });
  EXPECT_TRUE(contains(refused, "is in use by another run (the other run, pid "));
  EXPECT_TRUE(contains(refused, ") after waiting 0.3 s for it to end; two runs"));
}

TEST(CheckpointDirLockTest, ADirectoryThatCannotBeMadeIsNamed) {
  TempDir dir;
  testing::write_bytes(dir / "a_file", "x");
  EXPECT_TRUE(contains(error_of([&] { CheckpointDirLock lock(dir / "a_file/sub", "run"); }),
                       "--checkpoint-dir " + dir / "a_file/sub" + ": cannot create it"));
}

}  // namespace
}  // namespace paraplan
