// sharded_parameters_test.cc: ZeRO-3's parameter storage under mpirun (1, 2
// and 4 ranks in one ZeRO group): each rank keeps its chunks, a unit read is
// gathered whole (bitwise the values loaded), freed once used; the next step
// follows the recorded order with one unit gathered ahead; kept units are
// gathered once a step; what the optimizer writes through owned() is what
// the next read gathers; and the memory is the shard, the resident units and
// two slots, counted by hand.
#include "runtime/parallel/sharded_parameters.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/parallel/parallel_state.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

// Units of odd lengths; the first resident (the tied embedding's).
const std::vector<GradientUnit> kUnits{{0, true}, {37, false}, {100, false}, {251, false}};
constexpr size_t kElements = 300;

size_t unit_end(size_t u) {
  return u + 1 < kUnits.size() ? kUnits[u + 1].begin : kElements;
}

std::vector<float> whole_values(float salt) {
  std::vector<float> values(kElements);
  for (size_t i = 0; i < kElements; ++i) values[i] = salt + static_cast<float>(i);
  return values;
}

// The unit's values as a read of unit u returns them.
std::vector<float> read_unit(kernels::Ops& ops, ShardedParameters& parameters, size_t u) {
  const size_t n = unit_end(u) - kUnits[u].begin;
  std::vector<float> host(n);
  ops.copy_to_host(host.data(), parameters.parameter(kUnits[u].begin), n * sizeof(float));
  return host;
}

void expect_unit(const std::vector<float>& read, const std::vector<float>& whole, size_t u) {
  for (size_t i = 0; i < read.size(); ++i)
    ASSERT_EQ(read[i], whole[kUnits[u].begin + i]) << "unit " << u << " element " << i;
}

struct Fixture {
  explicit Fixture(bool keep_gathered = false)
      : parameters(kUnits, kElements, {true, false, false, false}, keep_gathered, *ops, memory,
                   *groups.zero) {}
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, kernels::DType::kFloat32);
  ProcessGroups groups = make_process_groups(Transport::kMpi, 1, testing::world_size(), 1, 1, *ops);
  MemoryTracker memory{*ops};
  ShardedParameters parameters;
};

TEST(ShardedParameters, ReadsGatherWholeUnitsFreedAfterUseAndFollowTheRecordedOrder) {
  Fixture f;
  const int world = testing::world_size();
  const size_t unit = shard_unit_elements(world), z = static_cast<size_t>(world);
  auto padded = [&](size_t u) { return (unit_end(u) - kUnits[u].begin + unit - 1) / unit * unit; };
  size_t shard = 0;
  for (size_t u = 0; u < kUnits.size(); ++u) shard += padded(u) / z;
  const size_t slot = std::max({padded(1), padded(2), padded(3)});
  EXPECT_EQ(f.memory.current(MemoryCategory::kWeights),
            (shard + padded(0) + 2 * slot) * sizeof(float));
  const std::vector<float> whole = whole_values(0.5f);
  f.parameters.load_whole(whole.data());
  // A forward: every unit read in order, each used, then a backward in reverse.
  const std::vector<size_t> order{0, 1, 2, 3, 3, 2, 1};
  for (int step = 0; step < 2; ++step) {
    for (size_t u : order) {
      expect_unit(read_unit(*f.ops, f.parameters, u), whole, u);
      // The first pooled read: on demand alone, then with the next one
      // already gathering (the recorded order).
      if (u == 1 && f.parameters.gathers() <= 2) {
        EXPECT_EQ(f.parameters.gathers(), step == 0 ? 1u : 2u) << "step " << step;
      }
      f.parameters.unit_used(kUnits[u].begin);
    }
    // Each read of a pooled unit gathers it (6 reads; the first step on
    // demand, the second ahead of the read); the pool never grows.
    EXPECT_EQ(f.parameters.gathers(), 6u) << "step " << step;
    EXPECT_EQ(f.parameters.num_slots(), 2u);
    f.parameters.parameters_updated();
  }
}

TEST(ShardedParameters, KeptUnitsAreGatheredOnceAStep) {
  Fixture f(/*keep_gathered=*/true);
  const std::vector<float> whole = whole_values(2.0f);
  f.parameters.load_whole(whole.data());
  for (size_t u : {0, 1, 2, 3, 3, 2, 1}) {
    expect_unit(read_unit(*f.ops, f.parameters, u), whole, u);
    f.parameters.unit_used(kUnits[u].begin);
  }
  EXPECT_EQ(f.parameters.gathers(), 3u);
  EXPECT_EQ(f.parameters.num_slots(), 3u);  // every pooled unit at once
}

TEST(ShardedParameters, WhatTheOptimizerWritesIsWhatTheNextReadGathers) {
  Fixture f;
  const int rank = testing::world_rank();
  std::vector<float> whole = whole_values(0.0f);
  f.parameters.load_whole(whole.data());
  // Every rank adds 1000 to the elements it owns, as AdamW writes its chunks.
  for (size_t u = 0; u < kUnits.size(); ++u) {
    const GradientBucket& bucket = f.parameters.buckets()[u];
    const size_t first = std::min(bucket.end, bucket.begin + bucket.chunk * rank);
    const size_t last = std::min(bucket.end, first + bucket.chunk);
    for (size_t e = first; e < last; ++e) {
      float* owned =
          static_cast<float*>(f.parameters.owned(u, e, bucket.shard_offset + (e - first)));
      const float value = whole[e] + 1000.0f;
      f.ops->copy_from_host(owned, &value, sizeof(float));
    }
  }
  f.parameters.parameters_updated();
  for (float& value : whole) value += 1000.0f;
  for (size_t u = 0; u < kUnits.size(); ++u) {
    expect_unit(read_unit(*f.ops, f.parameters, u), whole, u);
    f.parameters.unit_used(kUnits[u].begin);
  }
  std::vector<float> read;
  f.parameters.read_whole(read);
  EXPECT_EQ(read, whole);
}

}  // namespace
}  // namespace paraplan
