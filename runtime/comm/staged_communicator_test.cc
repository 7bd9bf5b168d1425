// staged_communicator_test.cc: StagedCommunicator and StagedPeerToPeer over the
// CPU backend against MpiCommunicator and MpiPeerToPeer: every operation's
// result must be bitwise the plain MPI one (fp32, doubles and bf16), at counts
// that make the staging memory grow. Also the device-sharing probe. Runs under mpirun (ctest: 2
// and 4 ranks); every rank runs every test and main reduces the results so all
// ranks agree. Collective calls come before the checks, so a failed
// expectation cannot leave a rank waiting.
#include "runtime/comm/staged_communicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/transport.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

using testing::bitwise_equal;
using testing::world_rank;
using testing::world_size;

// This rank's random values (the shared helper keyed by world rank).
template <typename T>
std::vector<T> random_values(size_t count, unsigned salt) {
  return testing::random_values<T>(world_rank(), count, salt);
}

std::unique_ptr<MpiCommunicator> world_group(const char* name) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::make_unique<MpiCommunicator>(comm, name);
}

std::unique_ptr<MpiPeerToPeer> world_peers() {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::make_unique<MpiPeerToPeer>(comm);
}

// A staged communicator over the CPU backend and, beside it, the plain MPI
// communicator it must agree with. The CPU backend's "device" buffers are
// host memory, so the same vectors serve both.
class StagedCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ops_ = kernels::make_cpu_ops(1);
    plain_ = world_group("plain");
    staged_ = std::make_unique<StagedCommunicator>(world_group("staged"), *ops_);
  }

  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<MpiCommunicator> plain_;
  std::unique_ptr<StagedCommunicator> staged_;
};

