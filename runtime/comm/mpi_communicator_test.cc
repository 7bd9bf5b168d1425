// mpi_communicator_test.cc: tests of MpiCommunicator and MpiPeerToPeer. Run under mpirun (ctest
// runs it with 1, 4 and 8 ranks); every rank runs every test, and main reduces the results so all
// ranks agree. Tests for a mesh of another world size skip. Collective calls come before the
// checks, so a failed expectation on one rank cannot leave the others waiting.
#include "runtime/comm/mpi_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

using testing::bitwise_equal;
using testing::random_values;
using testing::world_rank;
using testing::world_size;

MPI_Comm duplicate_world() {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return comm;
}

// Every rank's vector (all of the same length), concatenated in rank order, with
// plain MPI so it does not depend on the code under test.
template <typename T>
std::vector<T> gather_from_all_ranks(const std::vector<T>& mine) {
  std::vector<T> all(mine.size() * world_size());
  MPI_Allgather(mine.data(), static_cast<int>(mine.size() * sizeof(T)), MPI_BYTE, all.data(),
                static_cast<int>(mine.size() * sizeof(T)), MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

// The sum every rank must get: contributions added in rank order.
template <typename T>
std::vector<T> sum_in_rank_order(size_t count, unsigned salt = 0) {
  std::vector<T> sum = random_values<T>(0, count, salt);
  for (int rank = 1; rank < world_size(); ++rank) {
    const std::vector<T> values = random_values<T>(rank, count, salt);
    for (size_t i = 0; i < count; ++i) sum[i] += values[i];
  }
  return sum;
}

// ------------------------------------------------------------------ collectives

TEST(MpiCommunicator, AllReduceSumsAndMaxesIntegersExactly) {
  MpiCommunicator world(duplicate_world(), "world");
  const int n = world.size(), me = world.rank();
  for (const size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t(5 * n), size_t{1003}}) {
    std::vector<float> sum(count), max(count);
    for (size_t i = 0; i < count; ++i) {
      sum[i] = static_cast<float>(me * 1000 + i);
      max[i] = static_cast<float>((me + i) % n) - static_cast<float>(i);
    }
    world.all_reduce(sum.data(), count, ReduceOp::kSum);
    world.all_reduce(max.data(), count, ReduceOp::kMax);
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ(sum[i], static_cast<float>(1000 * n * (n - 1) / 2 + n * i)) << "element " << i;
      EXPECT_EQ(max[i], static_cast<float>(n - 1) - static_cast<float>(i)) << "element " << i;
    }
  }
}

TEST(MpiCommunicator, AllReduceIsBitwiseTheRankOrderSumOnEveryRank) {
  MpiCommunicator world(duplicate_world(), "world");
  const size_t count = 100'003;  // not a multiple of the group size: padded chunks
  std::vector<float> result = random_values<float>(world.rank(), count);
  world.all_reduce(result.data(), count, ReduceOp::kSum);
  std::vector<float> again = random_values<float>(world.rank(), count);
  world.all_reduce(again.data(), count, ReduceOp::kSum);
  world.set_max_elements_per_call(7);  // many rounds, as counts above INT_MAX take
  std::vector<float> in_pieces = random_values<float>(world.rank(), count);
  world.all_reduce(in_pieces.data(), count, ReduceOp::kSum);
  const std::vector<float> everyone = gather_from_all_ranks(result);

  const std::vector<float> expected = sum_in_rank_order<float>(count);
  EXPECT_TRUE(bitwise_equal(result, expected));
  EXPECT_TRUE(bitwise_equal(again, result));
  EXPECT_TRUE(bitwise_equal(in_pieces, result));
  for (int rank = 0; rank < world_size(); ++rank)
    EXPECT_EQ(std::memcmp(everyone.data() + rank * count, result.data(), count * sizeof(float)), 0)
        << "rank " << rank << " got other bits";
}

