// communicator_memory.cc: NCCL's buffers per communicator and per rank
// (communicator_memory.h states the formula and its assumptions; the NCCL_*
// variables are read with the job: planner/job/nccl_settings.h).
#include "planner/cost/communicator_memory.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace paraplan {
namespace {

constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS
constexpr int kSteps = 8;         // NCCL_STEPS: slots of a connection's buffer

int power_of_two_up(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// Ring channels C: the device's, within [NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS].
int ring_channels(const NcclDeviceDefaults& device, const NcclSettings& settings,
                  bool across_nodes) {
  const int found = across_nodes ? device.ring_channels_across_nodes : device.ring_channels_in_node;
  return std::min(kMaxChannels,
                  std::max(settings.min_channels, std::min(settings.max_channels, found)));
}

// A collective group's ring (and NVLS) buffers on this rank, from whether
// the group spans nodes and how many of its members share this rank's node.
int64_t collective_bytes(const NcclDeviceDefaults& device, const NcclSettings& settings,
                         bool across_nodes, int in_my_node) {
  int64_t bytes = ring_channels(device, settings, across_nodes) * settings.connection_bytes();
  if (device.nvls_channels > 0 && settings.nvls_enable != 0 && in_my_node >= 2) {
    const int channels = settings.nvls_channels > 0 ? settings.nvls_channels : device.nvls_channels;
    bytes += int64_t{channels} * 2 * settings.nvls_chunk_bytes * kSteps * in_my_node;
  }
  return bytes;
}

// The same for a group of members (world_rank among them).
int64_t group_bytes(const NcclDeviceDefaults& device, const NcclSettings& settings,
                    const DeviceLayout& layout, const std::vector<int>& members, int world_rank) {
  if (members.size() < 2) return 0;  // NCCL connects no peer in a group of one
  const int node = world_rank / layout.devices_per_node;
  int in_my_node = 0;
  for (const int member : members) in_my_node += member / layout.devices_per_node == node;
  return collective_bytes(device, settings, in_my_node < static_cast<int>(members.size()),
                          in_my_node);
}

// A link's buffers on this rank: the receiver's connections.
int64_t link_bytes(const NcclDeviceDefaults& device, const NcclSettings& settings,
                   const DeviceLayout& layout, const schema::RankCommunicator& link) {
  if (link.sends) return 0;
  const bool across_nodes =
      link.members[0] / layout.devices_per_node != link.members[1] / layout.devices_per_node;
  if (across_nodes)
    return int64_t{settings.net_channels_per_peer} * kSteps * settings.p2p_net_chunk_bytes;
  // NCCL's p2p channels: the communicator's channels within the p2p bounds,
  // to a power of two; per peer at most that many.
  const int p2p_channels = std::min(
      kMaxChannels, power_of_two_up(std::max(settings.min_p2p_channels,
                                             std::min(ring_channels(device, settings, false),
                                                      settings.max_p2p_channels))));
  return int64_t{std::min(device.p2p_channels_per_peer, p2p_channels)} *
         settings.connection_bytes();
}

}  // namespace

NcclDeviceDefaults nccl_device_defaults(const std::string& preset) {
  NcclDeviceDefaults device;
  if (preset == "h100-sxm" || preset == "h200") {
    device = {true, 32, 16, 32, 16};
  } else if (preset == "a100-80g") {
    device = {true, 24, 16, 32, 0};
  }
  return device;
}

std::vector<CommunicatorBuffers> communicator_buffers(const NcclDeviceDefaults& device,
                                                      const NcclSettings& settings,
                                                      const DeviceLayout& layout,
                                                      const schema::CommunicatorMesh& mesh,
                                                      int world_rank) {
  std::vector<CommunicatorBuffers> out;
  for (const schema::RankCommunicator& made : schema::rank_communicators(mesh, world_rank)) {
    CommunicatorBuffers buffers{made.name, made.size, 0};
    if (device.uses_nccl) {
      switch (made.kind) {
        case schema::CommunicatorKind::kWorld:
          if (made.size > 1) {
            // Every rank: its node's ranks, and whether it spans nodes
            // (worked out, not listed: the search asks for thousands).
            const int node_first = world_rank / layout.devices_per_node * layout.devices_per_node;
            const int in_my_node =
                std::min(made.size, node_first + layout.devices_per_node) - node_first;
            const bool across_nodes = in_my_node < made.size;
            // The gradient norm's all-reduce of one double runs on it every
            // step: NCCL connects a ring for it in step 1 (not NVLS, which
            // small messages do not take).
            buffers.bytes =
                settings.runtime_connect
                    ? ring_channels(device, settings, across_nodes) * settings.connection_bytes()
                    : collective_bytes(device, settings, across_nodes, in_my_node);
          }
          break;
        case schema::CommunicatorKind::kCollective:
          // A group the step never reduces over is never connected.
          if (made.device_collectives || !settings.runtime_connect)
            buffers.bytes = group_bytes(device, settings, layout, made.members, world_rank);
          break;
        case schema::CommunicatorKind::kLink:
          buffers.bytes = link_bytes(device, settings, layout, made);
          break;
      }
    }
    out.push_back(std::move(buffers));
  }
  return out;
}

std::vector<int64_t> stage_communicator_buffer_bytes(const NcclDeviceDefaults& device,
                                                     const NcclSettings& settings,
                                                     const DeviceLayout& layout,
                                                     const schema::CommunicatorMesh& mesh) {
  if (!device.uses_nccl) return std::vector<int64_t>(mesh.pipeline, 0);
  // The search asks this for every setting, but thousands of settings share
  // a few hundred meshes: each mesh's answer is worked out once (listing a
  // rank's communicators and their members costs microseconds per pipeline
  // rank, which tripled the 1T search's time before this).
  const std::vector<int64_t> key = {device.ring_channels_in_node,
                                    device.ring_channels_across_nodes,
                                    device.p2p_channels_per_peer,
                                    device.nvls_channels,
                                    settings.ll_buffer_bytes,
                                    settings.ll128_buffer_bytes,
                                    settings.simple_buffer_bytes,
                                    settings.min_channels,
                                    settings.max_channels,
                                    settings.min_p2p_channels,
                                    settings.max_p2p_channels,
                                    settings.net_channels_per_peer,
                                    settings.p2p_net_chunk_bytes,
                                    settings.nvls_enable,
                                    settings.nvls_channels,
                                    settings.nvls_chunk_bytes,
                                    settings.runtime_connect ? 1 : 0,
                                    layout.num_nodes,
                                    layout.devices_per_node,
                                    mesh.pipeline,
                                    mesh.data,
                                    mesh.context,
                                    mesh.tensor,
                                    mesh.zero_groups,
                                    mesh.zero_stage};
  static std::mutex mutex;
  static std::map<std::vector<int64_t>, std::vector<int64_t>> answers;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto found = answers.find(key);
    if (found != answers.end()) return found->second;
  }
  std::vector<int64_t> per_stage(mesh.pipeline, 0);
  const int stage_ranks = mesh.data * mesh.context * mesh.tensor;
  // Where a stage fills whole nodes, a middle stage's communicators are the
  // previous stage's moved by whole nodes: the same bytes. (The first and
  // last stages also join the embedding group.)
  const bool middles_alike = stage_ranks % layout.devices_per_node == 0;
  for (int stage = 0; stage < mesh.pipeline; ++stage) {
    if (middles_alike && stage > 1 && stage < mesh.pipeline - 1) {
      per_stage[stage] = per_stage[1];
      continue;
    }
    // The other ranks of a stage make communicators of the same sizes.
    for (const CommunicatorBuffers& buffers :
         communicator_buffers(device, settings, layout, mesh, stage * stage_ranks))
      per_stage[stage] += buffers.bytes;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  answers.emplace(key, per_stage);
  return per_stage;
}

}  // namespace paraplan
