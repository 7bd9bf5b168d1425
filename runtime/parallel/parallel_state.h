// parallel_state.h: a rank's place in the plan's mesh and its process groups
// (Megatron's parallel_state): the one place that turns pp x dp x cp x tp
// into the groups every transport uses.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/transport.h"

namespace paraplan {

// A rank's place in the mesh:
// rank = ((pipeline * dp + data) * cp + context) * tp + tensor.
struct MeshCoordinates {
  int pipeline_rank = 0, data_rank = 0, tensor_rank = 0, context_rank = 0;
  int pipeline_size = 1, data_size = 1, tensor_size = 1, context_size = 1;
  // The gradient-reduction (and ZeRO) group's size and this rank's place in
  // it: the data x context ranks of one pipeline and tensor rank (Megatron's
  // data-parallel group with context parallelism).
  int gradient_rank() const { return data_rank * context_size + context_rank; }
  int gradient_size() const { return data_size * context_size; }
};

MeshCoordinates mesh_coordinates(int world_rank, int pipeline_size, int data_size, int tensor_size,
                                 int context_size = 1);
// The world rank at these coordinates; the context rank is this rank's
// unless given.
int world_rank_of(const MeshCoordinates& mesh, int pipeline_rank, int data_rank, int tensor_rank);
int world_rank_of(const MeshCoordinates& mesh, int pipeline_rank, int data_rank, int context_rank,
                  int tensor_rank);

// Every group a rank takes part in, built from the plan's mesh.
struct ProcessGroups {
  MeshCoordinates mesh;
  int world_rank = 0, world_size = 1;
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> tensor;  // same pipeline, data and context rank
  // Same pipeline and tensor rank: the data x context ranks, in the order
  // (data, context), which hold replicas of the same parameters and reduce
  // their gradients together (with context parallelism each holds other
  // tokens of the same sequences; without it, the data-parallel group).
  std::unique_ptr<Communicator> data;
  // ZeRO with zero_ngroups g: the data group split into g contiguous groups
  // of its size / g ranks (zero), and the ranks at the same position in each
  // of those groups (zero_replicas, size g).
  std::unique_ptr<Communicator> zero;
  std::unique_ptr<Communicator> zero_replicas;
  // First and last pipeline stage with the same data and tensor rank, which
  // both hold the tied embedding; null unless pipeline_size > 1 and this rank
  // is on the first or last stage.
  std::unique_ptr<Communicator> embedding;
  std::unique_ptr<PeerToPeer> peers;
  // Each group's members as world ranks, in group rank order, by group name:
  // the launcher names the member of a collective that has not arrived.
  std::map<std::string, std::vector<int>> members;
  int previous_stage_rank = -1;  // world rank, or -1 on the first stage
  int next_stage_rank = -1;      // world rank, or -1 on the last stage
  // Context parallelism: the ring of the context group (same pipeline, data
  // and tensor rank) by world rank, and the transfers it uses: `peers`, or
  // over NCCL links of its own (context_ring_peers).
  int next_context_rank = -1, previous_context_rank = -1;
  PeerToPeer* context_peers = nullptr;
  std::unique_ptr<PeerToPeer> context_ring_peers;
  // NCCL only: the device memory each NCCL communicator has taken so far,
  // by name, in the order made (NcclCommunicator::device_bytes, read when
  // asked: its initialisation, a link's warm exchange, and what the first
  // operations of each kind connected). Empty on MPI and staged groups, which
  // hold no device buffers of their own. The memory report sets it beside
  // the plan's communicator_buffers.
  std::vector<std::pair<std::string, std::function<int64_t()>>> communicator_device_bytes;
  int64_t communicator_device_bytes_total() const;
};

// Every group of this rank for a mesh of pipeline_size x data_size x
// context_size x tensor_size and ZeRO with zero_groups groups (1 when ZeRO is
// off; they divide the data x context ranks), over MPI, each
// communicator made for the transport: kMpi as MPI makes them (host buffers),
// kStaged through pinned host memory (one staging buffer shared by all),
// kNccl as NCCL communicators over the same members and peers over NCCL's
// world. Collective over MPI_COMM_WORLD (MPI initialised by an MpiSession):
// every rank calls it with the same arguments. Throws if the world size is
// not the mesh's, or zero_groups does not divide data_size x context_size.
ProcessGroups make_process_groups(Transport transport, int pipeline_size, int data_size,
                                  int tensor_size, int zero_groups, kernels::Ops& ops,
                                  int context_size = 1);

// The groups of a one-rank job without MPI (mesh 1 x 1 x 1): every group has
// one member (comm/local_communicator.h) and there are no pipeline peers.
ProcessGroups make_local_process_groups(kernels::Ops& ops);

// Calls wrap on every group that exists, always in the order world, tensor,
// data, zero, zero_replicas, embedding (collective wrappers line up across
// ranks in that order).
void for_each_group(ProcessGroups& groups,
                    const std::function<void(std::unique_ptr<Communicator>&)>& wrap);

// Wraps every group and the peers so that a collective or transfer past the
// watchdog's timeout ends the job naming the rank, group and operation
// (comm/watched_communicator.h), and registers each group's members with the
// watchdog for the launcher's heartbeat.
void watch_process_groups(ProcessGroups& groups);

}  // namespace paraplan
