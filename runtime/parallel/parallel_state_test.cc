// parallel_state_test.cc: the mesh coordinates and the process groups of every
// mesh of 1, 4 and 8 ranks (ctest runs it under mpirun with each), over MPI and
// staged through host memory. Every rank runs every test and main reduces the
// results so all ranks agree; tests for a mesh of another world size skip.
// Collective calls come before the checks, so a failed expectation on one rank
// cannot leave the others waiting.
#include "runtime/parallel/parallel_state.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/local_communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/staged_communicator.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

using testing::bitwise_equal;
using testing::random_values;
using testing::world_rank;
using testing::world_size;

// The CPU backend, kept for the process: groups hold a reference to it.
kernels::Ops* cpu_ops() {
  static std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  return ops.get();
}

// ------------------------------------------------------------------ coordinates

TEST(MeshCoordinates, KnownRanks) {
  const MeshCoordinates rank5 = mesh_coordinates(5, 2, 2, 2);  // (1 * 2 + 0) * 2 + 1
  EXPECT_EQ(rank5.pipeline_rank, 1);
  EXPECT_EQ(rank5.data_rank, 0);
  EXPECT_EQ(rank5.tensor_rank, 1);
  EXPECT_EQ(rank5.pipeline_size, 2);
  EXPECT_EQ(rank5.data_size, 2);
  EXPECT_EQ(rank5.tensor_size, 2);
  const MeshCoordinates rank6 = mesh_coordinates(6, 4, 2, 1);
  EXPECT_EQ(rank6.pipeline_rank, 3);
  EXPECT_EQ(rank6.data_rank, 0);
  EXPECT_EQ(rank6.tensor_rank, 0);
  const MeshCoordinates rank7 = mesh_coordinates(7, 1, 4, 2);
  EXPECT_EQ(rank7.pipeline_rank, 0);
  EXPECT_EQ(rank7.data_rank, 3);
  EXPECT_EQ(rank7.tensor_rank, 1);
}

TEST(MeshCoordinates, RoundTripEveryRankOfSeveralMeshes) {
  for (const auto& [pp, dp, tp] : std::vector<std::tuple<int, int, int>>{
           {1, 1, 1}, {2, 2, 2}, {4, 2, 1}, {1, 4, 2}, {3, 5, 7}, {8, 1, 1}, {1, 1, 8}}) {
    int expected_rank = 0;
    for (int p = 0; p < pp; ++p)
      for (int d = 0; d < dp; ++d)
        for (int t = 0; t < tp; ++t, ++expected_rank) {
          const MeshCoordinates mesh = mesh_coordinates(expected_rank, pp, dp, tp);
          EXPECT_EQ(mesh.pipeline_rank, p);
          EXPECT_EQ(mesh.data_rank, d);
          EXPECT_EQ(mesh.tensor_rank, t);
          EXPECT_EQ(world_rank_of(mesh, p, d, t), expected_rank);
        }
  }
}

TEST(MeshCoordinates, RefusesRanksAndDegreesOutsideTheMesh) {
  EXPECT_THROW(mesh_coordinates(8, 2, 2, 2), std::out_of_range);
  EXPECT_THROW(mesh_coordinates(-1, 2, 2, 2), std::out_of_range);
  EXPECT_THROW(mesh_coordinates(0, 0, 2, 2), std::invalid_argument);
  const MeshCoordinates mesh = mesh_coordinates(0, 2, 2, 2);
  EXPECT_THROW(world_rank_of(mesh, 2, 0, 0), std::out_of_range);
  EXPECT_THROW(world_rank_of(mesh, 0, 0, -1), std::out_of_range);
  try {
    mesh_coordinates(9, 2, 2, 2);
    FAIL() << "no exception";
  } catch (const std::out_of_range& error) {
    EXPECT_STREQ(error.what(),
                 "world rank 9 is outside the mesh (pp 2 x dp 2 x tp 2); valid ranks are 0..7");
  }
}

// ------------------------------------------------------------------ process groups

struct MeshCase {
  int pp, dp, tp, zero_groups;
};

std::string mesh_case_name(const ::testing::TestParamInfo<MeshCase>& info) {
  const MeshCase& m = info.param;
  return "pp" + std::to_string(m.pp) + "_dp" + std::to_string(m.dp) + "_tp" + std::to_string(m.tp) +
         "_zero" + std::to_string(m.zero_groups);
}

class MpiGroupsTest : public ::testing::TestWithParam<MeshCase> {};

