// sharded_parameters_test.cc: ZeRO-3's parameter storage under mpirun (1, 2
// and 4 ranks in one ZeRO group): each rank keeps its chunks; a unit the
// stream gathers reads whole (bitwise the values loaded) until the stream
// releases it, one unit gathered ahead in two slots; a planned read of a
// unit not gathered throws, an unplanned one (evaluation) gathers on demand
// (the next unit ahead, going up the buffer) and frees it once used; what the optimizer writes
// through owned() is what the next gather reads; the memory is the shard and the resident units
// (weights) and two slots (gathered), counted by hand; a prefetch no read
// took is waited for before the shard is written.
#include "runtime/parallel/sharded_parameters.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/forwarding_communicator.h"
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
  Fixture()
      : parameters(kUnits, kElements, {true, false, false, false}, *ops, memory, *groups.zero) {}
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, kernels::DType::kFloat32);
  ProcessGroups groups = make_process_groups(Transport::kMpi, 1, testing::world_size(), 1, 1, *ops);
  MemoryTracker memory{*ops};
  ShardedParameters parameters;
};

TEST(ShardedParameters, GatheredUnitsReadWholeUntilReleasedOneGatheredAhead) {
  Fixture f;
  const int world = testing::world_size();
  const size_t unit = shard_unit_elements(world), z = static_cast<size_t>(world);
  auto padded = [&](size_t u) { return (unit_end(u) - kUnits[u].begin + unit - 1) / unit * unit; };
  size_t shard = 0;
  for (size_t u = 0; u < kUnits.size(); ++u) shard += padded(u) / z;
  const size_t slot = std::max({padded(1), padded(2), padded(3)});
  EXPECT_EQ(f.memory.current(MemoryCategory::kWeights), (shard + padded(0)) * sizeof(float));
  EXPECT_EQ(f.memory.current(MemoryCategory::kGathered), 2 * slot * sizeof(float));
  const std::vector<float> whole = whole_values(0.5f);
  f.parameters.load_whole(whole.data());
  std::vector<size_t> used;
  f.parameters.set_unit_used_listener([&used](size_t u) { used.push_back(u); });
  f.parameters.set_planned(true);
  // A forward as zero_units.h writes it: unit 0 is resident; gather 1 ahead,
  // then each read's successor once its predecessor is released.
  for (int step = 0; step < 2; ++step) {
    used.clear();
    f.parameters.gather(1);
    f.parameters.gather(2);
    for (size_t u = 0; u < kUnits.size(); ++u) {
      expect_unit(read_unit(*f.ops, f.parameters, u), whole, u);
      f.parameters.unit_used(kUnits[u].begin);
      if (u >= 1) f.parameters.release(u);
      if (u == 1) f.parameters.gather(3);
    }
    EXPECT_EQ(used, (std::vector<size_t>{0, 1, 2, 3}));
    EXPECT_EQ(f.parameters.gathers(), 3u) << "step " << step;
    EXPECT_EQ(f.parameters.num_slots(), 2u);  // one read, one ahead: the pool never grows
    // Released: a planned read throws; so do a second gather and a release of
    // a unit not gathered.
    EXPECT_THROW(f.parameters.parameter(kUnits[2].begin), std::runtime_error);
    f.parameters.gather(2);
    EXPECT_THROW(f.parameters.gather(2), std::logic_error);
    EXPECT_THROW(f.parameters.gather(0), std::logic_error);  // resident
    f.parameters.release(2);
    EXPECT_THROW(f.parameters.release(2), std::logic_error);
    f.parameters.parameters_updated();
  }
}

TEST(ShardedParameters, ReadsOutsideAStreamGatherOnDemandAndFreeOnceUsed) {
  Fixture f;
  const std::vector<float> whole = whole_values(2.0f);
  f.parameters.load_whole(whole.data());
  for (size_t u : {0, 1, 2, 3, 3, 2, 1}) {
    expect_unit(read_unit(*f.ops, f.parameters, u), whole, u);
    f.parameters.unit_used(kUnits[u].begin);
  }
  EXPECT_EQ(f.parameters.gathers(), 6u);    // every pooled read
  EXPECT_EQ(f.parameters.num_slots(), 2u);  // each freed after its use
  // Three held at once grow the pool.
  for (size_t u : {1, 2, 3}) f.parameters.gather(u);
  EXPECT_EQ(f.parameters.num_slots(), 3u);
}

