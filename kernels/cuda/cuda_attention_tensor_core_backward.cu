// cuda_attention_tensor_core_backward.cu: the backward of the bf16
// tensor-core flash attention (FlashAttention-2 style; the forward, its
// conventions and the dispatch are described in cuda_attention_tensor_core.cu,
// the mma helpers in cuda_attention_tensor_core.cuh). attention_backward
// (cuda_attention_backward.cu) first fills the caller's scratch with D_t =
// sum_d dOut[t, d] * out[t, d] (the FMA path's row-dot kernel, fp32), then
// calls the two kernels here. Every gradient element has one owner, so there
// are no atomics:
//   dK/dV: one block of 4 warps per (64-key tile, b, KV head), warp w owning
//     keys 16w..16w+15; for each query head of the KV head's group in turn
//     (grouped-query attention: the group's sum stays in registers, no
//     atomics), per sub-tile of M queries (M = 64 for D = 64, 32 for D = 128,
//     which keeps the dK, dV, S and dP accumulators within the register file)
//     from the key tile's first key to T: S^T = K Q^T and dP^T = V dOut^T (16
//     keys x M queries per warp, fp32), P^T = exp2(S^T * scale * log2 e -
//     L * log2 e) (the forward's probabilities, recomputed), dS^T = P^T
//     (dP^T - D); then dV += P^T dOut and dK += dS^T Q, with P and dS rounded
//     to bf16 as mma operands (as FlashAttention-2 does; dS is formed from
//     the fp32 P). The key tile's K, V stay in shared memory; the next
//     sub-tile's Q, dOut, L and D (of the same or the next query head) are
//     loaded (cp.async) while the current one is computed.
//   dQ: one block per (64-query tile, b, h), warp w owning queries 16w..+15;
//     per 64-key tile up to the diagonal: S = Q K^T, dP = dOut V^T, P, dS as
//     above, dQ += dS K; the next K, V tiles load while the current is used.
// Masking: a (key, query) pair counts when key <= query and query < T; it is
// applied only on sub-tiles that cross the diagonal or the end of the
// sequence. Masked entries are selected to exact zeros (never multiplied), and
// rows past T are zero-filled in shared memory, so nothing non-finite can
// leak into a valid row. dK and dQ are scaled by 1/sqrt(D) once at the end;
// each gradient element is then added to dqkv and rounded once (or, told to
// overwrite, added to 0 and stored without reading dqkv).
// Deterministic: fixed loop orders, no atomics, a grid set by the shape.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_attention_tensor_core.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

using namespace tensor_core;

// Queries per step of the dK/dV kernel.
template <int kD>
inline constexpr int kDkdvQueries = kD == 64 ? 64 : 32;

template <int kD>
constexpr size_t dkdv_shared_bytes() {
  // The K and V tiles; two buffers of (Q, dOut) sub-tiles; two of (L log2 e, D) per query.
  constexpr int kQueries = kDkdvQueries<kD>;
  return sizeof(bf16) * (2 * kTile + 4 * kQueries) * kTileStride<kD> + sizeof(float) * 4 * kQueries;
}

