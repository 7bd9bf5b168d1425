// rank_communicators_test.cc: the groups make_process_groups builds under
// mpirun (4 and 8 ranks; meshes with pp, dp, tp, cp and ZeRO groups) against
// schema::rank_communicators, the one statement the planner counts NCCL's
// buffers from: the same groups by name, each with the same members in the
// same order, and the ring links' peers the rings' neighbours. Collective
// calls come before the checks, so a failed expectation on one rank cannot
// leave the others waiting.
#include "schema/rank_communicators.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/parallel/parallel_state.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

using testing::world_rank;
using testing::world_size;

kernels::Ops* cpu_ops() {
  static std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  return ops.get();
}

// World ranks of a group's members in group rank order, through the group.
std::vector<int> members_of(Communicator& group) {
  const float mine = static_cast<float>(world_rank());
  std::vector<float> all(group.size(), -1.0f);
  group.all_gather(&mine, all.data(), 1);
  return std::vector<int>(all.begin(), all.end());
}

struct MeshCase {
  int pp, dp, cp, tp, zero_groups;
};

class RankCommunicatorsTest : public ::testing::TestWithParam<MeshCase> {};

TEST_P(RankCommunicatorsTest, TheRuntimesGroupsAreTheOnesTheFunctionNames) {
  const MeshCase m = GetParam();
  if (m.pp * m.dp * m.cp * m.tp != world_size())
    GTEST_SKIP() << "needs " << m.pp * m.dp * m.cp * m.tp << " ranks";
  ProcessGroups groups =
      make_process_groups(Transport::kMpi, m.pp, m.dp, m.tp, m.zero_groups, *cpu_ops(), m.cp);
  std::map<std::string, std::vector<int>> built;
  for_each_group(groups, [&](std::unique_ptr<Communicator>& group) {
    built[group->name()] = members_of(*group);
  });

  schema::CommunicatorMesh mesh;
  mesh.pipeline = m.pp, mesh.data = m.dp, mesh.context = m.cp, mesh.tensor = m.tp;
  mesh.zero_groups = m.zero_groups;
  const std::vector<schema::RankCommunicator> named =
      schema::rank_communicators(mesh, world_rank());
  std::map<std::string, std::vector<int>> expected;
  std::set<int> pipeline_peers, context_peers;
  int links = 0;
  for (const schema::RankCommunicator& made : named) {
    switch (made.kind) {
      case schema::CommunicatorKind::kWorld: {
        std::vector<int> everyone;
        for (int r = 0; r < made.size; ++r) everyone.push_back(r);
        expected[made.name] = everyone;
        break;
      }
      case schema::CommunicatorKind::kCollective:
        expected[made.name] = made.members;
        EXPECT_EQ(made.size, static_cast<int>(made.members.size())) << made.name;
        break;
      case schema::CommunicatorKind::kLink: {
        ++links;
        const int peer = made.sends ? made.members[1] : made.members[0];
        EXPECT_EQ(made.members[made.sends ? 0 : 1], world_rank()) << made.name;
        // The first links are the pipeline ring's, then the context ring's.
        const int pipeline_links = schema::ring_links_per_rank(m.pp);
        (links <= pipeline_links ? pipeline_peers : context_peers).insert(peer);
        break;
      }
    }
  }
  EXPECT_EQ(built, expected);
  EXPECT_EQ(groups.members, expected);  // what the watchdog registers
  EXPECT_EQ(links, schema::ring_links_per_rank(m.pp) + schema::ring_links_per_rank(m.cp));

  // The rings' neighbours (wrapping around, as the NCCL links do).
  const MeshCoordinates& at = groups.mesh;
  std::set<int> pipeline_neighbours, context_neighbours;
  if (m.pp > 1)
    for (const int step : {1, m.pp - 1})
      pipeline_neighbours.insert(world_rank_of(at, (at.pipeline_rank + step) % m.pp, at.data_rank,
                                               at.context_rank, at.tensor_rank));
  if (m.cp > 1) {
    context_neighbours = {groups.next_context_rank, groups.previous_context_rank};
  }
  EXPECT_EQ(pipeline_peers, pipeline_neighbours);
  EXPECT_EQ(context_peers, context_neighbours);
}

std::string mesh_name(const ::testing::TestParamInfo<MeshCase>& info) {
  const MeshCase& m = info.param;
  return "pp" + std::to_string(m.pp) + "_dp" + std::to_string(m.dp) + "_cp" + std::to_string(m.cp) +
         "_tp" + std::to_string(m.tp) + "_zero" + std::to_string(m.zero_groups);
}

INSTANTIATE_TEST_SUITE_P(Meshes, RankCommunicatorsTest,
                         ::testing::Values(
                             // 4 ranks
                             MeshCase{4, 1, 1, 1, 1}, MeshCase{2, 2, 1, 1, 1},
                             MeshCase{1, 2, 1, 2, 2}, MeshCase{1, 1, 4, 1, 1},
                             MeshCase{2, 1, 2, 1, 1}, MeshCase{1, 4, 1, 1, 2},
                             // 8 ranks
                             MeshCase{8, 1, 1, 1, 1}, MeshCase{2, 2, 1, 2, 2},
                             MeshCase{2, 1, 2, 2, 1}, MeshCase{1, 2, 2, 2, 4},
                             MeshCase{1, 4, 2, 1, 2}, MeshCase{4, 1, 1, 2, 1},
                             MeshCase{1, 1, 8, 1, 1}, MeshCase{2, 4, 1, 1, 4}),
                         mesh_name);

TEST(RankCommunicators, RefusesWhatNoMeshHas) {
  schema::CommunicatorMesh mesh;
  mesh.data = 4, mesh.zero_groups = 3;
  EXPECT_THROW(schema::rank_communicators(mesh, 0), std::invalid_argument);
  mesh.zero_groups = 2;
  EXPECT_THROW(schema::rank_communicators(mesh, 4), std::invalid_argument);
  mesh.tensor = 0;
  EXPECT_THROW(schema::rank_communicators(mesh, 0), std::invalid_argument);
}

}  // namespace
}  // namespace paraplan
