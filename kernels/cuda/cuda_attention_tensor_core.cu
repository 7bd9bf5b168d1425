// cuda_attention_tensor_core.cu: the forward of the bf16 tensor-core flash
// attention (FlashAttention-2 style) that the CUDA backend uses for bf16
// storage with head_dim 64 or 128 (cuda_attention.cu dispatches here, the FMA
// kernels remain for other shapes, for fp32, and under
// PARAPLAN_CUDA_ATTENTION=fma). The backward is in
// cuda_attention_tensor_core_backward.cu, the mma/ldmatrix/cp.async helpers
// and fragment layouts in cuda_attention_tensor_core.cuh.
//
// Semantics are the FMA kernels' (kernels/ops.h): out = softmax(Q K^T /
// sqrt(D), causal) V per (batch, query head), K and V its KV head's (grouped
// query attention reads them in place), logsumexp = m + log(l) of the scaled
// scores (natural log), fp32. Products run on tensor cores (mma.sync
// m16n8k16, bf16 operands, fp32 accumulators): Q, K, V are bf16 already, so
// S = Q K^T is exact up to the fp32 summation order; as in FlashAttention-2
// the probabilities P are rounded to bf16 for the P V product (their fp32
// values feed the row sums l), which adds up to 2^-9 relative error per
// probability; out = O / l is rounded to bf16 once.
//
// Tiling: one block of 4 warps (128 threads) per (64-query tile, b, h),
// longest rows first; warp w owns queries 16w..16w+15 of the tile, whose Q
// fragments it keeps in registers. Per 64-key tile up to the diagonal: S (16 x
// 64 per warp, fp32 registers) = Q K^T, scaled to log2 units (the exponentials
// are exp2), masked (key > query -> -inf) on the diagonal tile only, then the
// online softmax on registers: the 4 threads of a group hold a row's 64 scores
// and agree on its max with two xor shuffles; m' = max(m, rowmax), P =
// exp2(S - m'), O and l scaled by exp2(m - m'), O += P V. Each thread keeps its
// own partial l and the group sums the four at the end, in a fixed order.
// Shared memory: the Q tile and two K, V buffers, [64][D + 8] bf16 each (46
// KiB for D = 64, 85 KiB for D = 128): the next tile's K, V are loaded with
// cp.async while the current one is computed. Rows past T are zero-filled;
// a query row past T still sees key 0 (its scores are 0, finite) and is not
// stored, and a key past T is masked for every valid query (key > query).
// Deterministic: fixed loop orders and shuffles, no atomics, a grid that
// depends only on the shape.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_attention_tensor_core.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

using namespace tensor_core;

template <int kD>
constexpr size_t forward_shared_bytes() {
  // The Q tile and two buffers of (K, V) tiles.
  return sizeof(bf16) * 5 * kTile * kTileStride<kD>;
}

// Occupancy: D = 64 asks for 4 blocks per SM (at most 128 registers a
// thread; unconstrained, ptxas takes 129, which leaves room for 3), D = 128
// for 2 (what its 85 KiB of shared memory allows on sm_90 anyway).
template <int kD>
__global__ void __launch_bounds__(kThreads, kD == 64 ? 4 : 2)
    attention_forward_tensor_core_kernel(bf16* out, float* logsumexp, const bf16* qkv, int T, int H,
                                         int Hkv, float scale_log2) {
  constexpr int kStride = kTileStride<kD>;
  constexpr int kTileElements = kTile * kStride;
  constexpr int kDSteps = kD / 16;       // k-steps of Q K^T over d
  constexpr int kKeyBlocks = kTile / 8;  // n-blocks of S (keys)
  constexpr int kOutBlocks = kD / 8;     // n-blocks of O (d)
  extern __shared__ uint4 shared_memory[];
  bf16* q_tile = reinterpret_cast<bf16*>(shared_memory);
  bf16* key_value = q_tile + kTileElements;  // buffer i: K at 2i tiles, V at 2i + 1

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, thread_in_group = lane % 4;
  const size_t C = static_cast<size_t>(H) * kD;
  const attention::HeadPointers head = attention::query_head_pointers(T, H, Hkv, kD);
  const size_t C3 = head.stride;
  // The last query tile has the most key tiles: launch it first.
  const int row0 = (gridDim.y - 1 - blockIdx.y) * kTile;
  const int warp_row0 = row0 + 16 * warp;
  const bf16* query = qkv + head.qkv_offset;
  const bf16* key = qkv + head.key_offset;
  const bf16* value = qkv + head.value_offset;

  // Keys past the tile's last query are masked for every row: stop there.
  const int key_tiles = (min(row0 + kTile, T) + kTile - 1) / kTile;
  load_tile_async<kTile, kD>(q_tile, query + row0 * C3, C3, T - row0);
  load_key_value_async<kD>(key_value, 0, key, value, C3, 0, T);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t q_fragment[kDSteps][4];
#pragma unroll
  for (int ks = 0; ks < kDSteps; ks++) {
    ldmatrix_x4(q_fragment[ks], a_fragment_address<kD>(q_tile, 16 * warp, 16 * ks));
  }

  float o[kOutBlocks][4] = {};
  // Rows g and g + 8 of the warp's 16: running max (log2 units, scaled), and
  // this thread's partial sum over its own key columns.
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

  for (int tile = 0; tile < key_tiles; tile++) {
    const int col0 = tile * kTile;
    // Tile `tile`'s copies (the last group committed) have landed for every
    // thread, and every warp is done with tile - 1, whose buffer the next
    // copies overwrite.
    cp_async_wait<0>();
    __syncthreads();
    if (tile + 1 < key_tiles) {
      load_key_value_async<kD>(key_value, (tile + 1) % 2, key, value, C3, col0 + kTile, T);
      cp_async_commit();
    }
    const bf16* k_tile = key_value + (tile % 2) * 2 * kTileElements;
    const bf16* v_tile = k_tile + kTileElements;

    // S = Q K^T for the warp's 16 queries x 64 keys.
    float s[kKeyBlocks][4] = {};
#pragma unroll
    for (int ks = 0; ks < kDSteps; ks++) {
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; nb += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, b_fragment_address<kD>(k_tile, 8 * nb, 16 * ks));
        mma_bf16(s[nb], q_fragment[ks], b[0], b[1]);
        mma_bf16(s[nb + 1], q_fragment[ks], b[2], b[3]);
      }
    }
    // Scaled to log2 units; on the diagonal tile (the only one where a key can
    // follow one of the warp's queries) keys after their query are masked.
    const bool diagonal = col0 + kTile - 1 > warp_row0;
