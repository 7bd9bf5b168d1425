// rank_communicators.cc: the communicators one rank of a mesh makes, group by
// group as runtime/parallel/parallel_state.cc splits the world and link by
// link as runtime/comm/nccl_peer_to_peer.cc's make_links pairs ring
// neighbours.
#include "schema/rank_communicators.h"

#include <stdexcept>
#include <string>

#include "schema/zero_stages.h"

namespace paraplan::schema {
namespace {

struct Coordinates {
  int p = 0, d = 0, c = 0, t = 0;
};

int rank_of(const CommunicatorMesh& mesh, int p, int d, int c, int t) {
  return ((p * mesh.data + d) * mesh.context + c) * mesh.tensor + t;
}

// One ring's links of this rank (index of size, neighbours as world ranks),
// in make_links' order: three rounds in which no rank is in two edges (even
// edges, odd edges, an odd ring's wrap-around edge), each round's edge both
// ways. Edge e joins ring ranks e and e + 1 (mod size); a ring of 2 has one.
void add_ring_links(int me, int index, int size, int next, int previous,
                    std::vector<RankCommunicator>& out) {
  if (size < 2) return;
  const int edges = size == 2 ? 1 : size;
  const auto round_of = [size](int edge) {
    return size % 2 == 1 && edge == size - 1 ? 2 : edge % 2;
  };
  const int down_edge = index < edges ? index : -1;
  const int up_edge = index > 0 || size > 2 ? (index + size - 1) % size : -1;
  for (int round = 0; round < 3; ++round) {
    int neighbour = -1;
    bool lower = false;  // this rank is the edge's ring rank e (not e + 1)
    if (down_edge >= 0 && round_of(down_edge) == round) {
      neighbour = next, lower = true;
    } else if (up_edge >= 0 && round_of(up_edge) == round) {
      neighbour = previous;
    } else {
      continue;
    }
    for (const bool downward : {true, false}) {
      RankCommunicator link;
      link.kind = CommunicatorKind::kLink;
      link.sends = downward == lower;
      const int sender = link.sends ? me : neighbour, receiver = link.sends ? neighbour : me;
      // The runtime's name for a link of either ring (NcclPeerToPeer).
      link.name = "pipeline link " + std::to_string(sender) + "->" + std::to_string(receiver);
      link.members = {sender, receiver};
      link.size = 2;
      out.push_back(std::move(link));
    }
  }
}

RankCommunicator group(std::string name, std::vector<int> members) {
  RankCommunicator made;
  made.name = std::move(name);
  made.size = static_cast<int>(members.size());
  made.members = std::move(members);
  return made;
}

void check(const CommunicatorMesh& mesh, int world_rank) {
  const std::string shape = "pp " + std::to_string(mesh.pipeline) + " x dp " +
                            std::to_string(mesh.data) + " x cp " + std::to_string(mesh.context) +
                            " x tp " + std::to_string(mesh.tensor);
  if (mesh.pipeline < 1 || mesh.data < 1 || mesh.context < 1 || mesh.tensor < 1)
    throw std::invalid_argument("rank_communicators: mesh " + shape +
                                " has a degree below 1; every degree must be >= 1");
  if (mesh.zero_groups < 1 || (mesh.data * mesh.context) % mesh.zero_groups != 0)
    throw std::invalid_argument(
        "rank_communicators: zero groups " + std::to_string(mesh.zero_groups) +
        " must be >= 1 and divide dp x cp = " + std::to_string(mesh.data * mesh.context));
  if (world_rank < 0 || world_rank >= mesh.world_size())
    throw std::invalid_argument("rank_communicators: rank " + std::to_string(world_rank) +
                                " is outside the mesh " + shape + "; valid ranks are 0.." +
                                std::to_string(mesh.world_size() - 1));
}

}  // namespace

int ring_links_per_rank(int size) {
  return size < 2 ? 0 : size == 2 ? 2 : 4;
}

std::vector<RankCommunicator> rank_communicators(const CommunicatorMesh& mesh, int world_rank) {
  check(mesh, world_rank);
  const int tp = mesh.tensor, cp = mesh.context, dp = mesh.data, pp = mesh.pipeline;
  Coordinates at;
  at.t = world_rank % tp;
  at.c = (world_rank / tp) % cp;
  at.d = (world_rank / (tp * cp)) % dp;
  at.p = world_rank / (tp * cp * dp);
  const auto data_group_rank = [&](int g) { return rank_of(mesh, at.p, g / cp, g % cp, at.t); };

  std::vector<RankCommunicator> made;
  RankCommunicator world;
  world.name = "world";
  world.kind = CommunicatorKind::kWorld;
  world.size = mesh.world_size();
  made.push_back(world);
  std::vector<int> members;
  for (int t = 0; t < tp; ++t) members.push_back(rank_of(mesh, at.p, at.d, at.c, t));
  made.push_back(group("tensor", members));
  // The data group: the data x context ranks of this pipeline and tensor
  // rank, ordered (data, context); ZeRO cuts it into zero_groups contiguous
  // groups (zero) and joins the same position of each (zero_replicas).
  const int g = at.d * cp + at.c, gradient_size = dp * cp;
  members.clear();
  for (int h = 0; h < gradient_size; ++h) members.push_back(data_group_rank(h));
  made.push_back(group("data", members));
  const bool sharded = shards_optimizer_state(mesh.zero_stage);
  made.back().device_collectives = !sharded;
  const int zero_size = gradient_size / mesh.zero_groups;
  members.clear();
  for (int h = g / zero_size * zero_size; h < (g / zero_size + 1) * zero_size; ++h)
    members.push_back(data_group_rank(h));
  made.push_back(group("zero", members));
  made.back().device_collectives = sharded;
  members.clear();
  for (int k = 0; k < mesh.zero_groups; ++k)
    members.push_back(data_group_rank(k * zero_size + g % zero_size));
  made.push_back(group("zero_replicas", members));
  made.back().device_collectives = sharded;
  if (pp > 1 && (at.p == 0 || at.p == pp - 1))
    made.push_back(group("embedding", {rank_of(mesh, 0, at.d, at.c, at.t),
                                       rank_of(mesh, pp - 1, at.d, at.c, at.t)}));
  add_ring_links(world_rank, at.p, pp, rank_of(mesh, (at.p + 1) % pp, at.d, at.c, at.t),
                 rank_of(mesh, (at.p + pp - 1) % pp, at.d, at.c, at.t), made);
  add_ring_links(world_rank, at.c, cp, rank_of(mesh, at.p, at.d, (at.c + 1) % cp, at.t),
                 rank_of(mesh, at.p, at.d, (at.c + cp - 1) % cp, at.t), made);
  return made;
}

}  // namespace paraplan::schema
