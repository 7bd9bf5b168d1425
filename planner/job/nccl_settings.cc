// nccl_settings.cc: the NCCL_* variables read with NCCL's own rules
// (nccl_settings.h).
#include "planner/job/nccl_settings.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace paraplan {
namespace {

constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS

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

}  // namespace paraplan
