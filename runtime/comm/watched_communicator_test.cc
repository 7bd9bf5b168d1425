// watched_communicator_test.cc: the watched and timed wrappers around a fake
// group: every call reaches the wrapped group with its buffers, count and
// dtype (the fp32 shorthand as DType::kFloat32), and the watchdog names a
// stalled bf16 call in bf16 elements. No MPI: the fake group records calls.
#include "runtime/comm/watched_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/mpi_session.h"
#include "runtime/comm/timed_communicator.h"
#include "runtime/comm/watchdog.h"

namespace paraplan {
namespace {

using kernels::DType;

// One call as the wrapped group saw it.
struct Call {
  std::string operation;
  const void* first = nullptr;   // data, or send
  const void* second = nullptr;  // receive
  size_t count = 0;
  DType dtype = DType::kFloat32;
  bool operator==(const Call& other) const {
    return operation == other.operation && first == other.first && second == other.second &&
           count == other.count && dtype == other.dtype;
  }
};

std::ostream& operator<<(std::ostream& out, const Call& call) {
  return out << call.operation << "(" << call.first << ", " << call.second << ", " << call.count
             << ", " << kernels::dtype_name(call.dtype) << ")";
}

// A group of 2 that records every call into *calls; all_reduce sleeps for
// stall (so that a watchdog sees it expire).
class RecordingGroup final : public Communicator {
 public:
  RecordingGroup(std::vector<Call>* calls, std::chrono::milliseconds stall = {})
      : calls_(calls), stall_(stall) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  void all_reduce(void* data, size_t count, DType dtype, ReduceOp) override {
    std::this_thread::sleep_for(stall_);
    calls_->push_back({"all_reduce", data, nullptr, count, dtype});
  }
  void all_reduce(double* data, size_t count, ReduceOp) override {
    calls_->push_back({"all_reduce (doubles)", data, nullptr, count, DType::kFloat32});
  }
  void reduce_scatter(const void* send, void* receive, size_t count, DType dtype) override {
    calls_->push_back({"reduce_scatter", send, receive, count, dtype});
  }
  void all_gather(const void* send, void* receive, size_t count, DType dtype) override {
    calls_->push_back({"all_gather", send, receive, count, dtype});
  }
  void broadcast(void* data, size_t count, DType dtype, int) override {
    calls_->push_back({"broadcast", data, nullptr, count, dtype});
  }
  void barrier() override {}
  void start_all_reduce(void* data, size_t count, DType dtype) override {
    calls_->push_back({"start_all_reduce", data, nullptr, count, dtype});
  }
  void start_reduce_scatter(const void* send, void* receive, size_t count, DType dtype) override {
    calls_->push_back({"start_reduce_scatter", send, receive, count, dtype});
  }
  void start_all_gather(const void* send, void* receive, size_t count, DType dtype) override {
    calls_->push_back({"start_all_gather", send, receive, count, dtype});
  }

 private:
  std::vector<Call>* calls_;
  std::chrono::milliseconds stall_;
  std::string name_ = "data";
};

class RecordingPeers final : public PeerToPeer {
 public:
  explicit RecordingPeers(std::vector<Call>* calls) : calls_(calls) {}
  void send_receive(const void* send, size_t send_count, int, void* receive, size_t, int,
                    DType dtype, int = 0) override {
    calls_->push_back({"send_receive", send, receive, send_count, dtype});
  }
  Posted post_send(const void* data, size_t count, int, DType dtype, int = 0) override {
    calls_->push_back({"post_send", data, nullptr, count, dtype});
    return 40 + calls_->size();
  }
  // Records buffer_free where a send's buffer would be, after_send in the name.
  Posted post_receive(void* data, size_t count, int, DType dtype, int = 0,
                      void* buffer_free = nullptr, Posted after_send = 0) override {
    calls_->push_back(
        {"post_receive after " + std::to_string(after_send), buffer_free, data, count, dtype});
    return 40 + calls_->size();
  }
  void wait(Posted transfer) override {
    calls_->push_back({"wait " + std::to_string(transfer), nullptr, nullptr, 0, DType::kFloat32});
  }

