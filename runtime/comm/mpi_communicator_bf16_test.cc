// mpi_communicator_bf16_test.cc: MpiCommunicator and MpiPeerToPeer on bf16
// buffers: sums are the fp32 rank-order sum of the widened inputs rounded
// once, max propagates NaN, reduce_scatter is bitwise all_reduce's slice, and
// all_gather, broadcast and send_receive move bits exactly (NaN, infinity and
// negative zero included); the deferred start_* calls, the watched and timed
// wrappers and the one-rank groups give the same bits. Run under mpirun
// (ctest: 1, 2 and 4 ranks); collective calls come before the checks, so a
// failed expectation on one rank cannot leave the others waiting.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops.h"
#include "runtime/comm/local_communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/timed_communicator.h"
#include "runtime/comm/watched_communicator.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

using kernels::bfloat16_from_float;
using kernels::DType;
using kernels::float_from_bfloat16;
using Bits = std::vector<uint16_t>;  // a bf16 buffer

using testing::world_rank;
using testing::world_size;

std::unique_ptr<MpiCommunicator> world_group() {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::make_unique<MpiCommunicator>(comm, "world");
}

// Every rank's buffer (all of one length), concatenated in rank order, with
// plain MPI so it does not depend on the code under test.
Bits gather_from_all_ranks(const Bits& mine) {
  Bits all(mine.size() * world_size());
  MPI_Allgather(mine.data(), static_cast<int>(mine.size() * 2), MPI_BYTE, all.data(),
                static_cast<int>(mine.size() * 2), MPI_BYTE, MPI_COMM_WORLD);
  return all;
}

// Contributions of ranks 0..3 to the first elements of the sums; ranks beyond
// add zero. Each makes a wrong way of summing show:
const float kSumCases[][4] = {
    // Rounding after each addition loses every half ulp (a tie, to even: 1);
    // summed in fp32 and rounded once they add up to 1 + 2^-6 (3 ranks or more).
    {1.0f, 0x1p-8f, 0x1p-8f, 0x1p-8f},
    // 0.75 ulp over 1: rounds up to 1 + 2^-7; truncating gives 1.
    {1.0f, 0x1.8p-8f, 0.0f, 0.0f},
    // 1.5 ulp over 1: a tie, to even 1 + 2^-6; truncating gives 1 + 2^-7.
    {1.0f + 0x1p-7f, 0x1p-8f, 0.0f, 0.0f},
    // fp32 order: in rank order 2^25 + 1 loses the 1 and the sum is 1; in
    // reverse order it is 0 (4 ranks).
    {0x1p25f, 1.0f, -0x1p25f, 1.0f},
    // Negative zeros sum to negative zero.
    {-0.0f, -0.0f, -0.0f, -0.0f},
};
constexpr size_t kSumCaseCount = sizeof(kSumCases) / sizeof(kSumCases[0]);

// rank's contribution: the cases above, then random bf16 values of mixed
// magnitude (so summation order and rounding change the bits).
Bits sum_inputs(int rank, size_t count, unsigned salt) {
  std::mt19937 generator(1000u * salt + 17u * static_cast<unsigned>(rank) + 1u);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-12, 12);
  Bits values(count);
  for (size_t i = 0; i < count; ++i) {
    const float value = i < kSumCaseCount
                            ? (rank < 4 ? kSumCases[i][rank] : 0.0f)
                            : static_cast<float>(std::ldexp(unit(generator), exponent(generator)));
    values[i] = bfloat16_from_float(value);
  }
  return values;
}

// Ways to sum every rank's widened inputs: the contract's (fp32 in rank order,
// rounded once) and the wrong ones a test must tell apart from it.
enum class Summation { kRoundedOnce, kRoundedEachAddition, kTruncatedOnce, kReverseRoundedOnce };