// Ascending counts: the staging memory must grow to each (ragged counts pad
// the all-reduce's chunks; 2^20 + 3 runs as several all-to-alls).
const std::vector<size_t> kCounts = {1, 7, 1000, 65'537, (size_t{1} << 20) + 3};

template <typename T>
void expect_all_reduce_matches(MpiCommunicator& plain, StagedCommunicator& staged, ReduceOp op,
                               unsigned salt) {
  size_t previous_staging = staged.staging_bytes();
  for (const size_t count : kCounts) {
    std::vector<T> expected = random_values<T>(count, salt), got = expected;
    plain.all_reduce(expected.data(), count, op);
    staged.all_reduce(got.data(), count, op);
    EXPECT_TRUE(bitwise_equal(got, expected)) << count << " elements";
    if (world_size() == 1) continue;  // one member stages nothing
    EXPECT_GE(staged.staging_bytes(), count * sizeof(T));
    EXPECT_GT(staged.staging_bytes(), previous_staging) << "staging did not grow for " << count;
    previous_staging = staged.staging_bytes();
  }
}

TEST_F(StagedCommunicatorTest, AllReduceFloatSumMatchesMpiBitwise) {
  expect_all_reduce_matches<float>(*plain_, *staged_, ReduceOp::kSum, 1);
}

TEST_F(StagedCommunicatorTest, AllReduceFloatMaxMatchesMpiBitwise) {
  expect_all_reduce_matches<float>(*plain_, *staged_, ReduceOp::kMax, 2);
}

TEST_F(StagedCommunicatorTest, AllReduceDoubleSumMatchesMpiBitwise) {
  expect_all_reduce_matches<double>(*plain_, *staged_, ReduceOp::kSum, 3);
}

TEST_F(StagedCommunicatorTest, AllReduceDoubleMaxMatchesMpiBitwise) {
  expect_all_reduce_matches<double>(*plain_, *staged_, ReduceOp::kMax, 4);
}

TEST_F(StagedCommunicatorTest, MaxPropagatesNanAsMpiDoes) {
  std::vector<float> expected = random_values<float>(64, 5);
  if (world_rank() == world_size() - 1) expected[10] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> got = expected;
  plain_->all_reduce(expected.data(), expected.size(), ReduceOp::kMax);
  staged_->all_reduce(got.data(), got.size(), ReduceOp::kMax);
  EXPECT_TRUE(std::isnan(got[10]));
  EXPECT_TRUE(bitwise_equal(got, expected));
}

TEST_F(StagedCommunicatorTest, SplitCallsMatchMpiBitwise) {
  // Tiny MPI calls on both sides: the staged copy goes through the host
  // group's splitting unchanged.
  plain_->set_max_elements_per_call(5);
  static_cast<MpiCommunicator&>(staged_->host_group()).set_max_elements_per_call(5);
  std::vector<float> expected = random_values<float>(1001, 6), got = expected;
  plain_->all_reduce(expected.data(), expected.size(), ReduceOp::kSum);
  staged_->all_reduce(got.data(), got.size(), ReduceOp::kSum);
  EXPECT_TRUE(bitwise_equal(got, expected));
}

TEST_F(StagedCommunicatorTest, ReduceScatterMatchesMpiBitwise) {
  const size_t members = static_cast<size_t>(world_size());
  size_t previous_staging = 0;
  for (const size_t chunk : {size_t{1}, size_t{333}, size_t{100'001}, size_t{400'000}}) {
    const std::vector<float> send = random_values<float>(chunk * members, 7);
    std::vector<float> expected(chunk, -1.0f), got(chunk, -2.0f);
    plain_->reduce_scatter(send.data(), expected.data(), chunk);
    staged_->reduce_scatter(send.data(), got.data(), chunk);
    EXPECT_TRUE(bitwise_equal(got, expected)) << chunk << " per member";
    if (members > 1) {
      EXPECT_GT(staged_->staging_bytes(), previous_staging);
    }
    previous_staging = staged_->staging_bytes();
  }
}

TEST_F(StagedCommunicatorTest, ReduceScatterInPlaceMatchesMpiBitwise) {
  const size_t chunk = 4097, mine = static_cast<size_t>(world_rank()) * chunk;
  std::vector<float> expected = random_values<float>(chunk * world_size(), 8), got = expected;
  plain_->reduce_scatter(expected.data(), expected.data() + mine, chunk);
  staged_->reduce_scatter(got.data(), got.data() + mine, chunk);
  EXPECT_EQ(0, std::memcmp(got.data() + mine, expected.data() + mine, chunk * sizeof(float)));
}

TEST_F(StagedCommunicatorTest, AllGatherMatchesMpiBitwiseInAndOutOfPlace) {
  const size_t members = static_cast<size_t>(world_size());
  size_t previous_staging = 0;
  for (const size_t chunk : {size_t{1}, size_t{999}, size_t{250'000}, size_t{700'001}}) {
    const std::vector<float> send = random_values<float>(chunk, 9);
    std::vector<float> expected(chunk * members, -1.0f), got(chunk * members, -2.0f);
    plain_->all_gather(send.data(), expected.data(), chunk);
    staged_->all_gather(send.data(), got.data(), chunk);
    EXPECT_TRUE(bitwise_equal(got, expected)) << chunk << " per member";
    if (members > 1) {
      EXPECT_GT(staged_->staging_bytes(), previous_staging);
    }
    previous_staging = staged_->staging_bytes();

    // In place: this member's chunk already sits at its place in receive.
    std::vector<float> in_place(chunk * members, -3.0f);
    std::copy(send.begin(), send.end(), in_place.begin() + world_rank() * chunk);
    staged_->all_gather(in_place.data() + world_rank() * chunk, in_place.data(), chunk);
    EXPECT_TRUE(bitwise_equal(in_place, expected)) << chunk << " per member, in place";
  }
}

TEST_F(StagedCommunicatorTest, BroadcastFromEveryRootMatchesMpi) {
  for (int root = 0; root < world_size(); ++root) {
    std::vector<float> expected = random_values<float>(50'000, 10 + root), got = expected;
    plain_->broadcast(expected.data(), expected.size(), root);
    staged_->broadcast(got.data(), got.size(), root);
    EXPECT_TRUE(bitwise_equal(got, expected)) << "root " << root;
  }
  float value = 0;
  EXPECT_THROW(staged_->broadcast(&value, 1, world_size()), std::invalid_argument);
}

TEST_F(StagedCommunicatorTest, ZeroCountsAndBarrierComplete) {
  float unused = 1.0f;
  staged_->all_reduce(&unused, 0, ReduceOp::kSum);
  staged_->reduce_scatter(&unused, &unused, 0);
  staged_->all_gather(&unused, &unused, 0);
  staged_->broadcast(&unused, 0, 0);
  staged_->barrier();
  EXPECT_EQ(unused, 1.0f);
  EXPECT_EQ(staged_->size(), world_size());
  EXPECT_EQ(staged_->rank(), world_rank());
  EXPECT_EQ(staged_->name(), "staged");
}

// ---------------------------------------------------------------- bf16

// Random bf16 values of mixed magnitude (the bits of a bf16 buffer), with NaN,
// infinity and negative zero among them.
std::vector<uint16_t> random_bfloat16(size_t count, unsigned salt) {
  const std::vector<float> values = random_values<float>(count, salt);
  std::vector<uint16_t> bits(count);
  kernels::host_from_float(bits.data(), values.data(), kernels::DType::kBFloat16, count);
  const uint16_t special[] = {0x7fc0, 0xff80, 0x7f80, 0x8000};
  for (size_t i = 0; i < 4 && i < count; ++i) bits[count - 1 - i] = special[i];
  return bits;
}

TEST_F(StagedCommunicatorTest, Bf16AllReduceMatchesMpiBitwise) {
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    size_t previous_staging = staged_->staging_bytes();
    for (const size_t count : kCounts) {
      std::vector<uint16_t> expected = random_bfloat16(count, 40), got = expected;
      plain_->all_reduce(expected.data(), count, kernels::DType::kBFloat16, op);
      staged_->all_reduce(got.data(), count, kernels::DType::kBFloat16, op);
      EXPECT_TRUE(bitwise_equal(got, expected)) << count << " elements";
      if (world_size() == 1) continue;
      // Staged as 2-byte elements: the staging holds them, and grows for each count.
      EXPECT_GE(staged_->staging_bytes(), count * 2);
      if (op == ReduceOp::kSum) {
        EXPECT_GT(staged_->staging_bytes(), previous_staging) << count;
      }
      previous_staging = staged_->staging_bytes();
    }
  }
}

TEST_F(StagedCommunicatorTest, Bf16ReduceScatterAndAllGatherMatchMpiBitwise) {
  const size_t members = static_cast<size_t>(world_size());
  const size_t mine = static_cast<size_t>(world_rank());
  for (const size_t chunk : {size_t{1}, size_t{333}, size_t{100'001}}) {
    const std::vector<uint16_t> send = random_bfloat16(chunk * members, 41);
    std::vector<uint16_t> expected(chunk, 1), got(chunk, 2);
    plain_->reduce_scatter(send.data(), expected.data(), chunk, kernels::DType::kBFloat16);
    staged_->reduce_scatter(send.data(), got.data(), chunk, kernels::DType::kBFloat16);
    std::vector<uint16_t> in_place = send;
    staged_->reduce_scatter(in_place.data(), in_place.data() + mine * chunk, chunk,
                            kernels::DType::kBFloat16);
    std::vector<uint16_t> gathered_expected(chunk * members, 1), gathered(chunk * members, 2);
    plain_->all_gather(send.data(), gathered_expected.data(), chunk, kernels::DType::kBFloat16);
    staged_->all_gather(send.data(), gathered.data(), chunk, kernels::DType::kBFloat16);
    std::vector<uint16_t> gathered_in_place(chunk * members, 3);
    std::copy(send.begin(), send.begin() + chunk, gathered_in_place.begin() + mine * chunk);
    staged_->all_gather(gathered_in_place.data() + mine * chunk, gathered_in_place.data(), chunk,
                        kernels::DType::kBFloat16);

    EXPECT_TRUE(bitwise_equal(got, expected)) << chunk << " per member";
    EXPECT_EQ(0, std::memcmp(in_place.data() + mine * chunk, expected.data(), chunk * 2)) << chunk;
    EXPECT_TRUE(bitwise_equal(gathered, gathered_expected)) << chunk << " per member";
    EXPECT_TRUE(bitwise_equal(gathered_in_place, gathered_expected)) << chunk << ", in place";
  }
}

TEST_F(StagedCommunicatorTest, Bf16BroadcastAndDeferredCallsMatchMpiBitwise) {
  for (int root = 0; root < world_size(); ++root) {
    std::vector<uint16_t> expected = random_bfloat16(50'001, 50 + root), got = expected;
    plain_->broadcast(expected.data(), expected.size(), kernels::DType::kBFloat16, root);
    staged_->broadcast(got.data(), got.size(), kernels::DType::kBFloat16, root);
    EXPECT_TRUE(bitwise_equal(got, expected)) << "root " << root;
  }
  const size_t members = static_cast<size_t>(world_size()), chunk = 4097;
  const std::vector<uint16_t> send = random_bfloat16(chunk * members, 60);
  std::vector<uint16_t> summed = send, scattered(chunk), gathered(chunk * members);
  plain_->all_reduce(summed.data(), summed.size(), kernels::DType::kBFloat16, ReduceOp::kSum);
  plain_->reduce_scatter(send.data(), scattered.data(), chunk, kernels::DType::kBFloat16);
  plain_->all_gather(send.data(), gathered.data(), chunk, kernels::DType::kBFloat16);
  std::vector<uint16_t> deferred_sum = send, deferred_scatter(chunk),
                        deferred_gather(chunk * members);
  staged_->start_all_reduce(deferred_sum.data(), deferred_sum.size(), kernels::DType::kBFloat16);
  staged_->start_reduce_scatter(send.data(), deferred_scatter.data(), chunk,
                                kernels::DType::kBFloat16);
  staged_->start_all_gather(send.data(), deferred_gather.data(), chunk, kernels::DType::kBFloat16);
  staged_->wait_pending();
  EXPECT_TRUE(bitwise_equal(deferred_sum, summed));
  EXPECT_TRUE(bitwise_equal(deferred_scatter, scattered));
  EXPECT_TRUE(bitwise_equal(deferred_gather, gathered));
}

TEST(StagedPeerToPeer, Bf16RingMovesBitsAsMpiPeerToPeer) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto ops = kernels::make_cpu_ops(1);
  auto plain = world_peers();
  StagedPeerToPeer staged(world_peers(), *ops);
  const int next = (world_rank() + 1) % world_size();
  const int previous = (world_rank() + world_size() - 1) % world_size();
  const size_t count = 300'001;
  const std::vector<uint16_t> mine = random_bfloat16(count, 70);
  std::vector<uint16_t> expected(count + 1, 1), got(count + 1, 1);  // one guard element
  plain->send_receive(mine.data(), count, next, expected.data(), count, previous,
                      kernels::DType::kBFloat16);
  staged.send_receive(mine.data(), count, next, got.data(), count, previous,
                      kernels::DType::kBFloat16);
  EXPECT_TRUE(bitwise_equal(got, expected));
  EXPECT_EQ(got.back(), 1);
  EXPECT_EQ(expected[count - 4], 0x8000);  // the special bits arrived (-0 last but three)
}

// ---------------------------------------------------------------- peers

// A ring: every rank sends to the next and receives from the previous, with
// counts that grow the staging memory; the staged result must be the plain one.
TEST(StagedPeerToPeer, RingTransfersMatchMpiPeerToPeer) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto ops = kernels::make_cpu_ops(1);
  auto plain = world_peers();
  StagedPeerToPeer staged(world_peers(), *ops);
  const int next = (world_rank() + 1) % world_size();
  const int previous = (world_rank() + world_size() - 1) % world_size();
  for (const size_t count : {size_t{1}, size_t{1000}, size_t{300'001}}) {
    const std::vector<float> mine = random_values<float>(count, 20);
    std::vector<float> expected(count, -1.0f), got(count, -2.0f);
    plain->send_receive(mine.data(), count, next, expected.data(), count, previous,
                        kernels::DType::kFloat32);
    staged.send_receive(mine.data(), count, next, got.data(), count, previous,
                        kernels::DType::kFloat32);
    EXPECT_TRUE(bitwise_equal(got, expected)) << count << " floats";
  }
}

TEST(StagedPeerToPeer, OneSidedHalvesSkipTheOther) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto ops = kernels::make_cpu_ops(1);
  StagedPeerToPeer staged(world_peers(), *ops);
  const size_t count = 12'345;
  const std::vector<float> mine = random_values<float>(count, 21);
  std::vector<float> received(count, -1.0f);
  if (world_rank() == 0)
    staged.send_receive(mine.data(), count, 1, nullptr, 0, -1, kernels::DType::kFloat32);
  if (world_rank() == 1)
    staged.send_receive(nullptr, 0, -1, received.data(), count, 0, kernels::DType::kFloat32);
  std::vector<float> from_rank_0 = mine;
  MPI_Bcast(from_rank_0.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (world_rank() == 1) {
    EXPECT_TRUE(bitwise_equal(received, from_rank_0));
  }
}

// ---------------------------------------------------------------- device sharing

TEST(TransportGroups, CpuRanksNeverShareADevice) {
  auto ops = kernels::make_cpu_ops(1);
  const DeviceSharing sharing = find_shared_devices(*ops);
  EXPECT_FALSE(sharing.shared) << sharing.detail;
}

}  // namespace
}  // namespace paraplan