// Starts loading the dK/dV kernel's query sub-tile at row0 into buffer
// `buffer`: Q and dOut rows by cp.async, L * log2 e and D by plain stores (they
// become visible at the same __syncthreads as the cp.async data). Rows past T
// get zeros.
template <int kD, int kQueries>
__device__ __forceinline__ void load_query_step(bf16* query_buffers, float* stats, int buffer,
                                                const bf16* query, const bf16* dout_head,
                                                const float* lse_head, const float* dot_head,
                                                size_t C3, size_t C, int row0, int T) {
  constexpr int kSubTileElements = kQueries * kTileStride<kD>;
  bf16* q_tile = query_buffers + buffer * 2 * kSubTileElements;
  load_tile_async<kQueries, kD>(q_tile, query + row0 * C3, C3, T - row0);
  load_tile_async<kQueries, kD>(q_tile + kSubTileElements, dout_head + row0 * C, C, T - row0);
  float* lse_tile = stats + buffer * 2 * kQueries;
  if (threadIdx.x < kQueries) {
    const int r = threadIdx.x;
    const bool valid = row0 + r < T;
    lse_tile[r] = valid ? lse_head[row0 + r] * kLog2e : 0.0f;
    lse_tile[kQueries + r] = valid ? dot_head[row0 + r] : 0.0f;
  }
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_tensor_core_kernel(bf16* dqkv, const bf16* qkv, const bf16* dout,
                                      const float* logsumexp, const float* row_dot, int T, int H,
                                      int Hkv, float scale, float scale_log2, bool accumulate) {
  constexpr int kQueries = kDkdvQueries<kD>;
  constexpr int kStride = kTileStride<kD>;
  constexpr int kTileElements = kTile * kStride, kSubTileElements = kQueries * kStride;
  constexpr int kQueryBlocks = kQueries / 8;  // n-blocks of S^T (queries)
  constexpr int kOutBlocks = kD / 8;          // n-blocks of dK, dV (d)
  extern __shared__ uint4 shared_memory[];
  bf16* k_tile = reinterpret_cast<bf16*>(shared_memory);
  bf16* v_tile = k_tile + kTileElements;
  bf16* query_buffers = v_tile + kTileElements;  // buffer i: Q at 2i sub-tiles, dOut at 2i + 1
  float* stats = reinterpret_cast<float*>(query_buffers + 4 * kSubTileElements);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, thread_in_group = lane % 4;
  const size_t C = static_cast<size_t>(H) * kD;
  // The block's KV head, as seen from the first query head of its group.
  const attention::HeadPointers kv_head = attention::group_head_pointers(0, T, H, Hkv, kD);
  const size_t C3 = kv_head.stride;
  // Key tile 0 sees every query, the most work: it has the lowest block index.
  const int col0 = blockIdx.y * kTile;
  const int warp_col0 = col0 + 16 * warp;

  // Queries before the tile's first key see none of its keys: each query head
  // of the group takes steps_per_head sub-tiles from col0, heads in order.
  const int steps_per_head = (T - col0 + kQueries - 1) / kQueries;
  const int steps = (H / Hkv) * steps_per_head;
  const auto start_step = [&](int step, int buffer) {
    const attention::HeadPointers head =
        attention::group_head_pointers(step / steps_per_head, T, H, Hkv, kD);
    load_query_step<kD, kQueries>(query_buffers, stats, buffer, qkv + head.qkv_offset,
                                  dout + head.out_offset, logsumexp + head.row_offset,
                                  row_dot + head.row_offset, C3, C,
                                  col0 + (step % steps_per_head) * kQueries, T);
  };
  load_tile_async<kTile, kD>(k_tile, qkv + kv_head.key_offset + col0 * C3, C3, T - col0);
  load_tile_async<kTile, kD>(v_tile, qkv + kv_head.value_offset + col0 * C3, C3, T - col0);
  start_step(0, 0);
  cp_async_commit();

  float dk[kOutBlocks][4] = {}, dv[kOutBlocks][4] = {};
  for (int step = 0; step < steps; step++) {
    const int row0 = col0 + (step % steps_per_head) * kQueries;
    // This step's copies have landed for every thread, and every warp is done
    // with step - 1, whose buffers the next copies overwrite.
    cp_async_wait<0>();
    __syncthreads();
    if (step + 1 < steps) {
      start_step(step + 1, (step + 1) % 2);
      cp_async_commit();
    }
    const bf16* q_tile = query_buffers + (step % 2) * 2 * kSubTileElements;
    const bf16* dout_tile = q_tile + kSubTileElements;
    const float* lse_tile = stats + (step % 2) * 2 * kQueries;  // L * log2 e
    const float* dot_tile = lse_tile + kQueries;                // D

    // S^T = K Q^T and dP^T = V dOut^T for the warp's 16 keys x kQueries queries.
    float s[kQueryBlocks][4] = {}, dp[kQueryBlocks][4] = {};
    mma_rows_by_rows<kD>(s, k_tile, 16 * warp, q_tile);
    mma_rows_by_rows<kD>(dp, v_tile, 16 * warp, dout_tile);

    // P^T into s, dS^T into dp. Masking only where a warp's key can follow a
    // query of the step or the step runs past T.
    const bool edge = warp_col0 + 15 > row0 || row0 + kQueries > T;
#pragma unroll
    for (int nb = 0; nb < kQueryBlocks; nb++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key_index = warp_col0 + group + 8 * (e / 2);
        const int r = 8 * nb + 2 * thread_in_group + e % 2;  // query row0 + r
        const bool visible = !edge || (key_index <= row0 + r && row0 + r < T);
        const float p = visible ? exp2f(s[nb][e] * scale_log2 - lse_tile[r]) : 0.0f;
        dp[nb][e] = visible ? p * (dp[nb][e] - dot_tile[r]) : 0.0f;
        s[nb][e] = p;
      }
    }

    // dV += P^T dOut, dK += dS^T Q: k runs over the step's queries.
    mma_accumulators_by_tile<kD>(dv, s, dout_tile);
    mma_accumulators_by_tile<kD>(dk, dp, q_tile);
  }

  // This block alone owns these rows of dK and dV: plain read-modify-write
  // (or store).
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int key_index = warp_col0 + group + 8 * i;
    if (key_index >= T) continue;
    bf16* dkey_row = dqkv + kv_head.key_offset + key_index * C3;
    bf16* dvalue_row = dqkv + kv_head.value_offset + key_index * C3;
#pragma unroll
    for (int db = 0; db < kOutBlocks; db++) {
      const int d = 8 * db + 2 * thread_in_group;
      write_pair(dkey_row + d, dk[db][2 * i] * scale, dk[db][2 * i + 1] * scale, accumulate);
      write_pair(dvalue_row + d, dv[db][2 * i], dv[db][2 * i + 1], accumulate);
    }
  }
}

