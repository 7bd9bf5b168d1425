// watchdog_test.cc: the collective timeout thread on its own: the message of
// an expired operation, operations retired by finish() or by their done
// probe, and slot reuse that a stale ticket cannot disturb.
#include "runtime/comm/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

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

}  // namespace
}  // namespace paraplan