// World ranks of a group's members, in group rank order (each member contributes
// its world rank through the group's own all_gather).
std::vector<int> members_of(Communicator& group) {
  const float mine = static_cast<float>(world_rank());
  std::vector<float> all(group.size(), -1.0f);
  group.all_gather(&mine, all.data(), 1);
  return std::vector<int>(all.begin(), all.end());
}

TEST_P(MpiGroupsTest, EveryGroupHasTheRanksOfTheMesh) {
  const MeshCase m = GetParam();
  if (m.pp * m.dp * m.tp != world_size())
    GTEST_SKIP() << "needs " << m.pp * m.dp * m.tp << " ranks";
  ProcessGroups groups =
      make_process_groups(Transport::kMpi, m.pp, m.dp, m.tp, m.zero_groups, *cpu_ops());
  const MeshCoordinates& mesh = groups.mesh;
  const int p = mesh.pipeline_rank, d = mesh.data_rank, t = mesh.tensor_rank;

  // Collective part first, in the same order on every rank.
  const std::vector<int> world = members_of(*groups.world);
  const std::vector<int> tensor = members_of(*groups.tensor);
  const std::vector<int> data = members_of(*groups.data);
  const std::vector<int> zero = members_of(*groups.zero);
  const std::vector<int> zero_replicas = members_of(*groups.zero_replicas);
  std::vector<int> embedding;
  if (groups.embedding) embedding = members_of(*groups.embedding);
  double data_sum = world_rank();
  groups.data->all_reduce(&data_sum, 1, ReduceOp::kSum);
  float from_previous = -1.0f, from_next = -1.0f;
  const float mine = static_cast<float>(world_rank());
  groups.peers->send_receive(&mine, 1, groups.next_stage_rank, &from_previous, 1,
                             groups.previous_stage_rank,
                             kernels::DType::kFloat32);  // forward: activations
  groups.peers->send_receive(&mine, 1, groups.previous_stage_rank, &from_next, 1,
                             groups.next_stage_rank,
                             kernels::DType::kFloat32);  // backward: gradients

  EXPECT_EQ(groups.world_rank, world_rank());
  EXPECT_EQ(groups.world_size, world_size());
  const MeshCoordinates expected_mesh = mesh_coordinates(world_rank(), m.pp, m.dp, m.tp);
  EXPECT_EQ(p, expected_mesh.pipeline_rank);
  EXPECT_EQ(d, expected_mesh.data_rank);
  EXPECT_EQ(t, expected_mesh.tensor_rank);

  std::vector<int> expected_world(world_size());
  for (int r = 0; r < world_size(); ++r) expected_world[r] = r;
  std::vector<int> expected_tensor, expected_data, expected_zero, expected_replicas;
  for (int k = 0; k < m.tp; ++k) expected_tensor.push_back(world_rank_of(mesh, p, d, k));
  for (int k = 0; k < m.dp; ++k) expected_data.push_back(world_rank_of(mesh, p, k, t));
  const int zero_size = m.dp / m.zero_groups;
  for (int k = 0; k < zero_size; ++k)
    expected_zero.push_back(world_rank_of(mesh, p, d / zero_size * zero_size + k, t));
  for (int k = 0; k < m.zero_groups; ++k)
    expected_replicas.push_back(world_rank_of(mesh, p, k * zero_size + d % zero_size, t));
  EXPECT_EQ(world, expected_world);
  EXPECT_EQ(tensor, expected_tensor);
  EXPECT_EQ(data, expected_data);
  EXPECT_EQ(zero, expected_zero);
  EXPECT_EQ(zero_replicas, expected_replicas);
  EXPECT_EQ(groups.world->name(), "world");
  EXPECT_EQ(groups.tensor->rank(), t);
  EXPECT_EQ(groups.data->rank(), d);
  EXPECT_EQ(groups.zero->rank(), d % zero_size);
  EXPECT_EQ(groups.zero_replicas->rank(), d / zero_size);
  double expected_sum = 0;
  for (int rank : expected_data) expected_sum += rank;
  EXPECT_EQ(data_sum, expected_sum);

  const bool holds_embedding = m.pp > 1 && (p == 0 || p == m.pp - 1);
  EXPECT_EQ(groups.embedding != nullptr, holds_embedding);
  if (holds_embedding) {
    EXPECT_EQ(embedding, (std::vector<int>{world_rank_of(mesh, 0, d, t),
                                           world_rank_of(mesh, m.pp - 1, d, t)}));
    EXPECT_EQ(groups.embedding->rank(), p == 0 ? 0 : 1);
    EXPECT_EQ(groups.embedding->name(), "embedding");
  }

  EXPECT_EQ(groups.previous_stage_rank, p > 0 ? world_rank_of(mesh, p - 1, d, t) : -1);
  EXPECT_EQ(groups.next_stage_rank, p < m.pp - 1 ? world_rank_of(mesh, p + 1, d, t) : -1);
  EXPECT_EQ(from_previous, static_cast<float>(groups.previous_stage_rank));
  EXPECT_EQ(from_next, static_cast<float>(groups.next_stage_rank));
}