 private:
  std::vector<Call>* calls_;
};

// Every operation once in bf16, then the fp32 shorthand, through group.
void call_everything(Communicator& group, std::vector<uint16_t>& bits, std::vector<float>& floats) {
  group.all_reduce(bits.data(), 8, DType::kBFloat16, ReduceOp::kSum);
  group.reduce_scatter(bits.data(), bits.data() + 4, 4, DType::kBFloat16);
  group.all_gather(bits.data(), bits.data() + 8, 4, DType::kBFloat16);
  group.broadcast(bits.data(), 3, DType::kBFloat16, 1);
  group.start_all_reduce(bits.data(), 5, DType::kBFloat16);
  group.start_reduce_scatter(bits.data(), bits.data() + 2, 2, DType::kBFloat16);
  group.start_all_gather(bits.data() + 2, bits.data(), 2, DType::kBFloat16);
  group.all_reduce(floats.data(), 6, ReduceOp::kMax);
  group.reduce_scatter(floats.data(), floats.data() + 3, 3);
  group.all_gather(floats.data() + 3, floats.data(), 3);
  group.broadcast(floats.data(), 2, 0);
}

std::vector<Call> expected_calls(std::vector<uint16_t>& bits, std::vector<float>& floats) {
  uint16_t* b = bits.data();
  float* f = floats.data();
  return {{"all_reduce", b, nullptr, 8, DType::kBFloat16},
          {"reduce_scatter", b, b + 4, 4, DType::kBFloat16},
          {"all_gather", b, b + 8, 4, DType::kBFloat16},
          {"broadcast", b, nullptr, 3, DType::kBFloat16},
          {"start_all_reduce", b, nullptr, 5, DType::kBFloat16},
          {"start_reduce_scatter", b, b + 2, 2, DType::kBFloat16},
          {"start_all_gather", b + 2, b, 2, DType::kBFloat16},
          {"all_reduce", f, nullptr, 6, DType::kFloat32},
          {"reduce_scatter", f, f + 3, 3, DType::kFloat32},
          {"all_gather", f + 3, f, 3, DType::kFloat32},
          {"broadcast", f, nullptr, 2, DType::kFloat32}};
}

TEST(WatchedCommunicator, ForwardsEveryCallWithItsDtype) {
  std::vector<Call> calls;
  WatchedCommunicator watched(std::make_unique<RecordingGroup>(&calls));
  std::vector<uint16_t> bits(16);
  std::vector<float> floats(6);
  call_everything(watched, bits, floats);
  EXPECT_EQ(calls, expected_calls(bits, floats));

  std::vector<Call> transfers;
  WatchedPeerToPeer peers(std::make_unique<RecordingPeers>(&transfers), 0);
  peers.send_receive(bits.data(), 7, 1, bits.data() + 8, 7, 1, DType::kBFloat16);
  EXPECT_EQ(
      transfers,
      (std::vector<Call>{{"send_receive", bits.data(), bits.data() + 8, 7, DType::kBFloat16}}));
  // Posted halves keep their ids through the wrapper.
  transfers.clear();
  const PeerToPeer::Posted send = peers.post_send(bits.data(), 5, 1, DType::kBFloat16, 3);
  int mark = 0;  // stands for an Ops mark: the wrapper passes it on
  const PeerToPeer::Posted receive =
      peers.post_receive(bits.data() + 8, 6, 1, DType::kBFloat16, 0, &mark, send);
  peers.wait(receive);
  peers.wait(send);
  EXPECT_EQ(transfers, (std::vector<Call>{
                           {"post_send", bits.data(), nullptr, 5, DType::kBFloat16},
                           {"post_receive after 41", &mark, bits.data() + 8, 6, DType::kBFloat16},
                           {"wait 42", nullptr, nullptr, 0, DType::kFloat32},
                           {"wait 41", nullptr, nullptr, 0, DType::kFloat32}}));
}

TEST(TimedCommunicator, ForwardsEveryCallWithItsDtypeAndCountsItsTime) {
  std::vector<Call> calls;
  double seconds = 0;
  TimedCommunicator timed(std::make_unique<RecordingGroup>(&calls), &seconds);
  std::vector<uint16_t> bits(16);
  std::vector<float> floats(6);
  call_everything(timed, bits, floats);
  EXPECT_EQ(calls, expected_calls(bits, floats));
  EXPECT_GT(seconds, 0.0);
}

// The watchdog fires once per process; ctest runs each test of this program
// in a process of its own.
TEST(WatchedCommunicator, AStalledBf16CallIsNamedInBf16Elements) {
  std::mutex mutex;
  std::string expired;
  Watchdog::instance().set_expiry_handler([&](const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex);
    expired = message;
  });
  Watchdog::instance().set_timeout(0.05, 0);
  std::vector<Call> calls;
  WatchedCommunicator watched(std::make_unique<RecordingGroup>(
      &calls, std::chrono::milliseconds(1500)));  // 30x the timeout: room for a loaded machine
  std::vector<uint16_t> bits(3072);
  watched.all_reduce(bits.data(), bits.size(), DType::kBFloat16, ReduceOp::kSum);
  Watchdog::instance().set_timeout(0, 0);
  // The handler must not outlive `expired`: back to ending the job.
  Watchdog::instance().set_expiry_handler(
      [](const std::string& message) { MpiSession::abort_job(message); });
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(expired.rfind("timeout: all_reduce of 3072 bf16 elements on group 'data' (rank 0 of "
                          "2) did not complete within 0.05 s",
                          0),
            0u)
      << expired;
}

}  // namespace
}  // namespace paraplan
