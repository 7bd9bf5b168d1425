// cuda_attention.cu: fused causal multi-head self-attention (flash attention)
// for the CUDA backend (kernels/ops.h): the forward kernel here, the backward
// kernels in cuda_attention_backward.cu, what they share in
// cuda_attention.cuh. No T x T tensor exists: scores live one tile at a time
// in shared memory; forward saves the per-row logsumexp L and backward
// recomputes the probabilities P = exp(S - L).
//
// Storage: qkv, out, dout and dqkv hold fp32 or bf16 elements (the Ops
// object's storage dtype; kernels templated on it); tiles are widened to fp32
// as they are loaded into shared memory, all arithmetic is fp32, and each
// stored element of out and dqkv is rounded once (dqkv += g stores
// round(float(dqkv) + g); overwriting, round(0 + g), dqkv not read).
// logsumexp and the backward's scratch are fp32.
//
// Per (batch b, query head h): Q is the head's [T, D] slice of qkv, K and V
// those of its KV head h / (H / Hkv) (grouped-query attention; row stride
// (H + 2 Hkv) D, read in place, never repeated), S = Q K^T / sqrt(D), causal
// (key <= query). fp32
// with plain FMA, no tensor cores: the bits do not depend on the TF32 setting.
// Blocks are 16 x 16 threads (tx, ty). Shared tiles are [rows][Dp + 1], Dp = D
// rounded up to 16, 32, 64 or 128 (the template parameter), zero-padded past D
// and T so padding adds exact zeros; the odd stride puts the 16 rows a
// half-warp reads at one column in 16 banks. Shared memory per block is at
// most ~114 KiB (Dp = 128), ~66 KiB (Dp = 64), opted in beyond the 48 KiB
// default (sm_80 allows 163 KiB, sm_90 227 KiB).
//
// Forward, one block per (64-query tile, b, h), longest rows first: the Q tile
// stays in shared memory; per 64-key tile up to the diagonal, load K and V,
// compute S (each thread 4 queries ty + 16i x 4 keys tx + 16j, masked to -inf)
// into shared memory, then an online softmax, each warp a row at a time
// (butterfly max and sum): m' = max(m, rowmax S), P = exp(S - m'),
// l = l exp(m - m') + rowsum P, and O = O exp(m - m') + P V in registers (each
// thread 4 queries x Dp/16 columns tx + 16j). Finally out = O / l, L = m + log l.
// Backward (cuda_attention_backward.cu), three kernels, no atomics (every
// output element has one owner):
//   1. row_dot[b, h, t] = dOut_t . out_t, one warp per row, into the caller's
//      [B, H, T] scratch (the softmax backward's rowsum(P * dP)).
//   2. dK, dV: one block per (64-key tile, b, KV head) holding K, V; for each
//      query head of the group in turn, per 32-query tile from the key
//      tile's first key to T: P^T and dS^T = P * (dP -
//      row_dot), dP = dOut V^T (each thread 4 keys x 2 queries), then
//      dV += P^T dOut, dK += dS^T Q in registers (4 keys x Dp/16 columns):
//      the group's sum without atomics or a second pass.
//   3. dQ: one block per (64-query tile, b, h) holding Q, dOut; per 32-key tile
//      up to the diagonal: dS as in 2, then dQ += dS K in registers.
//   dK and dQ are scaled once at the end and added into dqkv (or, with
//   GradientWrite::kOverwrite, to 0 and stored).
// Deterministic: every sum runs in a fixed order (d ascending in FMA chains,
// fixed butterflies, tiles in order), the grid depends on the shape only and
// every (b, h) runs the same code, so the bits do not depend on the batch.
// Loads into shared memory move 16 bytes (4 floats or 8 bf16) at a time when
// D is a multiple of that and the base pointer is 16-byte aligned (then every
// row start is: the row strides and head offsets are multiples of D).
// These kernels serve fp32 storage, and bf16 where the tensor-core kernels
// (cuda_attention_tensor_core.cu: bf16, head_dim 64 or 128, aligned tensors)
// do not apply or PARAPLAN_CUDA_ATTENTION=fma turns them off; the launchers
// below dispatch.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

using namespace attention;

template <int kDPad>
constexpr size_t forward_shared_bytes() {
  // Q, K, V tiles, the score tile, and per-row max, sum and rescale factor.
  return sizeof(float) * (3 * kTile * (kDPad + 1) + kTile * (kTile + 1) + 3 * kTile);
}