Bits sum_of_all_ranks(size_t count, unsigned salt, Summation summation) {
  const int n = world_size();
  std::vector<Bits> inputs;
  for (int rank = 0; rank < n; ++rank) inputs.push_back(sum_inputs(rank, count, salt));
  Bits result(count);
  for (size_t i = 0; i < count; ++i) {
    const bool reverse = summation == Summation::kReverseRoundedOnce;
    float sum = float_from_bfloat16(inputs[reverse ? n - 1 : 0][i]);
    for (int k = 1; k < n; ++k) {
      sum += float_from_bfloat16(inputs[reverse ? n - 1 - k : k][i]);
      if (summation == Summation::kRoundedEachAddition) sum = kernels::round_to_bfloat16(sum);
    }
    uint32_t bits;
    std::memcpy(&bits, &sum, sizeof bits);
    result[i] = summation == Summation::kTruncatedOnce ? static_cast<uint16_t>(bits >> 16)
                                                       : bfloat16_from_float(sum);
  }
  return result;
}

size_t elements_that_differ(const Bits& a, const Bits& b) {
  size_t differ = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) differ += a[i] != b[i];
  return differ;
}

// Bit patterns that must survive every move: quiet and signalling NaNs, the
// infinities, both zeros, the smallest subnormals, the largest finite values.
const Bits kSpecialBits = {0x7fc0, 0xffc1, 0x7f81, 0x7f80, 0xff80, 0x8000,
                           0x0000, 0x0001, 0x8001, 0x7f7f, 0xff7f};

// rank's chunk of count elements: the special patterns, then rank-specific bits.
Bits chunk_of(int rank, size_t count) {
  Bits chunk(count);
  for (size_t i = 0; i < count; ++i)
    chunk[i] = i < kSpecialBits.size() ? kSpecialBits[i]
                                       : static_cast<uint16_t>(rank * 7919 + i * 31 + 0x3f00);
  return chunk;
}

// ------------------------------------------------------------------ all_reduce

TEST(MpiCommunicatorBf16, AllReduceSumIsTheFp32RankOrderSumRoundedOnce) {
  auto world = world_group();
  const int n = world->size();
  const size_t count = 10'007;  // not a multiple of 2 or 4: padded chunks; tiles of 1024
  Bits result = sum_inputs(world->rank(), count, 1);
  world->all_reduce(result.data(), count, DType::kBFloat16, ReduceOp::kSum);
  world->set_max_elements_per_call(7);  // many rounds, as counts above INT_MAX take
  Bits in_pieces = sum_inputs(world->rank(), count, 1);
  world->all_reduce(in_pieces.data(), count, DType::kBFloat16, ReduceOp::kSum);
  const Bits everyone = gather_from_all_ranks(result);

  const Bits expected = sum_of_all_ranks(count, 1, Summation::kRoundedOnce);
  EXPECT_EQ(result, expected);
  EXPECT_EQ(in_pieces, expected);
  for (int rank = 0; rank < n; ++rank)
    EXPECT_EQ(Bits(everyone.begin() + rank * count, everyone.begin() + (rank + 1) * count),
              expected)
        << "rank " << rank << " got other bits";
  // The inputs tell the contract's sum from the wrong ones (each needs enough
  // ranks to make a difference).
  if (n >= 2) {
    EXPECT_GT(elements_that_differ(expected, sum_of_all_ranks(count, 1, Summation::kTruncatedOnce)),
              0u);
    EXPECT_NE(expected[1], bfloat16_from_float(1.0f));  // 0.75 ulp rounds up
  }
  if (n >= 3) {
    EXPECT_GT(
        elements_that_differ(expected, sum_of_all_ranks(count, 1, Summation::kRoundedEachAddition)),
        0u);
    EXPECT_EQ(float_from_bfloat16(expected[0]), n == 3 ? 1.0f + 0x1p-7f : 1.0f + 0x1p-6f);
  }
  if (n >= 4) {
    EXPECT_GT(
        elements_that_differ(expected, sum_of_all_ranks(count, 1, Summation::kReverseRoundedOnce)),
        0u);
    EXPECT_EQ(float_from_bfloat16(expected[3]), 1.0f);
  }
  EXPECT_EQ(expected[4], 0x8000);  // -0
}

