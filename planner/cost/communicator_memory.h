// communicator_memory.h: the device memory NCCL's communicators take on one
// rank (MemoryBreakdown::communicator_buffers), from NCCL's own defaults and
// the NCCL_* environment variables as NCCL reads them, over the communicators
// schema/rank_communicators.h says a rank of the mesh makes.
//
// What it counts, per communicator of this rank (NCCL 2.22 and later, whose
// connections are made on first use, NCCL_RUNTIME_CONNECT=1):
// - a process group of n > 1 ranks that runs collectives (tensor, data, zero,
//   zero_replicas, embedding): its ring, one receive connection per channel,
//   each holding the three protocols' buffers (LL + LL128 + SIMPLE):
//     C x (NCCL_LL_BUFFSIZE + NCCL_LL128_BUFFSIZE + NCCL_BUFFSIZE),
//   defaults 524,288 + 4,915,200 + 4,194,304 = 9,633,792 bytes per channel
//   (src/init.cc's DEFAULT_*BUFFSIZE), C the device's ring channels
//   (NcclDeviceDefaults, in a node or across nodes) clamped to
//   [NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS]; plus, on NVSwitch devices with
//   NVLS (H100, H200; NCCL_NVLS_ENABLE not 0) and at least two members in
//   this rank's node, NVLS's buffers: nvls channels (16 on sm90,
//   NCCL_NVLS_NCHANNELS) x 2 x NCCL_NVLS_CHUNKSIZE (128 KiB) x 8 steps x the
//   node's members (NVLS heads);
// - the world: 0 (on NCCL it carries only paired transfers of evaluation and
//   checkpoints, outside the steps, connected when first used); counted as a
//   group when NCCL_RUNTIME_CONNECT=0 makes NCCL connect every ring at init;
// - a two-rank ring link (pipeline, context parallelism): the receiving rank
//   holds its connections: in a node, NCCL's p2p channels per peer (2 x the
//   NVLinks, to a power of two, at most the p2p channels:
//   NCCL_MAX_P2P_NCHANNELS, NCCL_MIN_P2P_NCHANNELS) x the three buffers;
//   across nodes, NCCL_NCHANNELS_PER_NET_PEER (2) x 8 steps x
//   NCCL_P2P_NET_CHUNKSIZE (128 KiB). Under P2P read the SIMPLE buffer sits
//   at the sender instead; a rank sends on as many links as it receives on,
//   so its sum is the same.
// Assumptions, stated because NCCL decides them at run time from the
// topology: the channel counts per device kind (NcclDeviceDefaults); ranks
// placed on nodes in order (world rank / devices per node); every group that
// exists runs a device collective (an upper bound where one does not: under
// ZeRO the data group beside zero); tree connections (NCCL_ALGO=Tree, or
// NCCL_RUNTIME_CONNECT=0) and NCCL's fixed per-communicator structures (a
// few MiB) are not counted. The CPU backend moves host buffers over MPI: 0.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/job/device_layout.h"
#include "planner/job/job_config.h"
#include "schema/rank_communicators.h"

namespace paraplan {

// NCCL's settings that size its buffers; the members are NCCL's defaults.
struct NcclSettings {
  int64_t ll_buffer_bytes = 524288;      // NCCL_LL_BUFFSIZE: 8 lines x 512 threads x 8 steps x 16 B
  int64_t ll128_buffer_bytes = 4915200;  // NCCL_LL128_BUFFSIZE: 120 x 640 threads x 8 steps x 8 B
  int64_t simple_buffer_bytes = 4194304;    // NCCL_BUFFSIZE: 4 MiB
  int min_channels = 0, max_channels = 64;  // NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS
  int min_p2p_channels = 1,
      max_p2p_channels = 64;             // NCCL_MIN_P2P_NCHANNELS, NCCL_MAX_P2P_NCHANNELS
  int net_channels_per_peer = 2;         // NCCL_NCHANNELS_PER_NET_PEER
  int64_t p2p_net_chunk_bytes = 131072;  // NCCL_P2P_NET_CHUNKSIZE
  int nvls_enable = 2;                   // NCCL_NVLS_ENABLE: 0 off; 1, 2 where supported
  int nvls_channels = 0;                 // NCCL_NVLS_NCHANNELS; 0: the device's
  int64_t nvls_chunk_bytes = 131072;     // NCCL_NVLS_CHUNKSIZE
  bool runtime_connect = true;           // NCCL_RUNTIME_CONNECT
  // One connection's buffers: every protocol's.
  int64_t connection_bytes() const {
    return ll_buffer_bytes + ll128_buffer_bytes + simple_buffer_bytes;
  }
};

// A variable's value, or null when unset (std::getenv's contract).
using EnvironmentLookup = std::function<const char*(const char*)>;

// The settings from the variables lookup gives (an empty value is unset, as
// NCCL takes it). A value NCCL would not read as a number, or out of its
// range, throws std::invalid_argument naming the variable and what is valid.
NcclSettings nccl_settings(const EnvironmentLookup& lookup);
// The same from this process's environment: the job inherits the planning
// shell's NCCL_* variables (paraplan launch passes the environment on).
NcclSettings nccl_settings_from_environment();

// What NCCL's topology search picks on a device kind, which the planner cannot
// run: the cluster presets' figures (NCCL's logs on 8-GPU HGX/DGX nodes).
struct NcclDeviceDefaults {
  bool uses_nccl = false;  // false: the cpu preset (MPI on host buffers)
  int ring_channels_in_node = 0;
  int ring_channels_across_nodes = 0;
  int p2p_channels_per_peer = 0;  // in a node: 2 x NVLinks, to a power of two, <= p2p channels
  int nvls_channels = 0;          // 0: no NVLS (NVLink SHARP)
};
// h100-sxm, h200: 32 ring channels in a node, 16 across, 32 p2p channels per
// peer (2 x 18 NVLinks), NVLS 16 channels (sm90); a100-80g: 24, 16, 32
// (2 x 12 NVLinks), no NVLS; cpu: no NCCL.
NcclDeviceDefaults nccl_device_defaults(const std::string& preset);

struct CommunicatorBuffers {
  std::string name;
  int size = 1;
  int64_t bytes = 0;
};

// Each communicator of world_rank with its estimate (the header's rules).
std::vector<CommunicatorBuffers> communicator_buffers(const NcclDeviceDefaults& device,
                                                      const NcclSettings& settings,
                                                      const DeviceLayout& layout,
                                                      const schema::CommunicatorMesh& mesh,
                                                      int world_rank);
// Their sum for the first rank of pipeline rank pipeline_rank (the other
// ranks of a stage make communicators of the same sizes); 0 without NCCL.
int64_t stage_communicator_buffer_bytes(const NcclDeviceDefaults& device,
                                        const NcclSettings& settings, const DeviceLayout& layout,
                                        const schema::CommunicatorMesh& mesh, int pipeline_rank);

}  // namespace paraplan
