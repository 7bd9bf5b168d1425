// communicator_memory.cc: NCCL's buffers per communicator and per rank, and
// the NCCL_* variables that size them (communicator_memory.h states the
// formula and its assumptions).
#include "planner/cost/communicator_memory.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>

namespace paraplan {
namespace {

constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS
constexpr int kSteps = 8;         // NCCL_STEPS: slots of a connection's buffer

// An integer NCCL reads with strtoll (base 0, as NCCL_PARAM does), within
// [least, most]; unset or empty: fallback.
int64_t integer_variable(const EnvironmentLookup& lookup, const char* name, int64_t fallback,
                         int64_t least, int64_t most, const char* valid) {
  const char* text = lookup(name);
  if (text == nullptr || text[0] == '\0') return fallback;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || value < least || value > most)
    throw std::invalid_argument(
        std::string(name) + "='" + text + "' in the environment is not valid: " + valid +
        " (the planner sizes NCCL's buffers from it; unset it for NCCL's default" +
        (fallback > 0 ? " " + std::to_string(fallback) : std::string()) + ")");
  return value;
}

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

// A collective group's ring (and NVLS) buffers on this rank.
int64_t group_bytes(const NcclDeviceDefaults& device, const NcclSettings& settings,
                    const DeviceLayout& layout, const std::vector<int>& members, int world_rank) {
  if (members.size() < 2) return 0;  // NCCL connects no peer in a group of one
  const int node = world_rank / layout.devices_per_node;
  std::set<int> nodes;
  int in_my_node = 0;
  for (const int member : members) {
    nodes.insert(member / layout.devices_per_node);
    if (member / layout.devices_per_node == node) ++in_my_node;
  }
  int64_t bytes = ring_channels(device, settings, nodes.size() > 1) * settings.connection_bytes();
  if (device.nvls_channels > 0 && settings.nvls_enable != 0 && in_my_node >= 2) {
    const int channels = settings.nvls_channels > 0 ? settings.nvls_channels : device.nvls_channels;
    bytes += int64_t{channels} * 2 * settings.nvls_chunk_bytes * kSteps * in_my_node;
  }
  return bytes;
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

NcclSettings nccl_settings(const EnvironmentLookup& lookup) {
  NcclSettings s;
  const int64_t most_bytes = int64_t{1} << 40;
  const char* bytes = "a size in bytes, an integer from 1";
  s.simple_buffer_bytes =
      integer_variable(lookup, "NCCL_BUFFSIZE", s.simple_buffer_bytes, 1, most_bytes, bytes);
  s.ll_buffer_bytes =
      integer_variable(lookup, "NCCL_LL_BUFFSIZE", s.ll_buffer_bytes, 1, most_bytes, bytes);
  s.ll128_buffer_bytes =
      integer_variable(lookup, "NCCL_LL128_BUFFSIZE", s.ll128_buffer_bytes, 1, most_bytes, bytes);
  s.p2p_net_chunk_bytes = integer_variable(lookup, "NCCL_P2P_NET_CHUNKSIZE", s.p2p_net_chunk_bytes,
                                           1, most_bytes, bytes);
  s.nvls_chunk_bytes =
      integer_variable(lookup, "NCCL_NVLS_CHUNKSIZE", s.nvls_chunk_bytes, 1, most_bytes, bytes);
  // NCCL clamps channel counts above 64 to 64 (and a maximum below 1 to 1).
  const char* channels = "a channel count, an integer from 0 (NCCL uses at most 64)";
  s.min_channels = static_cast<int>(std::min<int64_t>(
      kMaxChannels, integer_variable(lookup, "NCCL_MIN_NCHANNELS", 0, 0, 1 << 20, channels)));
  s.max_channels = static_cast<int>(std::clamp<int64_t>(
      integer_variable(lookup, "NCCL_MAX_NCHANNELS", kMaxChannels, 0, 1 << 20, channels), 1,
      kMaxChannels));
  s.min_p2p_channels = static_cast<int>(std::clamp<int64_t>(
      integer_variable(lookup, "NCCL_MIN_P2P_NCHANNELS", 1, 0, 1 << 20, channels), 1,
      kMaxChannels));
  s.max_p2p_channels = static_cast<int>(std::clamp<int64_t>(
      integer_variable(lookup, "NCCL_MAX_P2P_NCHANNELS", kMaxChannels, 0, 1 << 20, channels), 1,
      kMaxChannels));
  s.net_channels_per_peer =
      static_cast<int>(integer_variable(lookup, "NCCL_NCHANNELS_PER_NET_PEER", 2, 1, kMaxChannels,
                                        "channels per network peer, an integer from 1 to 64"));
  s.nvls_channels = static_cast<int>(integer_variable(
      lookup, "NCCL_NVLS_NCHANNELS", 0, 1, kMaxChannels, "NVLS channels, an integer from 1 to 64"));
  s.nvls_enable = static_cast<int>(integer_variable(lookup, "NCCL_NVLS_ENABLE", 2, 0, 2,
                                                    "0 (off), 1 (on) or 2 (where supported)"));
  s.runtime_connect = integer_variable(lookup, "NCCL_RUNTIME_CONNECT", 1, 0, 1,
                                       "0 (connect at init) or 1 (on first use)") != 0;
  return s;
}

NcclSettings nccl_settings_from_environment() {
  return nccl_settings([](const char* name) { return std::getenv(name); });
}

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
          if (!settings.runtime_connect && made.size > 1) {
            // Every rank: its node's ranks, and whether it spans nodes.
            std::vector<int> members;
            for (int r = 0; r < made.size; ++r) members.push_back(r);
            buffers.bytes = group_bytes(device, settings, layout, members, world_rank);
          }
          break;
        case schema::CommunicatorKind::kCollective:
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

int64_t stage_communicator_buffer_bytes(const NcclDeviceDefaults& device,
                                        const NcclSettings& settings, const DeviceLayout& layout,
                                        const schema::CommunicatorMesh& mesh, int pipeline_rank) {
  if (!device.uses_nccl) return 0;
  const int first_rank = pipeline_rank * mesh.data * mesh.context * mesh.tensor;
  int64_t bytes = 0;
  for (const CommunicatorBuffers& buffers :
       communicator_buffers(device, settings, layout, mesh, first_rank))
    bytes += buffers.bytes;
  return bytes;
}

}  // namespace paraplan