template <int kD>
constexpr size_t dq_shared_bytes() {
  // The Q and dOut tiles and two buffers of (K, V) tiles.
  return sizeof(bf16) * 6 * kTile * kTileStride<kD>;
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    attention_dq_tensor_core_kernel(bf16* dqkv, const bf16* qkv, const bf16* dout,
                                    const float* logsumexp, const float* row_dot, int T, int H,
                                    int Hkv, float scale, float scale_log2, bool accumulate) {
  constexpr int kStride = kTileStride<kD>;
  constexpr int kTileElements = kTile * kStride;
  constexpr int kKeyBlocks = kTile / 8;  // n-blocks of S (keys)
  constexpr int kOutBlocks = kD / 8;     // n-blocks of dQ (d)
  extern __shared__ uint4 shared_memory[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared_memory);
  bf16* dout_tile = q_tile + kTileElements;
  bf16* key_value = dout_tile + kTileElements;  // buffer i: K at tile 2i, V at 2i + 1

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, thread_in_group = lane % 4;
  const size_t C = static_cast<size_t>(H) * kD;
  const attention::HeadPointers head = attention::query_head_pointers(T, H, Hkv, kD);
  const size_t C3 = head.stride;
  const int row0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // longest rows first
  const int warp_row0 = row0 + 16 * warp;
  const bf16* query = qkv + head.qkv_offset;
  const bf16* key = qkv + head.key_offset;
  const bf16* value = qkv + head.value_offset;

  load_tile_async<kTile, kD>(q_tile, query + row0 * C3, C3, T - row0);
  load_tile_async<kTile, kD>(dout_tile, dout + head.out_offset + row0 * C, C, T - row0);
  load_key_value_async<kD>(key_value, 0, key, value, C3, 0, T);
  cp_async_commit();
  // L * log2 e and D of the thread's rows g and g + 8 (zeros past T).
  float lse[2], dot[2];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int query_index = warp_row0 + group + 8 * i;
    const bool valid = query_index < T;
    lse[i] = valid ? logsumexp[head.row_offset + query_index] * kLog2e : 0.0f;
    dot[i] = valid ? row_dot[head.row_offset + query_index] : 0.0f;
  }
  const int key_tiles = (min(row0 + kTile, T) + kTile - 1) / kTile;

  float dq[kOutBlocks][4] = {};
  for (int tile = 0; tile < key_tiles; tile++) {
    const int col0 = tile * kTile;
    // As in the forward: this tile has landed, every warp is done with the previous one.
    cp_async_wait<0>();
    __syncthreads();
    if (tile + 1 < key_tiles) {
      load_key_value_async<kD>(key_value, (tile + 1) % 2, key, value, C3, col0 + kTile, T);
      cp_async_commit();
    }
    const bf16* k_tile = key_value + (tile % 2) * 2 * kTileElements;
    const bf16* v_tile = k_tile + kTileElements;

    // S = Q K^T and dP = dOut V^T for the warp's 16 queries x 64 keys.
    float s[kKeyBlocks][4] = {}, dp[kKeyBlocks][4] = {};
    mma_rows_by_rows<kD>(s, q_tile, 16 * warp, k_tile);
    mma_rows_by_rows<kD>(dp, dout_tile, 16 * warp, v_tile);

    // dS into dp (P is not needed past it). Masking on the diagonal tile and
    // for warps whose rows run past T.
    const bool edge = col0 + kTile - 1 > warp_row0 || warp_row0 + 15 >= T;
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; nb++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int query_index = warp_row0 + group + 8 * (e / 2);
        const int key_index = col0 + 8 * nb + 2 * thread_in_group + e % 2;
        const bool visible = !edge || (key_index <= query_index && query_index < T);
        const float p = visible ? exp2f(s[nb][e] * scale_log2 - lse[e / 2]) : 0.0f;
        dp[nb][e] = visible ? p * (dp[nb][e] - dot[e / 2]) : 0.0f;
      }
    }

    // dQ += dS K: k runs over the tile's keys.
    mma_accumulators_by_tile<kD>(dq, dp, k_tile);
  }

  // This block alone owns these rows of dQ.
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int query_index = warp_row0 + group + 8 * i;
    if (query_index >= T) continue;
    bf16* dquery_row = dqkv + head.qkv_offset + query_index * C3;