TEST(MpiCommunicatorBf16, AllReduceMaxInRankOrderPropagatesNaN) {
  auto world = world_group();
  const int n = world->size(), me = world->rank();
  const size_t count = 3001;
  const auto inputs = [&](int rank) {
    Bits values = sum_inputs(rank, count, 2);
    values[0] = rank == n - 1 ? 0x7fc0 : bfloat16_from_float(static_cast<float>(rank));  // NaN
    values[1] = rank == 0 ? 0xff80 : bfloat16_from_float(-1.0f);                         // -inf
    values[2] = rank == n - 1 ? 0x7f80 : bfloat16_from_float(3.0f);                      // +inf
    values[3] = 0x8000;                                                                  // -0
    return values;
  };
  Bits result = inputs(me);
  world->all_reduce(result.data(), count, DType::kBFloat16, ReduceOp::kMax);

  Bits expected = inputs(0);
  for (int rank = 1; rank < n; ++rank) {
    const Bits values = inputs(rank);
    for (size_t i = 0; i < count; ++i) {
      const float value = float_from_bfloat16(values[i]), best = float_from_bfloat16(expected[i]);
      if (value > best || std::isnan(value)) expected[i] = values[i];
    }
  }
  EXPECT_EQ(result, expected);
  EXPECT_TRUE(std::isnan(float_from_bfloat16(result[0])));
  EXPECT_EQ(result[1], n == 1 ? 0xff80 : bfloat16_from_float(-1.0f));
  EXPECT_EQ(result[2], 0x7f80);
  EXPECT_EQ(result[3], 0x8000);
}

// ------------------------------------------------------------------ reduce_scatter

TEST(MpiCommunicatorBf16, ReduceScatterIsBitwiseTheAllReduceSlice) {
  auto world = world_group();
  const size_t members = static_cast<size_t>(world->size());
  const size_t chunk = 1001, mine = static_cast<size_t>(world->rank()) * chunk;
  const Bits send = sum_inputs(world->rank(), chunk * members, 3);
  Bits sliced(chunk, 0xdead);
  world->reduce_scatter(send.data(), sliced.data(), chunk, DType::kBFloat16);
  Bits in_place = send;  // receive is this rank's own chunk of send
  world->reduce_scatter(in_place.data(), in_place.data() + mine, chunk, DType::kBFloat16);
  Bits whole = send;
  world->all_reduce(whole.data(), whole.size(), DType::kBFloat16, ReduceOp::kSum);
  world->set_max_elements_per_call(5);
  Bits in_pieces(chunk, 0xdead);
  world->reduce_scatter(send.data(), in_pieces.data(), chunk, DType::kBFloat16);

  const Bits slice(whole.begin() + mine, whole.begin() + mine + chunk);
  EXPECT_EQ(sliced, slice);
  EXPECT_EQ(Bits(in_place.begin() + mine, in_place.begin() + mine + chunk), slice);
  EXPECT_EQ(in_pieces, slice);
  const Bits expected = sum_of_all_ranks(chunk * members, 3, Summation::kRoundedOnce);
  EXPECT_EQ(slice, Bits(expected.begin() + mine, expected.begin() + mine + chunk));
}

// ------------------------------------------------------------------ moves