TEST(MpiCommunicator, AllReduceOfDoublesIsBitwiseTheRankOrderSum) {
  MpiCommunicator world(duplicate_world(), "world");
  for (const size_t count : {size_t{1}, size_t{4096}, size_t{12'345}}) {
    std::vector<double> result = random_values<double>(world.rank(), count, 3);
    world.all_reduce(result.data(), count, ReduceOp::kSum);
    EXPECT_TRUE(bitwise_equal(result, sum_in_rank_order<double>(count, 3))) << count;
  }
}

TEST(MpiCommunicator, AllReduceMaxPropagatesNaN) {
  MpiCommunicator world(duplicate_world(), "world");
  std::vector<float> values = {1.0f, static_cast<float>(world.rank())};
  if (world.rank() == world.size() - 1) values[0] = std::numeric_limits<float>::quiet_NaN();
  world.all_reduce(values.data(), values.size(), ReduceOp::kMax);
  EXPECT_TRUE(std::isnan(values[0]));
  EXPECT_EQ(values[1], static_cast<float>(world.size() - 1));
}

TEST(MpiCommunicator, ReduceScatterSumsEachChunkAtItsOwner) {
  MpiCommunicator world(duplicate_world(), "world");
  const int n = world.size(), me = world.rank();
  const size_t chunk = 37;
  std::vector<float> send(n * chunk);
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < chunk; ++i)
      send[j * chunk + i] = static_cast<float>(me * 100 + j * 10 + i);
  std::vector<float> receive(chunk, -1.0f);
  world.reduce_scatter(send.data(), receive.data(), chunk);
  std::vector<float> in_place = send;  // receive is this rank's own chunk of send
  world.reduce_scatter(in_place.data(), in_place.data() + me * chunk, chunk);
  world.set_max_elements_per_call(5);
  std::vector<float> in_pieces(chunk, -1.0f);
  world.reduce_scatter(send.data(), in_pieces.data(), chunk);

  for (size_t i = 0; i < chunk; ++i) {
    const float expected = static_cast<float>(100 * n * (n - 1) / 2 + n * (me * 10 + i));
    EXPECT_EQ(receive[i], expected) << "element " << i;
    EXPECT_EQ(in_place[me * chunk + i], expected) << "element " << i;
    EXPECT_EQ(in_pieces[i], expected) << "element " << i;
  }
}

TEST(MpiCommunicator, ReduceScatterGivesExactlyTheAllReduceSlice) {
  MpiCommunicator world(duplicate_world(), "world");
  const size_t chunk = 1001;
  const std::vector<float> send = random_values<float>(world.rank(), chunk * world.size(), 5);
  std::vector<float> sliced(chunk);
  world.reduce_scatter(send.data(), sliced.data(), chunk);
  std::vector<float> whole = send;
  world.all_reduce(whole.data(), whole.size(), ReduceOp::kSum);
  EXPECT_EQ(std::memcmp(sliced.data(), whole.data() + world.rank() * chunk, chunk * sizeof(float)),
            0);
}

TEST(MpiCommunicator, AllGatherPutsChunksInRankOrder) {
  MpiCommunicator world(duplicate_world(), "world");
  const int n = world.size(), me = world.rank();
  const size_t chunk = 23;
  std::vector<float> mine(chunk);
  for (size_t i = 0; i < chunk; ++i) mine[i] = static_cast<float>(me * 1000 + i);
  std::vector<float> gathered(n * chunk, -1.0f);
  world.all_gather(mine.data(), gathered.data(), chunk);
  std::vector<float> in_place(n * chunk, -1.0f);
  std::copy(mine.begin(), mine.end(), in_place.begin() + me * chunk);
  world.all_gather(in_place.data() + me * chunk, in_place.data(), chunk);
  world.set_max_elements_per_call(4);
  std::vector<float> in_pieces(n * chunk, -1.0f);
  world.all_gather(mine.data(), in_pieces.data(), chunk);
  std::vector<float> in_place_pieces(n * chunk, -1.0f);
  std::copy(mine.begin(), mine.end(), in_place_pieces.begin() + me * chunk);
  world.all_gather(in_place_pieces.data() + me * chunk, in_place_pieces.data(), chunk);

  std::vector<float> expected(n * chunk);
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < chunk; ++i) expected[j * chunk + i] = static_cast<float>(j * 1000 + i);
  EXPECT_EQ(gathered, expected);
  EXPECT_EQ(in_place, expected);
  EXPECT_EQ(in_pieces, expected);
  EXPECT_EQ(in_place_pieces, expected);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  MpiCommunicator world(duplicate_world(), "world");
  for (const size_t max_per_call : {size_t{2147483647}, size_t{3}}) {
    world.set_max_elements_per_call(max_per_call);
    for (int root = 0; root < world.size(); ++root) {
      std::vector<float> data(10, static_cast<float>(world.rank()));
      world.broadcast(data.data(), data.size(), root);
      EXPECT_EQ(data, std::vector<float>(10, static_cast<float>(root))) << "root " << root;
    }
  }
  world.barrier();
  try {
    float value = 0;
    world.broadcast(&value, 1, world.size());
    FAIL() << "no exception";
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()),
              "broadcast on group 'world': root " + std::to_string(world.size()) +
                  " is not a member; valid: 0.." + std::to_string(world.size() - 1));
  }
}

