// interleaved_timing_test.cc: the profiler's timing: runs counted and
// interleaved as promised, wall time against a CPU rank's work.
#include "runtime/measure/interleaved_timing.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace paraplan {
namespace {

TEST(InterleavedTiming, RoundsVisitEveryPieceInTurnWithTheirPreparations) {
  const std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  std::string order;
  double a = -1, b = -1;
  const std::vector<TimedPiece> pieces = {
      {[&] { order += 'a'; }, nullptr, &a},
      {[&] { order += 'b'; }, [&] { order += 'p'; }, &b},
  };
  // 5 repetitions in 3 rounds: 2 runs of each per round (no window).
  time_interleaved(*ops, 5, 0, 3, Timing::kWall, pieces);
  // Warm-up (b's preparation first), then per round a a, then b's runs each
  // after its preparation.
  EXPECT_EQ(order,
            "a"
            "pb"
            "aa"
            "pbpb"
            "aa"
            "pbpb"
            "aa"
            "pbpb");
  EXPECT_GE(a, 0);
  EXPECT_GE(b, 0);
}

TEST(InterleavedTiming, TheWindowIsSpreadOverTheRounds) {
  const std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  int runs = 0;
  double seconds = 0;
  const auto sleep_1ms = [&] {
    ++runs;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  // One repetition but a 20 ms window over 4 rounds: each round runs until it
  // has 5 ms, so at least 4 x 5 runs of >= 1 ms, plus the warm-up.
  time_interleaved(*ops, 1, 0.02, 4, Timing::kWall, {TimedPiece{sleep_1ms, nullptr, &seconds}});
  EXPECT_GE(runs, 1 + 4);
  EXPECT_LE(runs, 1 + 4 * 5);
  EXPECT_GE(seconds, 1e-3);  // wall time includes the sleep
}

TEST(InterleavedTiming, WorkOnTheCpuBackendIsTheCpuTimeNotTheWallTime) {
  // A run that sleeps 2 ms and one that spins 2 ms: by wall clock both take
  // >= 2 ms; as a CPU rank's work, the sleeper did next to nothing. Measured
  // in a child process of this one thread: the process's CPU time counts
  // every thread, and OpenBLAS's idle workers spin for a while after they
  // start (a rank's compute is timed where they are its own).
  const std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  int results[2];
  ASSERT_EQ(pipe(results), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const auto sleep_2ms = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
    const auto spin_2ms = [] {
      const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
      volatile double x = 0;
      while (std::chrono::steady_clock::now() < end) x = x + 1;
    };
    const double seconds[3] = {mean_seconds(*ops, 5, 0, Timing::kWall, sleep_2ms),
                               mean_seconds(*ops, 5, 0, Timing::kWork, sleep_2ms),
                               mean_seconds(*ops, 5, 0, Timing::kWork, spin_2ms)};
    const bool written = write(results[1], seconds, sizeof seconds) == sizeof seconds;
    _exit(written ? 0 : 1);
  }
  close(results[1]);
  double seconds[3] = {0, 0, 0};
  const ssize_t got = read(results[0], seconds, sizeof seconds);
  close(results[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof seconds));
  const double sleep_wall = seconds[0], sleep_work = seconds[1], spin_work = seconds[2];
  EXPECT_GE(sleep_wall, 2e-3);
  EXPECT_LT(sleep_work, 0.5e-3);
  // Spinning is work (never more than the wall time it took: capped; a noisy
  // machine may take the core away for part of it).
  EXPECT_GT(spin_work, 0.5e-3);
  EXPECT_LE(spin_work, 2e-3 * 1.5);
}

}  // namespace
}  // namespace paraplan