TEST(MpiCommunicatorBf16, AllGatherMovesBitsExactly) {
  auto world = world_group();
  const int n = world->size(), me = world->rank();
  const size_t chunk = 23;
  const Bits mine = chunk_of(me, chunk);
  Bits gathered(n * chunk, 0xdead);
  world->all_gather(mine.data(), gathered.data(), chunk, DType::kBFloat16);
  Bits in_place(n * chunk, 0xdead);
  std::copy(mine.begin(), mine.end(), in_place.begin() + me * chunk);
  world->all_gather(in_place.data() + me * chunk, in_place.data(), chunk, DType::kBFloat16);
  world->set_max_elements_per_call(4);    // strided pieces of 2-byte elements
  Bits in_pieces(n * chunk + 1, 0xdead);  // one guard element past the end
  world->all_gather(mine.data(), in_pieces.data(), chunk, DType::kBFloat16);

  Bits expected;
  for (int rank = 0; rank < n; ++rank) {
    const Bits chunk_bits = chunk_of(rank, chunk);
    expected.insert(expected.end(), chunk_bits.begin(), chunk_bits.end());
  }
  EXPECT_EQ(gathered, expected);
  EXPECT_EQ(in_place, expected);
  EXPECT_EQ(Bits(in_pieces.begin(), in_pieces.end() - 1), expected);
  EXPECT_EQ(in_pieces.back(), 0xdead);
}

TEST(MpiCommunicatorBf16, BroadcastFromEveryRootMovesBitsExactly) {
  auto world = world_group();
  for (const size_t max_per_call : {size_t{2147483647}, size_t{3}}) {
    world->set_max_elements_per_call(max_per_call);
    for (int root = 0; root < world->size(); ++root) {
      Bits data = chunk_of(world->rank(), 40);
      data.push_back(0xbeef);  // a guard element the broadcast must not touch
      world->broadcast(data.data(), 40, DType::kBFloat16, root);
      Bits expected = chunk_of(root, 40);
      expected.push_back(0xbeef);
      EXPECT_EQ(data, expected) << "root " << root << ", " << max_per_call << " per call";
    }
  }
}

TEST(MpiPeerToPeerBf16, RingMovesBitsExactlyInPieces) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MpiPeerToPeer peers(comm);
  const int n = world_size(), me = world_rank();
  const int next = (me + 1) % n, previous = (me + n - 1) % n;
  const size_t count = 10'007;
  const Bits mine = chunk_of(me, count);
  Bits whole(count, 0xdead), pieces(count + 1, 0xdead);
  peers.send_receive(mine.data(), count, next, whole.data(), count, previous, DType::kBFloat16);
  peers.set_max_elements_per_message(1000);  // 11 messages of 2-byte elements
  peers.send_receive(mine.data(), count, next, pieces.data(), count, previous, DType::kBFloat16);
  EXPECT_EQ(whole, chunk_of(previous, count));
  EXPECT_EQ(Bits(pieces.begin(), pieces.end() - 1), chunk_of(previous, count));
  EXPECT_EQ(pieces.back(), 0xdead);
}

TEST(MpiPeerToPeerBf16, CountMismatchesAreReportedInBf16Elements) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MpiPeerToPeer peers(comm);
  Bits buffer(12, 0x3f80);
  std::string error;
  // Rank 0 sends 10 bf16 elements where rank 1 expects 12.
  if (world_rank() == 0) peers.send_receive(buffer.data(), 10, 1, nullptr, 0, -1, DType::kBFloat16);
  if (world_rank() == 1) {
    try {
      peers.send_receive(nullptr, 0, -1, buffer.data(), 12, 0, DType::kBFloat16);
    } catch (const std::runtime_error& caught) {
      error = caught.what();
    }
    EXPECT_NE(error.find("on group 'peers': expected 12 bf16 elements from world rank 0 but "
                         "received 10; both sides must agree on the count"),
              std::string::npos)
        << error;
  }
}

// ------------------------------------------------------------------ deferred and wrapped

