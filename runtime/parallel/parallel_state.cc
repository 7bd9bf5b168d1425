// parallel_state.cc: mesh coordinates (world rank <-> pipeline, data and
// tensor rank) and the process groups of the mesh for every transport.
#include "runtime/parallel/parallel_state.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "runtime/comm/local_communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/staged_communicator.h"
#include "runtime/comm/watched_communicator.h"
#include "schema/rank_communicators.h"
#ifdef PARAPLAN_HAVE_NCCL
#include "runtime/comm/nccl_communicator.h"
#endif

namespace paraplan {
namespace {

void check_mesh_sizes(int pipeline_size, int data_size, int tensor_size, int context_size) {
  if (pipeline_size < 1 || data_size < 1 || tensor_size < 1 || context_size < 1)
    throw std::invalid_argument("mesh (pp " + std::to_string(pipeline_size) + " x dp " +
                                std::to_string(data_size) + " x cp " +
                                std::to_string(context_size) + " x tp " +
                                std::to_string(tensor_size) + "): every degree must be >= 1");
}

std::string mesh_text(const MeshCoordinates& mesh) {
  return "(pp " + std::to_string(mesh.pipeline_size) + " x dp " + std::to_string(mesh.data_size) +
         (mesh.context_size > 1 ? " x cp " + std::to_string(mesh.context_size) : "") + " x tp " +
         std::to_string(mesh.tensor_size) + ")";
}

std::string mesh_text(int pipeline_size, int data_size, int tensor_size, int context_size) {
  MeshCoordinates mesh;
  mesh.pipeline_size = pipeline_size;
  mesh.data_size = data_size;
  mesh.tensor_size = tensor_size;
  mesh.context_size = context_size;
  return mesh_text(mesh);
}

void check_group_arguments(int pipeline_size, int data_size, int tensor_size, int context_size,
                           int zero_groups) {
  if (pipeline_size < 1 || data_size < 1 || tensor_size < 1 || context_size < 1)
    throw std::invalid_argument("process groups: mesh " +
                                mesh_text(pipeline_size, data_size, tensor_size, context_size) +
                                " has a degree below 1; every degree must be >= 1");
  if (zero_groups < 1 || (data_size * context_size) % zero_groups != 0)
    throw std::invalid_argument("process groups: zero groups " + std::to_string(zero_groups) +
                                " must be >= 1 and divide the data x context-parallel ranks " +
                                std::to_string(data_size * context_size));
}

// The mesh's groups over MPI (host buffers). MPI_Comm_split is collective over
// the world: every rank calls each split, and a rank outside a group passes
// kNotInGroup and gets no communicator.
ProcessGroups make_mpi_process_groups(int pipeline_size, int data_size, int tensor_size,
                                      int context_size, int zero_groups) {
  check_group_arguments(pipeline_size, data_size, tensor_size, context_size, zero_groups);
  std::unique_ptr<MpiCommunicator> world = MpiCommunicator::world();
  const long long needed = 1LL * pipeline_size * data_size * context_size * tensor_size;
  if (needed != world->size())
    throw std::runtime_error("the plan needs " + std::to_string(needed) +
                             (needed == 1 ? " rank " : " ranks ") +
                             mesh_text(pipeline_size, data_size, tensor_size, context_size) +
                             " but mpirun started " + std::to_string(world->size()));

  ProcessGroups groups;
  groups.mesh =
      mesh_coordinates(world->rank(), pipeline_size, data_size, tensor_size, context_size);
  groups.world_rank = world->rank();
  groups.world_size = world->size();
  const MeshCoordinates& mesh = groups.mesh;
  const int p = mesh.pipeline_rank, d = mesh.data_rank, c = mesh.context_rank, t = mesh.tensor_rank;
  // The data group's rank: (data, context); its size dp x cp.
  const int g = mesh.gradient_rank(), gradient_size = mesh.gradient_size();
  groups.tensor = world->split(p * gradient_size + g, t, "tensor");
  groups.data = world->split(p * tensor_size + t, g, "data");
  const int zero_size = gradient_size / zero_groups;  // contiguous data ranks per ZeRO group
  const int data_group = p * tensor_size + t;
  groups.zero = world->split(data_group * zero_groups + g / zero_size, g % zero_size, "zero");
  groups.zero_replicas =
      world->split(data_group * zero_size + g % zero_size, g / zero_size, "zero_replicas");
  if (pipeline_size > 1) {
    const bool holds_embedding = p == 0 || p == pipeline_size - 1;
    groups.embedding = world->split(
        holds_embedding ? g * tensor_size + t : MpiCommunicator::kNotInGroup, p, "embedding");
  }
  groups.world = std::move(world);
  // Every group here is an MpiCommunicator still (the transport wraps them later).
  for_each_group(groups, [&](std::unique_ptr<Communicator>& group) {
    groups.members[group->name()] = static_cast<const MpiCommunicator&>(*group).world_ranks();
  });
  groups.peers = MpiPeerToPeer::over_world();
  if (p > 0) groups.previous_stage_rank = world_rank_of(mesh, p - 1, d, t);
  if (p < pipeline_size - 1) groups.next_stage_rank = world_rank_of(mesh, p + 1, d, t);
  if (context_size > 1) {
    groups.next_context_rank = world_rank_of(mesh, p, d, (c + 1) % context_size, t);
    groups.previous_context_rank =
        world_rank_of(mesh, p, d, (c + context_size - 1) % context_size, t);
  }
  return groups;
}

// Device buffers through pinned host memory, one staging buffer for all.
void stage_through_host(ProcessGroups& groups, kernels::Ops& ops) {
  auto staging = std::make_shared<HostStaging>(ops);
  for_each_group(groups, [&](std::unique_ptr<Communicator>& group) {
    group = std::make_unique<StagedCommunicator>(std::move(group), ops, staging);
  });
  if (groups.peers)
    groups.peers = std::make_unique<StagedPeerToPeer>(std::move(groups.peers), ops, staging);
}

#ifdef PARAPLAN_HAVE_NCCL
// The NCCL communicators made are the ones schema::rank_communicators names
// (the planner counts their buffers from it): same count, names in order.
// parallel_state_test ties the MPI groups to it; this ties the links, which
// only the NCCL path makes.
void check_against_rank_communicators(const ProcessGroups& groups, int zero_groups) {
  const MeshCoordinates& mesh = groups.mesh;
  schema::CommunicatorMesh shape;
  shape.pipeline = mesh.pipeline_size, shape.data = mesh.data_size;
  shape.context = mesh.context_size, shape.tensor = mesh.tensor_size;
  shape.zero_groups = zero_groups;
  std::vector<std::string> named;
  for (const schema::RankCommunicator& made : schema::rank_communicators(shape, groups.world_rank))
    named.push_back(made.name);
  std::vector<std::string> made;
  for (const auto& [name, bytes] : groups.communicator_device_bytes) made.push_back(name);
  // Training is right either way; only the memory prediction would miss
  // communicators, so a difference is reported, not fatal (the links' rule
  // has not run on two GPUs yet).
  if (made != named)
    std::fprintf(stderr,
                 "paraplan: warning: rank %d made %zu NCCL communicators, but "
                 "schema::rank_communicators names %zu: the plan's predicted NCCL buffers do "
                 "not cover them all (keep the two in step)\n",
                 groups.world_rank, made.size(), named.size());
}

// Device buffers over NCCL: each MPI group becomes an NCCL communicator over
// the same members (for_each_group's fixed order lines up the collective NCCL
// initialisations), the peers go over NCCL's world.
void move_device_buffers_with_nccl(ProcessGroups& groups, kernels::Ops& ops, int zero_groups) {
  if (ops.backend() != kernels::Backend::kCuda)
    throw std::invalid_argument(
        std::string("NCCL moves CUDA device buffers, but the ops are the ") +
        kernels::backend_name(ops.backend()) + " backend; use the MPI transport");
  for_each_group(groups, [&](std::unique_ptr<Communicator>& group) {
    auto* mpi = dynamic_cast<MpiCommunicator*>(group.get());
    if (mpi == nullptr)
      throw std::logic_error("move_device_buffers_with_nccl: group '" + group->name() +
                             "' is not an MpiCommunicator (wrap groups after the transport)");
    group.release();
    auto nccl =
        std::make_unique<NcclCommunicator>(std::unique_ptr<MpiCommunicator>(mpi), ops.stream());
    const NcclCommunicator* made = nccl.get();  // owned by the group from here on
    groups.communicator_device_bytes.emplace_back(nccl->name(),
                                                  [made] { return made->device_bytes(); });
    group = std::move(nccl);
  });
  if (groups.peers) {
    const MeshCoordinates& mesh = groups.mesh;
    PipelineRing ring;
    ring.index = mesh.pipeline_rank;
    ring.size = mesh.pipeline_size;
    ring.ring = mesh.gradient_rank() * mesh.tensor_size + mesh.tensor_rank;
    const int p = mesh.pipeline_size;
    ring.next = world_rank_of(mesh, (mesh.pipeline_rank + 1) % p, mesh.data_rank, mesh.tensor_rank);
    ring.previous =
        world_rank_of(mesh, (mesh.pipeline_rank + p - 1) % p, mesh.data_rank, mesh.tensor_rank);
    auto peers = std::make_unique<NcclPeerToPeer>(static_cast<NcclCommunicator&>(*groups.world),
                                                  std::move(groups.peers), ring);
    for (auto& link : peers->link_device_bytes()) groups.communicator_device_bytes.push_back(link);
    groups.peers = std::move(peers);
  }
  // The context ring's links of its own (NcclPeerToPeer links ring
  // neighbours only), made by every rank when the mesh has a context ring.
  if (groups.mesh.context_size > 1) {
    const MeshCoordinates& mesh = groups.mesh;
    PipelineRing ring;
    ring.index = mesh.context_rank;
    ring.size = mesh.context_size;
    ring.ring = (mesh.pipeline_rank * mesh.data_size + mesh.data_rank) * mesh.tensor_size +
                mesh.tensor_rank;
    ring.next = groups.next_context_rank;
    ring.previous = groups.previous_context_rank;
    auto peers = std::make_unique<NcclPeerToPeer>(static_cast<NcclCommunicator&>(*groups.world),
                                                  MpiPeerToPeer::over_world(), ring);
    for (auto& link : peers->link_device_bytes()) groups.communicator_device_bytes.push_back(link);
    groups.context_ring_peers = std::move(peers);
  }
  check_against_rank_communicators(groups, zero_groups);
}
#endif

}  // namespace

MeshCoordinates mesh_coordinates(int world_rank, int pipeline_size, int data_size, int tensor_size,
                                 int context_size) {
  check_mesh_sizes(pipeline_size, data_size, tensor_size, context_size);
  MeshCoordinates mesh;
  mesh.pipeline_size = pipeline_size;
  mesh.data_size = data_size;
  mesh.tensor_size = tensor_size;
  mesh.context_size = context_size;
  const long long world_size = 1LL * pipeline_size * data_size * context_size * tensor_size;
  if (world_rank < 0 || world_rank >= world_size)
    throw std::out_of_range("world rank " + std::to_string(world_rank) + " is outside the mesh " +
                            mesh_text(mesh) + "; valid ranks are 0.." +
                            std::to_string(world_size - 1));
  // rank = ((pipeline * dp + data) * cp + context) * tp + tensor: tensor innermost.
  mesh.tensor_rank = world_rank % tensor_size;
  mesh.context_rank = (world_rank / tensor_size) % context_size;
  mesh.data_rank = (world_rank / (tensor_size * context_size)) % data_size;
  mesh.pipeline_rank = world_rank / (tensor_size * context_size * data_size);
  return mesh;
}

int world_rank_of(const MeshCoordinates& mesh, int pipeline_rank, int data_rank, int tensor_rank) {
  return world_rank_of(mesh, pipeline_rank, data_rank, mesh.context_rank, tensor_rank);
}

int world_rank_of(const MeshCoordinates& mesh, int pipeline_rank, int data_rank, int context_rank,
                  int tensor_rank) {
  check_mesh_sizes(mesh.pipeline_size, mesh.data_size, mesh.tensor_size, mesh.context_size);
  if (pipeline_rank < 0 || pipeline_rank >= mesh.pipeline_size || data_rank < 0 ||
      data_rank >= mesh.data_size || context_rank < 0 || context_rank >= mesh.context_size ||
      tensor_rank < 0 || tensor_rank >= mesh.tensor_size)
    throw std::out_of_range(
        "coordinates (pipeline " + std::to_string(pipeline_rank) + ", data " +
        std::to_string(data_rank) + ", context " + std::to_string(context_rank) + ", tensor " +
        std::to_string(tensor_rank) + ") are outside the mesh " + mesh_text(mesh));
  return ((pipeline_rank * mesh.data_size + data_rank) * mesh.context_size + context_rank) *
             mesh.tensor_size +
         tensor_rank;
}

int64_t ProcessGroups::communicator_device_bytes_total() const {
  int64_t total = 0;
  for (const auto& [name, bytes] : communicator_device_bytes) total += bytes();
  return total;
}

void for_each_group(ProcessGroups& groups,
                    const std::function<void(std::unique_ptr<Communicator>&)>& wrap) {
  for (std::unique_ptr<Communicator>* group :
       {&groups.world, &groups.tensor, &groups.data, &groups.zero, &groups.zero_replicas,
        &groups.embedding})
    if (*group) wrap(*group);
}

ProcessGroups make_process_groups(Transport transport, int pipeline_size, int data_size,
                                  int tensor_size, int zero_groups, kernels::Ops& ops,
                                  int context_size) {
  ProcessGroups groups =
      make_mpi_process_groups(pipeline_size, data_size, tensor_size, context_size, zero_groups);
  switch (transport) {
    case Transport::kMpi:
      break;
    case Transport::kStaged:
      stage_through_host(groups, ops);
      break;
    case Transport::kNccl:
#ifdef PARAPLAN_HAVE_NCCL
      move_device_buffers_with_nccl(groups, ops, zero_groups);
      break;
#else
      throw std::logic_error(
          "make_process_groups: transport nccl, but this paraplan was built without NCCL "
          "(choose_transport refuses it)");
#endif
  }
  groups.context_peers =
      groups.context_ring_peers ? groups.context_ring_peers.get() : groups.peers.get();
  return groups;
}

ProcessGroups make_local_process_groups(kernels::Ops& ops) {
  ProcessGroups groups;
  for (auto [group, name] : {std::pair{&groups.world, "world"},
                             {&groups.tensor, "tensor"},
                             {&groups.data, "data"},
                             {&groups.zero, "zero"},
                             {&groups.zero_replicas, "zero_replicas"}})
    *group = std::make_unique<LocalCommunicator>(name, ops);
  for (const char* name : {"world", "tensor", "data", "zero", "zero_replicas"})
    groups.members[name] = {0};
  groups.peers = std::make_unique<NoPeers>();
  return groups;
}

void watch_process_groups(ProcessGroups& groups) {
  for_each_group(groups, [&](std::unique_ptr<Communicator>& group) {
    const auto members = groups.members.find(group->name());
    group = std::make_unique<WatchedCommunicator>(
        std::move(group), members != groups.members.end() ? members->second : std::vector<int>{});
  });
  const bool context_on_peers = groups.context_peers == groups.peers.get();
  if (groups.peers)
    groups.peers = std::make_unique<WatchedPeerToPeer>(std::move(groups.peers), groups.world_rank);
  if (groups.context_ring_peers)
    groups.context_ring_peers = std::make_unique<WatchedPeerToPeer>(
        std::move(groups.context_ring_peers), groups.world_rank);
  groups.context_peers = context_on_peers ? groups.peers.get() : groups.context_ring_peers.get();
}

}  // namespace paraplan
