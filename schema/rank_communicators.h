// rank_communicators.h: which communicators one rank of a plan's mesh makes
// (the process groups of runtime/parallel/parallel_state.cc and the pipeline
// and context rings' two-rank links of runtime/comm/nccl_peer_to_peer.cc),
// with their members as world ranks. The one statement of that rule: the
// planner's memory model counts NCCL's buffers per communicator from it
// (planner/cost/communicator_memory.h), and the runtime's groups are checked
// against it (parallel_state_test under mpirun; a warning from the NCCL
// path at start-up where its links differ).
#pragma once

#include <string>
#include <vector>

namespace paraplan::schema {

// A plan's mesh: ranks ((pipeline * data + data_rank) * context + context_rank)
// * tensor + tensor_rank, and ZeRO's groups (1 when ZeRO is off).
struct CommunicatorMesh {
  int pipeline = 1, data = 1, context = 1, tensor = 1;
  int zero_groups = 1;
  int zero_stage = 0;  // which of data and zero reduces the gradients
  int world_size() const { return pipeline * data * context * tensor; }
};

enum class CommunicatorKind {
  kWorld,       // every rank; on NCCL only paired transfers (evaluation, checkpoints)
  kCollective,  // a process group that runs collectives on device buffers
  kLink,        // a two-rank link of a ring: one direction between neighbours
};

struct RankCommunicator {
  std::string name;  // the group's name ("tensor"), or "pipeline link 3->5"
  CommunicatorKind kind = CommunicatorKind::kCollective;
  // Members as world ranks in group rank order (a link: sender, receiver).
  // The world's are not listed (size says how many): it is every rank.
  std::vector<int> members;
  int size = 1;
  bool sends = false;  // a link: this rank is its sender (rank 0)
  // A group: whether the step runs collectives on device buffers over it
  // (the runtime's DistributedOptimizer: the data group without ZeRO, the
  // zero and zero_replicas groups with it; tensor and embedding always).
  // NCCL connects a group, and allocates its buffers, on its first one.
  bool device_collectives = true;
};

// Every communicator world_rank makes, in the order the runtime makes them:
// world, tensor, data, zero, zero_replicas, embedding (pipeline > 1, first and
// last stage only), then the pipeline ring's links (pipeline > 1: to and from
// each neighbour, two links when the ring has 2 ranks, four from 3), then the
// context ring's (context > 1, the same rule). Groups of one member are
// listed too (the runtime makes them; NCCL connects no peer in them).
// Throws std::invalid_argument on a degree below 1, zero groups that do not
// divide data x context, or a rank outside the mesh.
std::vector<RankCommunicator> rank_communicators(const CommunicatorMesh& mesh, int world_rank);

// The links of one rank of a ring of `size` ranks (NcclPeerToPeer's rule):
// 0 for a ring of 1, 2 for a ring of 2 (one edge, both directions), else 4.
int ring_links_per_rank(int size);

}  // namespace paraplan::schema
