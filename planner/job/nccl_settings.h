// nccl_settings.h: the NCCL_* environment variables that size NCCL's
// buffers, as NCCL reads them (planner/cost/communicator_memory.h counts the
// buffers from them). Read once, when a job is parsed (ClusterConfig::nccl):
// the job inherits the planning shell's environment (paraplan launch passes
// it on), and the search then asks for them thousands of times.
#pragma once

#include <cstdint>
#include <functional>

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

}  // namespace paraplan
