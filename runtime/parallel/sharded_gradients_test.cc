// sharded_gradients_test.cc: ZeRO-2's gradient storage under mpirun (1, 2 and
// 4 ranks in one ZeRO group): micro-batches of backward written unit by unit
// and released as finished give each rank the exact sum over ranks and
// micro-batches of the chunks it owns; the memory is the shard, the resident
// units and two pool slots, counted by hand; a split backward (every unit
// written before any is finished) grows the pool and still sums right;
// under bf16 storage the shard is fp32 and holds sums bf16 cannot.
#include "runtime/parallel/sharded_gradients.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/forwarding_communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/parallel/parallel_state.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

// Units of odd lengths (padding in every one); the first is written early.
const std::vector<GradientUnit> kUnits{{0, true}, {37, false}, {100, false}, {251, false}};
constexpr size_t kElements = 300;

size_t unit_end(size_t u) {
  return u + 1 < kUnits.size() ? kUnits[u + 1].begin : kElements;
}

// Small integers: every sum is exact in fp32, in any order.
float value(int rank, int micro_batch, size_t element) {
  return static_cast<float>((rank + 1) * 100 + micro_batch * 10 + static_cast<int>(element % 7));
}

// What one rank's backward of a micro-batch adds to the unit: the values
// added(element), each sum rounded to the storage dtype as the backward ops
// round it.
template <typename Added>
void add_unit(kernels::Ops& ops, ShardedGradients& gradients, size_t u, Added added) {
  const kernels::DType dtype = ops.storage_dtype();
  const size_t begin = kUnits[u].begin, n = unit_end(u) - begin;
  void* at = gradients.gradient(begin);
  std::vector<char> stored(ops.storage_bytes(n));
  std::vector<float> host(n);
  ops.copy_to_host(stored.data(), at, stored.size());
  kernels::host_to_float(host.data(), stored.data(), dtype, n);
  for (size_t i = 0; i < n; ++i) host[i] += added(begin + i);
  kernels::host_from_float(stored.data(), host.data(), dtype, n);
  ops.copy_from_host(at, stored.data(), stored.size());
}
void add_unit(kernels::Ops& ops, ShardedGradients& gradients, size_t u, int rank, int micro_batch) {
  add_unit(ops, gradients, u, [&](size_t element) { return value(rank, micro_batch, element); });
}

// The shard each rank should hold: per unit its chunk of the padded unit,
// summed over ranks and micro-batches (the padding's elements zero).
void expect_summed_shard(kernels::Ops& ops, ShardedGradients& gradients, int world,
                         int micro_batches) {
  const int rank = testing::world_rank();
  std::vector<float> shard(gradients.shard_elements());
  ops.copy_to_host(shard.data(), gradients.shard(), shard.size() * sizeof(float));
  for (const GradientBucket& bucket : gradients.buckets())
    for (size_t i = 0; i < bucket.chunk; ++i) {
      const size_t element = bucket.begin + rank * bucket.chunk + i;
      float expected = 0;
      if (element < bucket.end)
        for (int r = 0; r < world; ++r)
          for (int m = 0; m < micro_batches; ++m) expected += value(r, m, element);
      ASSERT_EQ(shard[bucket.shard_offset + i], expected) << "element " << element;
    }
}

struct Fixture {
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, kernels::DType::kFloat32);
  ProcessGroups groups = make_process_groups(Transport::kMpi, 1, testing::world_size(), 1, 1, *ops);
  MemoryTracker memory{*ops};
  ShardedGradients gradients{kUnits, kElements, {true, false, false, false},
                             *ops,   memory,    *groups.zero};
};