// ------------------------------------------------------------------ peer to peer

std::unique_ptr<MpiPeerToPeer> make_peers() {
  return std::make_unique<MpiPeerToPeer>(duplicate_world());
}

std::vector<float> message_from(int rank, size_t count) {
  std::vector<float> message(count);
  for (size_t i = 0; i < count; ++i) message[i] = static_cast<float>(rank * 7 + i % 1000);
  return message;
}

TEST(MpiPeerToPeer, RingOfLargeMessagesInBothDirectionsDoesNotDeadlock) {
  auto peers = make_peers();
  const int n = world_size(), me = world_rank();
  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  const size_t count = size_t{1} << 20;  // 4 MiB, far above any eager limit
  const std::vector<float> mine = message_from(me, count);
  std::vector<float> forward(count), backward(count);
  peers->send_receive(mine.data(), count, next, forward.data(), count, previous,
                      kernels::DType::kFloat32);
  peers->send_receive(mine.data(), count, previous, backward.data(), count, next,
                      kernels::DType::kFloat32);
  EXPECT_EQ(forward, message_from(previous, count));
  EXPECT_EQ(backward, message_from(next, count));
}

TEST(MpiPeerToPeer, PairsExchangeAtOnceInPieces) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  auto peers = make_peers();
  peers->set_max_elements_per_message(1000);  // 11 messages each way
  const int me = world_rank(), partner = me ^ 1;
  const size_t count = 10'007;
  const std::vector<float> mine = message_from(me, count);
  std::vector<float> received(count);
  peers->send_receive(mine.data(), count, partner, received.data(), count, partner,
                      kernels::DType::kFloat32);
  EXPECT_EQ(received, message_from(partner, count));
}

TEST(MpiPeerToPeer, OneSidedTransfersSkipTheMissingHalf) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto peers = make_peers();
  const int me = world_rank();
  const size_t count = 300'000;
  const std::vector<float> mine = message_from(me, count);
  std::vector<float> received(count, -1.0f);
  if (me == 0) peers->send_receive(mine.data(), count, 1, nullptr, 0, -1, kernels::DType::kFloat32);
  if (me == 1)
    peers->send_receive(nullptr, 0, -1, received.data(), count, 0, kernels::DType::kFloat32);
  if (me > 1) peers->send_receive(nullptr, 0, -1, nullptr, 0, -1, kernels::DType::kFloat32);
  if (me == 1) {
    EXPECT_EQ(received, message_from(0, count));
  }
}

TEST(MpiPeerToPeer, MessagesOfDifferentTagsNeverMatchEachOther) {
  // Rank 0 sends two equal-sized messages with tags 1 and 2 (small: they
  // complete before their receives are posted); rank 1 receives tag 2 first.
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto peers = make_peers();
  const int me = world_rank();
  const std::vector<float> first = message_from(10, 16), second = message_from(20, 16);
  std::vector<float> by_tag_2(16), by_tag_1(16);
  if (me == 0) {
    peers->send_receive(first.data(), 16, 1, nullptr, 0, -1, kernels::DType::kFloat32, 1);
    peers->send_receive(second.data(), 16, 1, nullptr, 0, -1, kernels::DType::kFloat32, 2);
  }
  if (me == 1) {
    peers->send_receive(nullptr, 0, -1, by_tag_2.data(), 16, 0, kernels::DType::kFloat32, 2);
    peers->send_receive(nullptr, 0, -1, by_tag_1.data(), 16, 0, kernels::DType::kFloat32, 1);
    EXPECT_EQ(by_tag_2, second);
    EXPECT_EQ(by_tag_1, first);
  }
  EXPECT_THROW(peers->send_receive(nullptr, 0, -1, nullptr, 0, -1, kernels::DType::kFloat32,
                                   PeerToPeer::kMaxPeerTags),
               std::invalid_argument);
}

