// transport.h: how a rank's communicators move its buffers, chosen once per job
// from --transport, the backend and the machine, and the process groups built
// for that choice.
//
// - kMpi: MpiCommunicator on the buffers as they are; the buffers must be host
//   memory (the CPU backend).
// - kNccl: NcclCommunicator on device buffers (one GPU per rank; NCCL refuses
//   two ranks on one device). Host buffers (a loss, a norm) still go over MPI.
// - kStaged: StagedCommunicator: device -> pinned host -> MPI -> device, for
//   ranks that share a GPU or builds without NCCL.
//
// choose_transport is pure (unit-tested branch by branch); find_shared_devices
// and make_process_groups are collective over MPI_COMM_WORLD.
#pragma once

#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"

namespace paraplan {

enum class Transport { kMpi /*host buffers: CPU backend*/, kNccl, kStaged };

const char* transport_name(Transport transport);  // "mpi", "nccl", "staged"

// Whether two ranks of the job run on one physical device, and which.
struct DeviceSharing {
  bool shared = false;
  std::string detail;  // "4 ranks share GPU 0000:1b:00.0 on host x" when shared
};

struct TransportChoice {
  Transport transport = Transport::kMpi;
  std::string reason;  // one line for the log, e.g. "plain MPI on host buffers (CPU backend)"
};

// requested: "auto", "mpi", "nccl" or "staged". Throws std::invalid_argument for
// an unknown name and for an impossible request (naming what would work):
// "nccl" with the CPU backend, without NCCL compiled in, or on ranks that share
// a GPU; "mpi" with the CUDA backend (plain MPI takes host memory only).
// "auto" picks kMpi for the CPU backend; for CUDA, kNccl when NCCL is compiled
// in and no GPU is shared, else kStaged.
TransportChoice choose_transport(const std::string& requested, kernels::Backend backend,
                                 const DeviceSharing& sharing, bool nccl_compiled_in);

// True when this build has the NCCL communicator (CUDA and NCCL were found).
bool nccl_compiled_in();

// One rank's device: its host name, Ops::device_identity() ("" for the CPU)
// and its node (the lowest world rank on its machine, as MPI's shared-memory
// split finds it): two machines may report the same host name.
struct RankDevice {
  std::string host;
  std::string identity;
  int node = 0;
};

// Pure: the largest set of ranks (by world rank order) on one node with the
// same non-empty identity, described as DeviceSharing; CPU ranks never share.
DeviceSharing describe_device_sharing(const std::vector<RankDevice>& devices);

// Collective over MPI_COMM_WORLD (MPI must be initialised): gathers every
// rank's (host name, ops.device_identity(), node) and describes any sharing.
DeviceSharing find_shared_devices(const kernels::Ops& ops);

}  // namespace paraplan