TEST(ShardedGradients, EachMicroBatchReducedUnitByUnitSumsExactly) {
  Fixture f;
  const int world = testing::world_size(), rank = testing::world_rank();
  const size_t unit = shard_unit_elements(world), z = static_cast<size_t>(world);
  auto padded = [&](size_t u) { return (unit_end(u) - kUnits[u].begin + unit - 1) / unit * unit; };
  // Memory: the shard, the resident unit whole, two slots of the largest
  // other unit with their receive chunks.
  size_t shard = 0;
  for (size_t u = 0; u < kUnits.size(); ++u) shard += padded(u) / z;
  const size_t slot = std::max({padded(1), padded(2), padded(3)});
  EXPECT_EQ(f.memory.current(MemoryCategory::kGradients),
            (shard + padded(0) + 2 * (slot + slot / z)) * sizeof(float));
  EXPECT_EQ(f.gradients.shard_elements(), shard);
  constexpr int kMicroBatches = 3;
  for (int step = 0; step < 2; ++step) {  // zero() starts the second afresh
    f.gradients.zero();
    for (int m = 0; m < kMicroBatches; ++m) {
      add_unit(*f.ops, f.gradients, 0, rank, m);  // the tied head, first
      for (size_t u = kUnits.size(); u-- > 1;) {
        add_unit(*f.ops, f.gradients, u, rank, m);
        f.gradients.unit_done(kUnits[u].begin);
      }
      f.gradients.unit_done(0);  // resident: reduced by finish() alone
    }
    f.gradients.finish();
    EXPECT_EQ(f.gradients.num_slots(), 2u);
    expect_summed_shard(*f.ops, f.gradients, world, kMicroBatches);
  }
}

TEST(ShardedGradients, SplitBackwardGrowsThePoolAndSumsExactly) {
  Fixture f;
  const int world = testing::world_size(), rank = testing::world_rank();
  f.gradients.zero();
  // Two micro-batches' B write every unit (the norms' gradients) before
  // their Ws finish any.
  for (int m = 0; m < 2; ++m)
    for (size_t u = kUnits.size(); u-- > 0;) add_unit(*f.ops, f.gradients, u, rank, m);
  EXPECT_EQ(f.gradients.num_slots(), kUnits.size() - 1);  // every pooled unit at once
  for (size_t u = kUnits.size(); u-- > 0;) f.gradients.unit_done(kUnits[u].begin);
  // A third micro-batch after the units were released: fresh slots.
  for (size_t u = kUnits.size(); u-- > 0;) {
    add_unit(*f.ops, f.gradients, u, rank, 2);
    f.gradients.unit_done(kUnits[u].begin);
  }
  f.gradients.finish();
  expect_summed_shard(*f.ops, f.gradients, world, 3);
}

// NCCL's marks, over MPI: each started reduce-scatter is one more, and the
// waits are recorded.
class MarkingCommunicator final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  void start_reduce_scatter(const void* send, void* receive, size_t chunk_count,
                            kernels::DType dtype) override {
    ForwardingCommunicator::start_reduce_scatter(send, receive, chunk_count, dtype);
    ++started_;
  }
  uint64_t started_mark() override { return started_; }
  void wait_started_before(uint64_t mark) override { waits.push_back(static_cast<int>(mark)); }
  void wait_pending() override { waits.push_back(-1); }
  std::vector<int> waits;  // marks waited for; -1: everything

 private:
  uint64_t started_ = 0;
};

// Taking a slot back waits for that slot's own reduce-scatter, started a
// unit earlier, not for the one just started: one runs beside each unit.
TEST(ShardedGradients, ReusingASlotWaitsForItsOwnReductionOnly) {
  Fixture f;
  MarkingCommunicator group(
      make_process_groups(Transport::kMpi, 1, testing::world_size(), 1, 1, *f.ops).zero);
  ShardedGradients gradients(kUnits, kElements, {true, false, false, false}, *f.ops, f.memory,
                             group);
  gradients.zero();
  for (size_t u = kUnits.size(); u-- > 1;) {
    add_unit(*f.ops, gradients, u, testing::world_rank(), 0);
    gradients.unit_done(kUnits[u].begin);
  }
  // Units 3 and 2 took the two slots; unit 1 took 3's back after its
  // reduce-scatter (mark 1), while 2's (mark 2) still ran.
  EXPECT_EQ(group.waits, std::vector<int>({1}));
  gradients.finish();
  EXPECT_EQ(group.waits, std::vector<int>({1, -1}));
}

