// transport.cc: choosing the transport (pure), finding ranks that share a
// device (an MPI all-gather of host names and device identities), and building
// the process groups for the chosen transport.
#include "runtime/comm/transport.h"

#include <unistd.h>

#include <climits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/comm/staged_communicator.h"
#ifdef PARAPLAN_HAVE_NCCL
#include "runtime/comm/nccl_communicator.h"
#endif

namespace paraplan {

namespace {

const char kStagedPinned[] = "staged MPI through pinned host memory";

TransportChoice chosen(Transport transport, std::string reason) {
  return TransportChoice{transport, std::move(reason)};
}

}  // namespace

const char* transport_name(Transport transport) {
  switch (transport) {
    case Transport::kMpi:
      return "mpi";
    case Transport::kNccl:
      return "nccl";
    case Transport::kStaged:
      return "staged";
  }
  return "unknown";
}

bool nccl_compiled_in() {
#ifdef PARAPLAN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

TransportChoice choose_transport(const std::string& requested, kernels::Backend backend,
                                 const DeviceSharing& sharing, bool nccl_compiled_in) {
  if (requested != "auto" && requested != "mpi" && requested != "nccl" && requested != "staged")
    throw std::invalid_argument("--transport: unknown transport '" + requested +
                                "'; valid: auto, mpi, nccl, staged");
  if (backend == kernels::Backend::kCpu) {
    if (requested == "auto")
      return chosen(Transport::kMpi, "plain MPI on host buffers (CPU backend)");
    if (requested == "mpi") return chosen(Transport::kMpi, "plain MPI on host buffers (requested)");
    if (requested == "staged")
      return chosen(Transport::kStaged,
                    "staged MPI through host staging buffers (requested; the CPU backend's "
                    "buffers are host memory already, so this only adds copies)");
    throw std::invalid_argument(
        "--transport nccl needs --backend cuda: NCCL moves device buffers and the CPU backend "
        "has none; use --transport auto (or mpi) with --backend cpu");
  }

  // The CUDA backend: every buffer of the model is device memory.
  if (requested == "mpi")
    throw std::invalid_argument(
        "--transport mpi cannot move --backend cuda buffers: plain MPI takes host memory and "
        "these are device memory; use --transport auto, nccl or staged");
  if (requested == "staged")
    return chosen(Transport::kStaged, std::string(kStagedPinned) + " (requested)");
  if (requested == "nccl") {
    if (!nccl_compiled_in)
      throw std::invalid_argument(
          "--transport nccl: this paraplan was built without NCCL (nccl.h and libnccl were not "
          "found at configure time); use --transport staged (or auto), or rebuild with NCCL "
          "installed");
    if (sharing.shared)
      throw std::invalid_argument("--transport nccl: " + sharing.detail +
                                  ", and NCCL needs one GPU per rank; start at most one rank per "
                                  "GPU, or use --transport staged (or auto), which stages "
                                  "through pinned host memory");
    return chosen(Transport::kNccl, "NCCL on device buffers (requested)");
  }
  if (sharing.shared)
    return chosen(Transport::kStaged, std::string(kStagedPinned) + " (" + sharing.detail +
                                          "; NCCL needs one GPU per rank)");
  if (!nccl_compiled_in)
    return chosen(Transport::kStaged,
                  std::string(kStagedPinned) + " (this paraplan was built without NCCL)");
  return chosen(Transport::kNccl, "NCCL on device buffers (one GPU per rank)");
}

DeviceSharing describe_device_sharing(const std::vector<RankDevice>& devices) {
  // Ranks per (host, node, device), keyed in order of each device's first
  // rank so that ties name the device of the lowest rank.
  using Key = std::tuple<std::string, int, std::string>;
  std::map<Key, int> ranks_on;
  std::vector<Key> first_seen;
  for (const RankDevice& device : devices) {
    if (device.identity.empty()) continue;  // the CPU backend: ranks share cores, not a device
    const Key key{device.host, device.node, device.identity};
    if (ranks_on[key]++ == 0) first_seen.push_back(key);
  }
  const Key* busiest = nullptr;
  int shared_devices = 0;
  for (const auto& key : first_seen) {
    if (ranks_on[key] < 2) continue;
    ++shared_devices;
    if (busiest == nullptr || ranks_on[key] > ranks_on[*busiest]) busiest = &key;
  }
  DeviceSharing sharing;
  if (busiest == nullptr) return sharing;
  sharing.shared = true;
  sharing.detail = std::to_string(ranks_on[*busiest]) + " ranks share GPU " +
                   std::get<2>(*busiest) + " on host " + std::get<0>(*busiest);
  if (shared_devices > 1)
    sharing.detail += " (and " + std::to_string(shared_devices - 1) + " more shared " +
                      (shared_devices == 2 ? "GPU" : "GPUs") + ")";
  return sharing;
}

DeviceSharing find_shared_devices(const kernels::Ops& ops) {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) != 0)
    throw std::runtime_error("finding ranks that share a device: gethostname failed");
  // Each rank's record is "host\0identity"; lengths first, then the records.
  std::string mine = std::string(host) + '\0' + ops.device_identity();
  int world_size = 0;
  PARAPLAN_MPI_CHECK("world", "comm_size", MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  const int my_length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(world_size)), offsets(lengths.size());
  PARAPLAN_MPI_CHECK(
      "world", "allgather (device identity lengths)",
      MPI_Allgather(&my_length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD));
  int total = 0;
  for (size_t rank = 0; rank < lengths.size(); ++rank) {
    offsets[rank] = total;
    total += lengths[rank];
  }
  std::string all(static_cast<size_t>(total), '\0');
  PARAPLAN_MPI_CHECK("world", "allgatherv (device identities)",
                     MPI_Allgatherv(mine.data(), my_length, MPI_CHAR, all.data(), lengths.data(),
                                    offsets.data(), MPI_CHAR, MPI_COMM_WORLD));
  // Each rank's machine (host names may repeat across machines: cloned VMs,
  // containers given one --hostname).
  const int node = machine_place().first_world_rank;
  std::vector<int> nodes(lengths.size());
  PARAPLAN_MPI_CHECK("world", "allgather (nodes)",
                     MPI_Allgather(&node, 1, MPI_INT, nodes.data(), 1, MPI_INT, MPI_COMM_WORLD));
  std::vector<RankDevice> devices;
  for (size_t rank = 0; rank < lengths.size(); ++rank) {
    const std::string record =
        all.substr(static_cast<size_t>(offsets[rank]), static_cast<size_t>(lengths[rank]));
    const size_t separator = record.find('\0');
    devices.push_back(
        RankDevice{record.substr(0, separator), record.substr(separator + 1), nodes[rank]});
  }
  return describe_device_sharing(devices);
}

}  // namespace paraplan