// The deferred calls, and every call through the watched and timed wrappers,
// give the blocking MpiCommunicator's bits.
TEST(MpiCommunicatorBf16, DeferredAndWrappedCallsGiveTheBlockingResults) {
  double seconds = 0;
  std::vector<std::unique_ptr<Communicator>> groups;
  groups.push_back(world_group());
  groups.push_back(std::make_unique<WatchedCommunicator>(world_group()));
  groups.push_back(std::make_unique<TimedCommunicator>(world_group(), &seconds));
  auto plain = world_group();
  const size_t members = static_cast<size_t>(world_size()), chunk = 777;
  const size_t mine = static_cast<size_t>(world_rank()) * chunk;
  const Bits send = sum_inputs(world_rank(), chunk * members, 4);
  Bits summed = send, scattered(chunk), gathered(chunk * members);
  plain->all_reduce(summed.data(), summed.size(), DType::kBFloat16, ReduceOp::kSum);
  plain->reduce_scatter(send.data(), scattered.data(), chunk, DType::kBFloat16);
  plain->all_gather(send.data(), gathered.data(), chunk, DType::kBFloat16);

  for (const std::unique_ptr<Communicator>& group : groups) {
    Bits deferred_sum = send, deferred_scatter(chunk), deferred_gather(chunk * members);
    Bits in_place = send;
    group->start_all_reduce(deferred_sum.data(), deferred_sum.size(), DType::kBFloat16);
    group->start_reduce_scatter(send.data(), deferred_scatter.data(), chunk, DType::kBFloat16);
    group->start_reduce_scatter(in_place.data(), in_place.data() + mine, chunk, DType::kBFloat16);
    group->start_all_gather(send.data(), deferred_gather.data(), chunk, DType::kBFloat16);
    group->wait_pending();
    Bits blocking_sum = send;
    group->all_reduce(blocking_sum.data(), blocking_sum.size(), DType::kBFloat16, ReduceOp::kSum);
    Bits root_bits = chunk_of(world_rank(), 50);
    group->broadcast(root_bits.data(), root_bits.size(), DType::kBFloat16, 0);
    group->barrier();

    const std::string which = group.get() == groups[0].get()   ? "mpi"
                              : group.get() == groups[1].get() ? "watched"
                                                               : "timed";
    EXPECT_EQ(deferred_sum, summed) << which;
    EXPECT_EQ(blocking_sum, summed) << which;
    EXPECT_EQ(deferred_scatter, scattered) << which;
    EXPECT_EQ(Bits(in_place.begin() + mine, in_place.begin() + mine + chunk), scattered) << which;
    EXPECT_EQ(deferred_gather, gathered) << which;
    EXPECT_EQ(root_bits, chunk_of(0, 50)) << which;
  }
  EXPECT_GT(seconds, 0.0);
  // The fp32 shorthand still reaches the wrappers' overrides.
  std::vector<float> values(5, 1.0f);
  groups[1]->all_reduce(values.data(), values.size(), ReduceOp::kSum);
  EXPECT_EQ(values, std::vector<float>(5, static_cast<float>(members)));
}

// One-rank groups copy chunks of dtype_bytes elements: nothing past them.
TEST(LocalCommunicatorBf16, CopiesWholeBf16Chunks) {
  auto ops = kernels::make_cpu_ops(1);
  LocalCommunicator group("zero", *ops);
  NoPeers peers;
  const Bits chunk = chunk_of(0, 15);
  Bits gathered(16, 0xdead), scattered(16, 0xdead), summed = chunk;
  group.all_gather(chunk.data(), gathered.data(), 15, DType::kBFloat16);
  group.reduce_scatter(chunk.data(), scattered.data(), 15, DType::kBFloat16);
  group.all_reduce(summed.data(), summed.size(), DType::kBFloat16, ReduceOp::kSum);
  EXPECT_EQ(Bits(gathered.begin(), gathered.end() - 1), chunk);
  EXPECT_EQ(gathered.back(), 0xdead);
  EXPECT_EQ(Bits(scattered.begin(), scattered.end() - 1), chunk);
  EXPECT_EQ(scattered.back(), 0xdead);
  EXPECT_EQ(summed, chunk);
  Bits none(1);
  EXPECT_THROW(peers.send_receive(none.data(), 1, 0, nullptr, 0, -1, DType::kBFloat16),
               std::logic_error);
}

}  // namespace
}  // namespace paraplan