// bf16 storage: each micro-batch's chunk is reduced in bf16 and added into
// the fp32 shard. Micro-batch 0 sums to 256 or 512 over the ranks and
// micro-batch 1 to 1, each exact in bf16; their sums 257 and 513 are not
// (a bf16 shard would hold 256 and 512). The resident unit sums its
// micro-batches as backward wrote them, in bf16, then lands in the shard.
// Memory: the fp32 shard, the bf16 resident unit with its receive chunk
// and two bf16 slots with theirs.
TEST(ShardedGradients, Bfloat16MicroBatchesSumInAnFp32Shard) {
  const int world = testing::world_size(), rank = testing::world_rank();
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, kernels::DType::kBFloat16);
  ProcessGroups groups = make_process_groups(Transport::kMpi, 1, world, 1, 1, *ops);
  MemoryTracker memory{*ops};
  ShardedGradients gradients{kUnits, kElements, {true, false, false, false},
                             *ops,   memory,    *groups.zero};
  const size_t unit = shard_unit_elements(world), z = static_cast<size_t>(world);
  auto padded = [&](size_t u) { return (unit_end(u) - kUnits[u].begin + unit - 1) / unit * unit; };
  size_t shard = 0;
  for (size_t u = 0; u < kUnits.size(); ++u) shard += padded(u) / z;
  const size_t slot = std::max({padded(1), padded(2), padded(3)});
  EXPECT_EQ(memory.current(MemoryCategory::kGradients),
            4 * shard + 2 * (padded(0) + padded(0) / z + 2 * (slot + slot / z)));
  auto contribution = [&](int r, int micro_batch, size_t element) {
    if (micro_batch == 0) return 256.0f / static_cast<float>(world) * (1 + element % 2);
    return r == 0 ? 1.0f : 0.0f;
  };
  gradients.zero();
  for (int m = 0; m < 2; ++m)
    for (size_t u = kUnits.size(); u-- > 0;) {
      add_unit(*ops, gradients, u, [&](size_t element) { return contribution(rank, m, element); });
      gradients.unit_done(kUnits[u].begin);
    }
  gradients.finish();
  std::vector<float> held(gradients.shard_elements());
  ops->copy_to_host(held.data(), gradients.shard(), held.size() * sizeof(float));
  for (size_t u = 0; u < kUnits.size(); ++u) {
    const GradientBucket& bucket = gradients.buckets()[u];
    for (size_t i = 0; i < bucket.chunk; ++i) {
      const size_t element = bucket.begin + rank * bucket.chunk + i;
      float expected = 0;
      if (element < bucket.end && u == 0) {
        // Each rank's two micro-batches summed in bf16, then over the ranks.
        for (int r = 0; r < world; ++r)
          expected +=
              kernels::round_to_bfloat16(contribution(r, 0, element) + contribution(r, 1, element));
        expected = kernels::round_to_bfloat16(expected);
      } else if (element < bucket.end) {
        expected = 256.0f * (1 + element % 2) + 1;
      }
      ASSERT_EQ(held[bucket.shard_offset + i], expected) << "unit " << u << " element " << element;
    }
  }
}

TEST(ShardedGradients, RefusesOffsetsOutsideAndUnitsNotRisingFromZero) {
  Fixture f;
  EXPECT_THROW(f.gradients.gradient(kElements), std::out_of_range);
  EXPECT_THROW(f.gradients.unit_done(38), std::logic_error);
  EXPECT_THROW(ShardedGradients({{5, false}}, 10, {false}, *f.ops, f.memory, *f.groups.zero),
               std::invalid_argument);
}

}  // namespace
}  // namespace paraplan