TEST(MpiPeerToPeer, PostedTransfersMatchInPostingOrderWhateverOrderTheyAreWaitedOn) {
  // Every rank posts two large receives from its previous rank and two
  // sends to its next (in pieces), then waits: the second receive first,
  // the sends last. Nothing waits for anything before all are posted.
  auto peers = make_peers();
  peers->set_max_elements_per_message(100'000);
  const int n = world_size(), me = world_rank();
  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  const size_t count = 300'001;
  const std::vector<float> first = message_from(me, count), second = message_from(me + n, count);
  std::vector<float> got_first(count), got_second(count);
  const auto f32 = kernels::DType::kFloat32;
  const PeerToPeer::Posted r1 = peers->post_receive(got_first.data(), count, previous, f32, 5);
  const PeerToPeer::Posted r2 = peers->post_receive(got_second.data(), count, previous, f32, 5);
  const PeerToPeer::Posted s1 = peers->post_send(first.data(), count, next, f32, 5);
  const PeerToPeer::Posted s2 = peers->post_send(second.data(), count, next, f32, 5);
  peers->wait(r2);
  peers->wait(r1);
  peers->wait(s2);
  peers->wait(s1);
  EXPECT_EQ(got_first, message_from(previous, count));
  EXPECT_EQ(got_second, message_from(previous + n, count));
  EXPECT_THROW(peers->wait(s1), std::logic_error);  // waited on already
}

TEST(MpiPeerToPeer, PostedReceivesLandWhileTheirRankWaitsOnItsOwnSend) {
  // Rank 1 posts two receives from rank 0, then waits on a send of its own;
  // rank 0 posts the receive for it only after its two sends are done. The
  // messages are far above any eager limit, so MPI moves each only once its
  // receive is matched: rank 1 must land the two while it waits (plan.fbs
  // Transfers: a send is done once its receive is posted), else both wait
  // on each other for ever. The two land in posting order.
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto peers = make_peers();
  const int me = world_rank();
  const size_t count = size_t{1} << 20;
  const std::vector<float> first = message_from(10, count), second = message_from(20, count),
                           reply = message_from(30, count);
  std::vector<float> into_first(count), into_second(count), into_reply(count);
  const auto f32 = kernels::DType::kFloat32;
  if (me == 0) {
    const auto sent_first = peers->post_send(first.data(), count, 1, f32, 3);
    const auto sent_second = peers->post_send(second.data(), count, 1, f32, 3);
    peers->wait(sent_first);
    peers->wait(sent_second);
    peers->wait(peers->post_receive(into_reply.data(), count, 1, f32, 4));
    EXPECT_EQ(into_reply, reply);
  }
  if (me == 1) {
    const auto received_first = peers->post_receive(into_first.data(), count, 0, f32, 3);
    const auto received_second = peers->post_receive(into_second.data(), count, 0, f32, 3);
    peers->wait(peers->post_send(reply.data(), count, 0, f32, 4));
    peers->wait(received_second);
    peers->wait(received_first);
    EXPECT_EQ(into_first, first);
    EXPECT_EQ(into_second, second);
  }
}

TEST(MpiPeerToPeer, AReceiveAfterASendFromItsBufferLandsOnlyOnceTheSendIsOut) {
  // A pipeline chunk's one gradient buffer: rank 0 sends from it, then
  // receives into it (after_send). Rank 1 replies while rank 0's send is
  // still unread; the message is far above any eager limit, so MPI reads the
  // send's buffer only when rank 1 matches it. The reply must land after.
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto peers = make_peers();
  const int me = world_rank();
  const size_t count = size_t{1} << 20;
  const std::vector<float> gradient = message_from(40, count), reply = message_from(50, count);
  const auto f32 = kernels::DType::kFloat32;
  if (me == 0) {
    std::vector<float> buffer = gradient;
    const auto sent = peers->post_send(buffer.data(), count, 1, f32, 3);
    const auto received = peers->post_receive(buffer.data(), count, 1, f32, 4, nullptr, sent);
    peers->wait(received);
    peers->wait(sent);  // still owed, and only forgotten now
    EXPECT_EQ(buffer, reply);
    // Only a send, not yet waited on, may be named.
    const auto other = peers->post_receive(buffer.data(), count, 1, f32, 5);
    EXPECT_THROW(peers->post_receive(buffer.data(), count, 1, f32, 6, nullptr, other),
                 std::logic_error);
    EXPECT_THROW(peers->post_receive(buffer.data(), count, 1, f32, 6, nullptr, sent),
                 std::logic_error);
    peers->wait(other);
  }
  if (me == 1) {
    // The reply goes first and rank 0's send is matched late: without
    // after_send the reply lands in rank 0's buffer before it is read.
    const auto replied = peers->post_send(reply.data(), count, 0, f32, 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<float> into(count);
    peers->wait(peers->post_receive(into.data(), count, 0, f32, 3));
    peers->wait(replied);
    EXPECT_EQ(into, gradient);
    peers->wait(peers->post_send(reply.data(), count, 0, f32, 5));
  }
}

TEST(MpiPeerToPeer, CountsTheTwoSidesDisagreeOnAreReported) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto peers = make_peers();
  const int me = world_rank();
  std::vector<float> buffer(12, 1.0f);
  std::string shorter, longer;
  // Rank 0 sends 10 floats where rank 1 expects 12, then 12 where it expects 10.
  if (me == 0) {
    peers->send_receive(buffer.data(), 10, 1, nullptr, 0, -1, kernels::DType::kFloat32);
    peers->send_receive(buffer.data(), 12, 1, nullptr, 0, -1, kernels::DType::kFloat32);
  }
  if (me == 1) {
    try {
      peers->send_receive(nullptr, 0, -1, buffer.data(), 12, 0, kernels::DType::kFloat32);
    } catch (const std::runtime_error& error) {
      shorter = error.what();
    }
    try {
      peers->send_receive(nullptr, 0, -1, buffer.data(), 10, 0, kernels::DType::kFloat32);
    } catch (const std::runtime_error& error) {
      longer = error.what();
    }
    EXPECT_NE(shorter.find("expected 12 floats from world rank 0 but received 10"),
              std::string::npos)
        << shorter;
    EXPECT_NE(longer.find("on group 'peers': expected 10 floats from world rank 0 but "
                          "received 12; both sides must agree on the count"),
              std::string::npos)
        << longer;
  }
}

TEST(MpiPeerToPeer, RefusesPeersOutsideTheWorld) {
  auto peers = make_peers();
  float value = 0;
  EXPECT_THROW(
      peers->send_receive(&value, 1, world_size(), nullptr, 0, -1, kernels::DType::kFloat32),
      std::invalid_argument);
  EXPECT_THROW(peers->send_receive(nullptr, 0, -1, &value, 1, -2, kernels::DType::kFloat32),
               std::invalid_argument);
}

// ------------------------------------------------------------------ waiting

double process_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Ranks that wait for a late peer (a stalled one, a pipeline bubble) must not
// hold a core while they wait: on a loaded machine that core is what the late
// rank needs. The last rank arrives half a second late in a barrier, an all-reduce
// and a pipeline transfer; each waiting rank's CPU time over its wait must
// stay under a tenth of the wall time (Open MPI's blocking calls spin: 15% to
// 100% of a core, depending on how many ranks share one).
TEST(MpiCommunicator, RanksWaitingForALatePeerDoNotHoldACore) {
  if (world_size() < 2) GTEST_SKIP() << "needs a peer to wait for";
  MpiCommunicator world(duplicate_world(), "world");
  auto peers = make_peers();
  const int me = world.rank(), late = world.size() - 1;
  std::vector<float> values(1000, 1.0f);
  const std::vector<std::pair<const char*, std::function<void()>>> waits = {
      {"barrier", [&] { world.barrier(); }},
      {"all_reduce", [&] { world.all_reduce(values.data(), values.size(), ReduceOp::kSum); }},
      {"pipeline receive", [&] {
         if (me == late)
           peers->send_receive(values.data(), values.size(), 0, nullptr, 0, -1,
                               kernels::DType::kFloat32);
         if (me == 0)
           peers->send_receive(nullptr, 0, -1, values.data(), values.size(), late,
                               kernels::DType::kFloat32);
       }}};
  for (const auto& [name, wait] : waits) {
    world.barrier();
    if (me == late) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_seconds();
    wait();
    const double cpu = process_cpu_seconds() - cpu_start;
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool waited = me != late && (std::string(name) != "pipeline receive" || me == 0);
    if (waited) {
      EXPECT_GT(wall, 0.25) << name << ": rank " << me << " did not wait for the late rank";
      EXPECT_LT(cpu, 0.1 * wall) << name << ": rank " << me << " used " << cpu
                                 << " s of CPU in a wait of " << wall << " s";
    }
  }
  world.barrier();
}

}  // namespace
}  // namespace paraplan
