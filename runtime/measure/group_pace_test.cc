// group_pace_test.cc: time_in_group under mpirun with 2 ranks, on pieces of
// known CPU work: rank 1 computes 1.5x as long as rank 0 before each call, so
// rank 0 waits for it at every call and rank 1 for nobody; a piece whose
// grouped runs do 1.5x its alone runs' work has ratio 1.5.
#include "runtime/measure/group_pace.h"

#include <gtest/gtest.h>

#include <iostream>
#include <memory>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/measure/span_clock.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

// Spins until this process has had `seconds` more CPU time: the same work
// whether or not another process shares the core.
void compute_for(double seconds) {
  const double until = process_cpu_seconds() + seconds;
  volatile double sink = 0;
  while (process_cpu_seconds() < until) sink = sink + 1;
}

TEST(GroupPace, TheFasterMemberWaitsAtEveryCallAndRatiosCompareComputeOnly) {
  ASSERT_EQ(testing::world_size(), 2);
  const int rank = testing::world_rank();
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &comm), MPI_SUCCESS);
  GroupCallTotals totals;
  RecordingCommunicator group(std::make_unique<MpiCommunicator>(comm, "tensor (test)"),
                              totals.recorder_totals());
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  const double base = rank == 0 ? 2e-3 : 3e-3;  // rank 1 arrives 1 ms (1.5 ms in B) late
  float value = 1;
  auto call = [&] { group.all_reduce(&value, 1, kernels::DType::kFloat32, ReduceOp::kSum); };
  double same = 0, more = 0;
  const std::vector<PacedPiece> pieces = {{.alone = [&] { compute_for(base); },
                                           .grouped = [&] { compute_for(base), call(); },
                                           .ratio = &same},
                                          {.alone = [&] { compute_for(base); },
                                           .grouped = [&] { compute_for(1.5 * base), call(); },
                                           .ratio = &more}};
  const double wait = time_in_group(*ops, group, totals, 3, 2, pieces);
  EXPECT_NEAR(same, 1.0, 0.1);
  EXPECT_NEAR(more, 1.5, 0.15);
  double waits[2] = {0, 0};
  waits[rank] = wait;
  MPI_Allreduce(MPI_IN_PLACE, waits, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  // Rank 0 waits 1 ms in A's calls and 1.5 ms in B's: 1.25 ms per call, more
  // when the machine is busy (rank 1 then takes longer to get its CPU time).
  EXPECT_GE(waits[0], 1.0e-3);
  EXPECT_LE(waits[0], 10e-3);
  EXPECT_LT(waits[1], waits[0] - 0.5e-3);
  if (rank == 0)
    std::cout << "ratios " << same << " " << more << ", wait per call " << waits[0] * 1e3
              << " ms (rank 0), " << waits[1] * 1e3 << " ms (rank 1)" << std::endl;
}

}  // namespace
}  // namespace paraplan