#pragma unroll
    for (int db = 0; db < kOutBlocks; db++) {
      write_pair(dquery_row + 8 * db + 2 * thread_in_group, dq[db][2 * i] * scale,
                 dq[db][2 * i + 1] * scale, accumulate);
    }
  }
}

}  // namespace

namespace attention {

void attention_backward_tensor_core(bf16* dqkv, const float* row_dot, const bf16* dout,
                                    const bf16* qkv, const float* logsumexp, int batch, int seq_len,
                                    int num_heads, int num_kv_heads, int head_dim, bool accumulate,
                                    cudaStream_t stream) {
  // Qualified: attention:: has its own kTile and kThreads (the FMA kernels').
  // dQ: a block per (query tile, b, query head); dK/dV: per (key tile, b, KV head).
  const dim3 grid(static_cast<unsigned int>(batch * num_heads),
                  ceil_div(seq_len, tensor_core::kTile));
  const dim3 kv_grid(static_cast<unsigned int>(batch * num_kv_heads),
                     ceil_div(seq_len, tensor_core::kTile));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const float scale_log2 = scale * tensor_core::kLog2e;
  tensor_core::dispatch_head_dim(head_dim, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    constexpr size_t dkdv_bytes = dkdv_shared_bytes<kD>();
    allow_shared_memory(attention_dkdv_tensor_core_kernel<kD>, dkdv_bytes);
    attention_dkdv_tensor_core_kernel<kD><<<kv_grid, tensor_core::kThreads, dkdv_bytes, stream>>>(
        dqkv, qkv, dout, logsumexp, row_dot, seq_len, num_heads, num_kv_heads, scale, scale_log2,
        accumulate);
    PARAPLAN_CUDA_CHECK_LAUNCH();
    constexpr size_t dq_bytes = dq_shared_bytes<kD>();
    allow_shared_memory(attention_dq_tensor_core_kernel<kD>, dq_bytes);
    attention_dq_tensor_core_kernel<kD><<<grid, tensor_core::kThreads, dq_bytes, stream>>>(
        dqkv, qkv, dout, logsumexp, row_dot, seq_len, num_heads, num_kv_heads, scale, scale_log2,
        accumulate);
    PARAPLAN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention

}  // namespace paraplan::kernels::cuda