// A forward's reads outside a stream (evaluation, sampling) go up the
// buffer: the first read of each pooled unit starts the next one's gather, so
// each all-gather runs beside the unit before; reads going down (or of the
// same unit again) start none. A step's stream starting drops a prefetch no
// read took, and what was read on demand.
TEST(ShardedParameters, ReadsGoingUpTheBufferGatherTheNextUnitAhead) {
  Fixture f;
  const std::vector<float> whole = whole_values(3.0f);
  f.parameters.load_whole(whole.data());
  expect_unit(read_unit(*f.ops, f.parameters, 0), whole, 0);  // resident: no gather
  f.parameters.unit_used(kUnits[0].begin);
  EXPECT_EQ(f.parameters.gathers(), 0u);
  expect_unit(read_unit(*f.ops, f.parameters, 1), whole, 1);
  EXPECT_EQ(f.parameters.gathers(), 2u);  // 1, and 2 ahead
  f.parameters.unit_used(kUnits[1].begin);
  expect_unit(read_unit(*f.ops, f.parameters, 2), whole, 2);
  EXPECT_EQ(f.parameters.gathers(), 3u);  // 2 was there; 3 ahead
  f.parameters.unit_used(kUnits[2].begin);
  expect_unit(read_unit(*f.ops, f.parameters, 3), whole, 3);
  f.parameters.unit_used(kUnits[3].begin);
  EXPECT_EQ(f.parameters.gathers(), 3u);  // the last unit: nothing ahead
  EXPECT_EQ(f.parameters.num_slots(), 2u);
  // Going down: one gather a read.
  for (size_t u : {2, 1}) {
    expect_unit(read_unit(*f.ops, f.parameters, u), whole, u);
    f.parameters.unit_used(kUnits[u].begin);
  }
  EXPECT_EQ(f.parameters.gathers(), 5u);
  // A new forward: unit 1 read (2 gathering ahead), then a step begins. Both
  // are dropped: the stream gathers them itself, and a read it did not
  // gather is its error.
  f.parameters.parameters_updated();
  expect_unit(read_unit(*f.ops, f.parameters, 1), whole, 1);
  f.parameters.set_planned(true);
  EXPECT_THROW(f.parameters.parameter(kUnits[1].begin), std::runtime_error);
  f.parameters.gather(2);
  expect_unit(read_unit(*f.ops, f.parameters, 2), whole, 2);
  f.parameters.release(2);
  EXPECT_EQ(f.parameters.num_slots(), 2u);
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

// Counts the waits for the operations started before a mark.
class MarkWaitCountingGroup final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  void wait_started_before(uint64_t mark) override {
    ++waits;
    ForwardingCommunicator::wait_started_before(mark);
  }
  int waits = 0;
};

// A prefetch no read took (unit 2, gathered ahead of a read of unit 1), or a
// unit released unread, may still read the shard on a device: it is waited
// for before anything writes the shard (the optimizer's settle_prefetches,
// load_whole), once.
TEST(ShardedParameters, AnUntakenPrefetchIsWaitedForBeforeTheShardIsWritten) {
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, kernels::DType::kFloat32);
  ProcessGroups groups = make_process_groups(Transport::kMpi, 1, testing::world_size(), 1, 1, *ops);
  auto group = std::make_unique<MarkWaitCountingGroup>(std::move(groups.zero));
  MemoryTracker memory{*ops};
  ShardedParameters parameters(kUnits, kElements, {true, false, false, false}, *ops, memory,
                               *group);
  const std::vector<float> whole = whole_values(2.0f);
  parameters.load_whole(whole.data());
  for (const bool through_load : {false, true}) {
    SCOPED_TRACE(through_load ? "load_whole" : "settle_prefetches");
    expect_unit(read_unit(*ops, parameters, 1), whole, 1);  // unit 2 gathered ahead
    parameters.unit_used(kUnits[1].begin);
    const int before = group->waits;
    if (through_load) {
      parameters.load_whole(whole.data());
      EXPECT_EQ(group->waits, before + 1);
      continue;
    }
    parameters.settle_prefetches();
    EXPECT_EQ(group->waits, before + 1);
    parameters.parameters_updated();
    EXPECT_EQ(group->waits, before + 1);  // settled once
  }
  // A unit the stream gathered and released unread: its slot is free, its
  // gather still waited for.
  parameters.set_planned(true);
  parameters.gather(2);
  parameters.release(2);
  const int before = group->waits;
  parameters.settle_prefetches();
  EXPECT_EQ(group->waits, before + 1);
}

}  // namespace
}  // namespace paraplan
