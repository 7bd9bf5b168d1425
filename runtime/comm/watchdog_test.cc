// watchdog_test.cc: the collective timeout thread on its own: the message of
// an expired operation, operations retired by finish() or by their done
// probe, slot reuse that a stale ticket cannot disturb, and the snapshot the
// heartbeat reports.
#include "runtime/comm/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace paraplan {
namespace {

using namespace std::chrono_literals;

// A watchdog whose expiry handler records the message instead of ending the job.
class RecordingWatchdog {
 public:
  explicit RecordingWatchdog(double timeout_seconds) {
    watchdog.set_expiry_handler([this](const std::string& message) {
      std::lock_guard<std::mutex> lock(mutex);
      this->message = message;
    });
    watchdog.set_timeout(timeout_seconds, 3);
  }
  // The recorded message, waiting up to `wait` for one.
  std::string expired(std::chrono::milliseconds wait) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!message.empty()) return message;
      }
      std::this_thread::sleep_for(5ms);
    }
    std::lock_guard<std::mutex> lock(mutex);
    return message;
  }

  Watchdog watchdog;
  std::mutex mutex;
  std::string message;
};

TEST(WatchdogTest, DisabledRegistersNothing) {
  Watchdog watchdog;
  EXPECT_EQ(watchdog.begin({"all_reduce", 8}), 0u);
  watchdog.finish(0);  // harmless
  EXPECT_THROW(watchdog.set_timeout(-1, 0), std::invalid_argument);
}

// NCCL's asynchronous error, read by the operation's probe while the host
// waits: the job ends at once with NCCL's own text, long before the timeout.
TEST(WatchdogTest, AProbeThatFindsAnErrorEndsTheJobInItsWords) {
  RecordingWatchdog recording(600);
  const std::string where = " on group 'data' (rank 1 of 2)";
  std::atomic<bool> broken{false};
  recording.watchdog.begin({"all_reduce", 512, "floats", &where}, [&broken]() -> bool {
    if (broken) throw std::runtime_error("NCCL: unhandled system error (remote peer closed)");
    return false;
  });
  EXPECT_EQ(recording.expired(100ms), "");
  const auto start = std::chrono::steady_clock::now();
  broken = true;
  EXPECT_EQ(recording.expired(2000ms),
            "error: all_reduce of 512 floats on group 'data' (rank 1 of 2) failed (world rank 3): "
            "NCCL: unhandled system error (remote peer closed)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

TEST(WatchdogTest, AnExpiredOperationIsNamedInFull) {
  RecordingWatchdog recording(0.05);
  const std::string where = " on group 'tensor' (rank 0 of 2)";
  recording.watchdog.begin({"all_reduce", 3072, "floats", &where});
  EXPECT_EQ(recording.expired(2000ms),
            "timeout: all_reduce of 3072 floats on group 'tensor' (rank 0 of 2) did not complete "
            "within 0.05 s (world rank 3); a peer rank may have failed or stalled. Raise "
            "--collective-timeout if this operation is legitimately slow");
}

TEST(WatchdogTest, PipelineTransfersNameTheirPeers) {
  const std::string where = " on world rank 1";
  EXPECT_EQ(
      (Watchdog::OperationName{"pipeline send and receive", 64, "floats", &where, 2, 0}).format(),
      "pipeline send and receive of 64 floats (to world rank 2, from world rank 0) on "
      "world rank 1");
  EXPECT_EQ((Watchdog::OperationName{"barrier", 0, "", &where}).format(),
            "barrier on world rank 1");
}

TEST(WatchdogTest, FinishedAndProbedOperationsNeverExpire) {
  RecordingWatchdog recording(0.05);
  const uint64_t finished = recording.watchdog.begin({"all_gather", 1});
  recording.watchdog.finish(finished);
  std::atomic<bool> done{false};
  const uint64_t probed = recording.watchdog.begin({"all_reduce", 2}, [&] { return done.load(); });
  done = true;  // the device finished it; its owner never calls finish()
  EXPECT_EQ(recording.expired(300ms), "");
  // The probe retired `probed`, and its slot (the only free one) serves the
  // next operation; the stale ticket must not finish that one, which then
  // expires.
  recording.watchdog.begin({"reduce_scatter", 4});
  recording.watchdog.finish(probed);
  EXPECT_NE(recording.expired(2000ms).find("timeout: reduce_scatter of 4 floats"),
            std::string::npos);
}

// What the heartbeat reports: the groups with the operations entered on each,
// the open operations (oldest first), and the time outside communication.
// Tracked with the timeout off too.
TEST(WatchdogTest, SnapshotsGroupsOperationsAndIdleTime) {
  Watchdog watchdog;
  EXPECT_EQ(watchdog.begin({"all_reduce", 8}), 0u) << "neither a timeout nor tracking";
  watchdog.set_tracking(true);
  const int tensor = watchdog.register_group("tensor", {2, 3});
  const int data = watchdog.register_group("data", {1, 3});
  EXPECT_EQ(tensor, 0);
  EXPECT_EQ(data, 1);
  const std::string where = " on group 'tensor' (rank 1 of 2)";
  const uint64_t first = watchdog.begin({"all_reduce", 8, "floats", &where, -1, -1, tensor, 1});
  watchdog.finish(first);
  std::this_thread::sleep_for(30ms);
  Watchdog::Snapshot idle = watchdog.snapshot();
  EXPECT_TRUE(idle.open.empty());
  EXPECT_GE(idle.idle_seconds, 0.02);
  const uint64_t older = watchdog.begin({"all_reduce", 8, "floats", &where, -1, -1, tensor, 2});
  std::this_thread::sleep_for(10ms);
  const uint64_t newer = watchdog.begin({"pipeline send and receive", 4, "floats", nullptr, 3, 1});
  const Watchdog::Snapshot busy = watchdog.snapshot();
  ASSERT_EQ(busy.groups.size(), 2u);
  EXPECT_EQ(busy.groups[0].name, "tensor");
  EXPECT_EQ(busy.groups[0].members, (std::vector<int>{2, 3}));
  EXPECT_EQ(busy.groups[0].entered, 2u);
  EXPECT_EQ(busy.groups[1].entered, 0u);
  ASSERT_EQ(busy.open.size(), 2u);
  EXPECT_EQ(busy.open[0].what, "all_reduce of 8 floats on group 'tensor' (rank 1 of 2)");
  EXPECT_EQ(busy.open[0].sequence, 2u);
  EXPECT_GT(busy.open[0].age_seconds, busy.open[1].age_seconds);
  EXPECT_EQ(busy.open[1].group, -1);
  EXPECT_EQ(busy.open[1].to_rank, 3);
  EXPECT_EQ(busy.open[1].from_rank, 1);
  EXPECT_EQ(busy.idle_seconds, 0);
  watchdog.finish(older);
  watchdog.finish(newer);
}

}  // namespace
}  // namespace paraplan