#pragma unroll
    for (int nb = 0; nb < kKeyBlocks; nb++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int query_index = warp_row0 + group + 8 * (e / 2);
        const int key_index = col0 + 8 * nb + 2 * thread_in_group + e % 2;
        s[nb][e] = diagonal && key_index > query_index ? -INFINITY : s[nb][e] * scale_log2;
      }
    }

    // Online softmax, rows g (i = 0, elements 0, 1) and g + 8 (i = 1, elements 2, 3).
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float tile_max = row_max[i];
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; nb++) {
        tile_max = fmaxf(tile_max, fmaxf(s[nb][2 * i], s[nb][2 * i + 1]));
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 2));
      // Every row sees key 0 on the first tile, so the max is finite from
      // there on; the guard only keeps exp2(-inf - -inf) out on principle.
      const float shift = tile_max == -INFINITY ? 0.0f : tile_max;
      const float rescale = exp2f(row_max[i] - shift);  // 0 on the first tile
      row_max[i] = tile_max;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < kKeyBlocks; nb++) {
        s[nb][2 * i] = exp2f(s[nb][2 * i] - shift);  // masked: exp2(-inf) = 0
        s[nb][2 * i + 1] = exp2f(s[nb][2 * i + 1] - shift);
        sum += s[nb][2 * i] + s[nb][2 * i + 1];
      }
      row_sum[i] = row_sum[i] * rescale + sum;
#pragma unroll
      for (int db = 0; db < kOutBlocks; db++) {
        o[db][2 * i] *= rescale;
        o[db][2 * i + 1] *= rescale;
      }
    }

    // O += P V, P rounded to bf16 (A fragments straight from the S registers).
    mma_accumulators_by_tile<kD>(o, s, v_tile);
  }

  // out = O / l (rounded once), logsumexp = m + log(l) in natural-log units.
#pragma unroll
  for (int i = 0; i < 2; i++) {
    float sum = row_sum[i];
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    sum += __shfl_xor_sync(kFullMask, sum, 2);
    const int query_index = warp_row0 + group + 8 * i;
    if (query_index >= T) continue;
    const float inverse_sum = 1.0f / sum;
    bf16* out_row = out + head.out_offset + query_index * C;
#pragma unroll
    for (int db = 0; db < kOutBlocks; db++) {
      *reinterpret_cast<uint32_t*>(out_row + 8 * db + 2 * thread_in_group) =
          pack_bf16(o[db][2 * i] * inverse_sum, o[db][2 * i + 1] * inverse_sum);
    }
    if (thread_in_group == 0) {
      logsumexp[head.row_offset + query_index] = row_max[i] * kLn2 + logf(sum);
    }
  }
}

}  // namespace

namespace attention {

void attention_forward_tensor_core(bf16* out, float* logsumexp, const bf16* qkv, int batch,
                                   int seq_len, int num_heads, int num_kv_heads, int head_dim,
                                   cudaStream_t stream) {
  // Qualified: attention:: has its own kTile and kThreads (the FMA kernels').
  const dim3 grid(static_cast<unsigned int>(batch * num_heads),
                  ceil_div(seq_len, tensor_core::kTile));
  const float scale_log2 = 1.0f / std::sqrt(static_cast<float>(head_dim)) * tensor_core::kLog2e;
  tensor_core::dispatch_head_dim(head_dim, [&](auto dim) {
    constexpr int kD = decltype(dim)::value;
    constexpr size_t bytes = forward_shared_bytes<kD>();
    allow_shared_memory(attention_forward_tensor_core_kernel<kD>, bytes);
    attention_forward_tensor_core_kernel<kD><<<grid, tensor_core::kThreads, bytes, stream>>>(
        out, logsumexp, qkv, seq_len, num_heads, num_kv_heads, scale_log2);
    PARAPLAN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace attention

}  // namespace paraplan::kernels::cuda