INSTANTIATE_TEST_SUITE_P(Meshes, MpiGroupsTest,
                         ::testing::Values(MeshCase{1, 1, 1, 1}, MeshCase{1, 4, 1, 1},
                                           MeshCase{1, 4, 1, 2}, MeshCase{2, 2, 1, 1},
                                           MeshCase{4, 1, 1, 1}, MeshCase{1, 2, 2, 2},
                                           MeshCase{2, 1, 2, 1}, MeshCase{1, 1, 4, 1},
                                           MeshCase{2, 2, 2, 1}, MeshCase{2, 2, 2, 2},
                                           MeshCase{4, 2, 1, 1}, MeshCase{4, 2, 1, 2},
                                           MeshCase{1, 4, 2, 2}, MeshCase{8, 1, 1, 1},
                                           MeshCase{2, 4, 1, 4}, MeshCase{1, 8, 1, 4}),
                         mesh_case_name);

TEST(MpiGroups, RefusesAWorldOfAnotherSize) {
  const int n = world_size();
  try {
    make_process_groups(Transport::kMpi, 2, n, 1, 1, *cpu_ops());
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), "the plan needs " + std::to_string(2 * n) +
                                             " ranks (pp 2 x dp " + std::to_string(n) +
                                             " x tp 1) but mpirun started " + std::to_string(n));
  }
  EXPECT_THROW(make_process_groups(Transport::kMpi, 1, n, 1, n + 1, *cpu_ops()),
               std::invalid_argument);
}

// ------------------------------------------------------------------ transports

TEST(TransportGroups, StagedGroupsWrapEveryGroupAndShareOneStaging) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks (a group of one stages nothing)";
  auto ops = kernels::make_cpu_ops(1);
  const int dp = world_size(), zero_groups = world_size() % 2 == 0 ? 2 : 1;
  ProcessGroups staged = make_process_groups(Transport::kStaged, 1, dp, 1, zero_groups, *ops);
  ProcessGroups plain = make_process_groups(Transport::kMpi, 1, dp, 1, zero_groups, *ops);
  for (Communicator* group : {staged.world.get(), staged.tensor.get(), staged.data.get(),
                              staged.zero.get(), staged.zero_replicas.get()}) {
    ASSERT_NE(group, nullptr);
    EXPECT_NE(dynamic_cast<StagedCommunicator*>(group), nullptr) << group->name();
  }
  EXPECT_EQ(staged.embedding, nullptr);  // pp = 1
  EXPECT_NE(dynamic_cast<StagedPeerToPeer*>(staged.peers.get()), nullptr);
  for (Communicator* group : {plain.world.get(), plain.data.get(), plain.zero.get()})
    EXPECT_NE(dynamic_cast<MpiCommunicator*>(group), nullptr) << group->name();
  EXPECT_NE(dynamic_cast<MpiPeerToPeer*>(plain.peers.get()), nullptr);

  std::vector<float> expected = random_values<float>(world_rank(), 200'003, 30), got = expected;
  plain.data->all_reduce(expected.data(), expected.size(), ReduceOp::kSum);
  staged.data->all_reduce(got.data(), got.size(), ReduceOp::kSum);
  EXPECT_TRUE(bitwise_equal(got, expected));
  // The data group's staging grew the world's too: one buffer per rank.
  EXPECT_GE(static_cast<StagedCommunicator&>(*staged.world).staging_bytes(),
            got.size() * sizeof(float));
}

TEST(LocalGroups, EveryGroupHasOneMemberAndThereAreNoPeers) {
  ProcessGroups groups = make_local_process_groups(*cpu_ops());
  for (Communicator* group : {groups.world.get(), groups.tensor.get(), groups.data.get(),
                              groups.zero.get(), groups.zero_replicas.get()}) {
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->size(), 1) << group->name();
    EXPECT_EQ(group->rank(), 0) << group->name();
  }
  EXPECT_EQ(groups.embedding, nullptr);
  EXPECT_EQ(groups.tensor->name(), "tensor");
  float value = 1.0f;
  EXPECT_THROW(groups.peers->send_receive(&value, 1, 0, nullptr, 0, -1, kernels::DType::kFloat32),
               std::logic_error);
}

}  // namespace
}  // namespace paraplan
