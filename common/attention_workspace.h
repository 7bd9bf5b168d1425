// attention_workspace.h: the device workspace cuDNN's SDPA takes for one
// attention shape, as the CUDA backend runs it (kernels/cuda/
// cudnn_attention.cc: causal, bf16, fp32 statistics, the deterministic
// backward) — the one place the formula lives. The planner's memory model
// counts it where a plan's attention runs on cuDNN (planner/cost/
// cost_model.h, StageMemoryTerms::attention_workspace); the GPU test
// (kernels/cuda/cudnn_attention_test.cc) holds it to the graphs' own
// get_workspace_size. Plain integers, no CUDA.
//
// Source: the cuDNN frontend 1.32's SDPA nodes (cudnn_frontend/node/
// scaled_dot_product_flash_attention.h), which size the workspace
// themselves:
// - forward: none of the frontend's own; the engine's is a few KiB at most
//   (kForwardSlack covers it).
// - backward: softmax_sum, fp32 [B, H, T] (rowsum(dO * O)); and, because the
//   deterministic algorithm is asked for, the frontend forces the "dP
//   workspace" decomposition on Hopper: dP materialised in 16 bits, [B, H,
//   ceil64(T), ceil128(T)] (its own required_dp_workspace_bytes on sm90:
//   the keys padded to 128, the queries to 64); the other
//   deterministic route (ordered dQ accumulation, chosen only under
//   CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT) needs an fp32 dQ accumulator
//   [B, H, T, D] instead. Both are counted, so either route fits.
// The backward's graph is the larger; the Ops object keeps the largest it
// has used (DeviceScratch never shrinks), so a stage holds this once.
#pragma once

#include <cstdint>

namespace paraplan {

inline constexpr int64_t kCudnnSdpaForwardSlack = int64_t{1} << 20;

// Bytes of cuDNN's SDPA workspace for attention over batch x seq_len tokens
// with `heads` query heads of head_dim (the KV heads do not enter: dK and dV
// are written by the engine into the caller's buffers); with_backward: the
// backward's graph too (training), else the forward's alone.
inline constexpr int64_t cudnn_sdpa_workspace_bytes(int64_t batch, int64_t seq_len, int64_t heads,
                                                    int64_t head_dim, bool with_backward) {
  if (!with_backward) return kCudnnSdpaForwardSlack;
  const int64_t rows = batch * heads * seq_len;
  const int64_t padded_queries = (seq_len + 63) / 64 * 64;
  const int64_t padded_keys = (seq_len + 127) / 128 * 128;
  const int64_t softmax_sum = 4 * rows;
  const int64_t dp = 2 * batch * heads * padded_queries * padded_keys;
  const int64_t dq_accumulator = 4 * rows * head_dim;
  return softmax_sum + dp + dq_accumulator + kCudnnSdpaForwardSlack;
}

}  // namespace paraplan