template <typename Storage, int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Storage* out, float* logsumexp, const Storage* qkv, int T, int H,
                             int Hkv, int D, float scale, bool qkv_packed) {
  constexpr int kStride = kDPad + 1, kScoreStride = kTile + 1, kColumns = kDPad / kSide;
  extern __shared__ float shared[];
  float* q_tile = shared;
  float* k_tile = q_tile + kTile * kStride;
  float* v_tile = k_tile + kTile * kStride;
  float* scores = v_tile + kTile * kStride;  // [query][key]
  float* row_max = scores + kTile * kScoreStride;
  float* row_sum = row_max + kTile;
  float* row_rescale = row_sum + kTile;

  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t C = static_cast<size_t>(H) * D;
  const HeadPointers head = query_head_pointers(T, H, Hkv, D);
  const size_t C3 = head.stride;
  // The last query tile has the most key tiles: launch it first.
  const int row0 = (gridDim.y - 1 - blockIdx.y) * kTile;
  const int rows = min(kTile, T - row0);
  const Storage* query = qkv + head.qkv_offset;
  const Storage* key = qkv + head.key_offset;
  const Storage* value = qkv + head.value_offset;

  load_tile<kTile, kDPad>(q_tile, query + row0 * C3, C3, rows, D, qkv_packed);
  if (threadIdx.x < kTile) {
    row_max[threadIdx.x] = -INFINITY;
    row_sum[threadIdx.x] = 0.0f;
  }
  float acc[kPerThread][kColumns] = {};  // O for queries ty + 16i, columns tx + 16j

  // Keys past the tile's last query are masked for every row: stop there.
  const int key_end = min(row0 + kTile, T);
  for (int col0 = 0; col0 < key_end; col0 += kTile) {
    const int cols = min(kTile, T - col0);
    __syncthreads();  // the previous tile's readers are done with K, V and scores
    load_tile<kTile, kDPad>(k_tile, key + col0 * C3, C3, cols, D, qkv_packed);
    load_tile<kTile, kDPad>(v_tile, value + col0 * C3, C3, cols, D, qkv_packed);
    __syncthreads();

    // S for queries ty + 16i and keys tx + 16j, masked to -inf.
    float s[kPerThread][kPerThread] = {};
#pragma unroll 8
    for (int d = 0; d < kDPad; d++) {
      float q[kPerThread], k[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) q[i] = q_tile[(ty + kSide * i) * kStride + d];
#pragma unroll
      for (int j = 0; j < kPerThread; j++) k[j] = k_tile[(tx + kSide * j) * kStride + d];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
#pragma unroll
        for (int j = 0; j < kPerThread; j++) s[i][j] = fmaf(q[i], k[j], s[i][j]);
      }
    }
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
#pragma unroll
      for (int j = 0; j < kPerThread; j++) {
        const int r = ty + kSide * i, c = tx + kSide * j;
        const bool visible = col0 + c <= row0 + r && c < cols;
        scores[r * kScoreStride + c] = visible ? s[i][j] * scale : -INFINITY;
      }
    }
    __syncthreads();

    // Online softmax: warp w takes rows w, w + 8, ...; lane holds keys lane and lane + 32.
    for (int r = warp; r < kTile; r += kWarps) {
      float* score_row = scores + r * kScoreStride;
      const float previous_max = row_max[r];
      const float s0 = score_row[lane], s1 = score_row[lane + 32];
      const float new_max = fmaxf(previous_max, warp_max(fmaxf(s0, s1)));
      // Rows past the end of the sequence see no key at all: keep them finite.
      const float shift = new_max == -INFINITY ? 0.0f : new_max;
      const float p0 = expf(s0 - shift), p1 = expf(s1 - shift);  // masked: exp(-inf) = 0
      score_row[lane] = p0;
      score_row[lane + 32] = p1;
      const float tile_sum = warp_sum(p0 + p1);
      __syncwarp();  // every lane has read row_max[r] before lane 0 replaces it
      if (lane == 0) {
        const float rescale = expf(previous_max - shift);  // 0 on the first tile
        row_rescale[r] = rescale;
        row_sum[r] = row_sum[r] * rescale + tile_sum;
        row_max[r] = new_max;
      }
    }
    __syncthreads();

    // O = O * rescale + P V.
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
      const float rescale = row_rescale[ty + kSide * i];
#pragma unroll
      for (int j = 0; j < kColumns; j++) acc[i][j] *= rescale;
    }
#pragma unroll 4
    for (int c = 0; c < kTile; c++) {
      float p[kPerThread], v[kColumns];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) p[i] = scores[(ty + kSide * i) * kScoreStride + c];
#pragma unroll
      for (int j = 0; j < kColumns; j++) v[j] = v_tile[c * kStride + tx + kSide * j];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
#pragma unroll
        for (int j = 0; j < kColumns; j++) acc[i][j] = fmaf(p[i], v[j], acc[i][j]);
      }
    }
  }

  // The last softmax step's row_sum and row_max were published by the
  // __syncthreads before the P V product.
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int r = ty + kSide * i;
    if (r >= rows) continue;
    const float inverse_sum = 1.0f / row_sum[r];
    Storage* out_row = out + head.out_offset + (row0 + r) * C;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < D) out_row[d] = narrow<Storage>(acc[i][j] * inverse_sum);
    }
  }
  if (threadIdx.x < rows) {
    const int r = threadIdx.x;
    logsumexp[head.row_offset + row0 + r] = row_max[r] + logf(row_sum[r]);
  }
}

}  // namespace

void attention_forward(DType storage, bool tensor_cores, void* out, float* logsumexp,
                       const void* qkv, int batch, int seq_len, int num_heads, int num_kv_heads,
                       int head_dim, cudaStream_t stream) {
  if (!valid_shape(batch, seq_len, num_heads, num_kv_heads, head_dim)) return;
  if (tensor_cores && tensor_core_applies(storage, head_dim, {out, qkv})) {
    attention_forward_tensor_core(static_cast<bf16*>(out), logsumexp, static_cast<const bf16*>(qkv),
                                  batch, seq_len, num_heads, num_kv_heads, head_dim, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned int>(batch * num_heads), ceil_div(seq_len, kTile));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const bool qkv_packed = packed_rows(storage, qkv, head_dim);
  with_storage(storage, [&](auto tag) {
    using Storage = typename decltype(tag)::type;
    dispatch_head_dim(head_dim, [&](auto padded) {
      constexpr int kDPad = decltype(padded)::value;
      constexpr size_t bytes = forward_shared_bytes<kDPad>();
      allow_shared_memory(attention_forward_kernel<Storage, kDPad>, bytes);
      attention_forward_kernel<Storage, kDPad><<<grid, kThreads, bytes, stream>>>(
          static_cast<Storage*>(out), logsumexp, static_cast<const Storage*>(qkv), seq_len,
          num_heads, num_kv_heads, head_dim, scale, qkv_packed);
      PARAPLAN_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace paraplan::kernels::cuda
