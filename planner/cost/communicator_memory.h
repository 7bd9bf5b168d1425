// communicator_memory.h: the device memory NCCL's communicators take on one
// rank (MemoryBreakdown::communicator_buffers), from NCCL's own defaults and
// the NCCL_* environment variables as NCCL reads them, over the communicators
// schema/rank_communicators.h says a rank of the mesh makes.
//
// What it counts, per communicator of this rank (NCCL 2.22 and later, whose
// connections are made on first use, NCCL_RUNTIME_CONNECT=1):
// - a process group of n > 1 ranks that runs collectives (tensor, embedding,
//   and data without ZeRO or zero and zero_replicas with it): its ring, one receive connection per
//   channel, each holding the three protocols' buffers (LL + LL128 + SIMPLE):
//     C x (NCCL_LL_BUFFSIZE + NCCL_LL128_BUFFSIZE + NCCL_BUFFSIZE),
//   defaults 524,288 + 4,915,200 + 4,194,304 = 9,633,792 bytes per channel
//   (src/init.cc's DEFAULT_*BUFFSIZE), C the device's ring channels
//   (NcclDeviceDefaults, in a node or across nodes) clamped to
//   [NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS]; plus, on NVSwitch devices with
//   NVLS (H100, H200; NCCL_NVLS_ENABLE not 0) and at least two members in
//   this rank's node, NVLS's buffers: nvls channels (16 on sm90,
//   NCCL_NVLS_NCHANNELS) x 2 x NCCL_NVLS_CHUNKSIZE (128 KiB) x 8 steps x the
//   node's members (NVLS heads);
// - the world of n > 1 ranks: one ring (no NVLS), which the gradient norm's
//   all-reduce of one double connects in step 1 (evaluation's and
//   checkpoints' transfers go over the links and the host); counted as a
//   group (NVLS too) when NCCL_RUNTIME_CONNECT=0 connects every ring at init;
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
// placed on nodes in order (world rank / devices per node); a group the step
// does not reduce over (the data group under ZeRO, zero and zero_replicas
// without it: RankCommunicator::device_collectives) is never connected, so
// holds nothing (unless NCCL_RUNTIME_CONNECT=0); tree connections (NCCL_ALGO=Tree, or
// NCCL_RUNTIME_CONNECT=0) and NCCL's fixed per-communicator structures (a
// few MiB) are not counted. The CPU backend moves host buffers over MPI: 0.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/job/device_layout.h"
#include "planner/job/job_config.h"
#include "planner/job/nccl_settings.h"
#include "schema/rank_communicators.h"

namespace paraplan {

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
// Their sum per pipeline rank (for its first rank: the other ranks of a
// stage make communicators of the same sizes); zeros without NCCL.
// Remembered per question: the search asks for the same meshes many times.
std::vector<int64_t> stage_communicator_buffer_bytes(const NcclDeviceDefaults& device,
                                                     const NcclSettings& settings,
                                                     const DeviceLayout& layout,
                                                     const schema::CommunicatorMesh& mesh);

}  // namespace paraplan
