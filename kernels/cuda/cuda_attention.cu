// cuda_attention.cu: fused causal multi-head self-attention (flash attention),
// forward and backward, for the CUDA backend (kernels/ops.h). No T x T tensor
// exists: scores live one tile at a time in shared memory; forward saves the
// per-row logsumexp L and backward recomputes the probabilities P = exp(S - L).
//
// Per (batch b, head h): Q, K, V are the head's [T, D] slices of qkv (row
// stride 3C, read in place), S = Q K^T / sqrt(D), causal (key <= query). fp32
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
// Backward, three kernels, no atomics (every output element has one owner):
//   1. row_dot[b, h, t] = dOut_t . out_t, one warp per row, into the caller's
//      [B, H, T] scratch (the softmax backward's rowsum(P * dP)).
//   2. dK, dV: one block per (64-key tile, b, h) holding K, V; per 32-query
//      tile from the key tile's first key to T: P^T and dS^T = P * (dP -
//      row_dot), dP = dOut V^T (each thread 4 keys x 2 queries), then
//      dV += P^T dOut, dK += dS^T Q in registers (4 keys x Dp/16 columns).
//   3. dQ: one block per (64-query tile, b, h) holding Q, dOut; per 32-key tile
//      up to the diagonal: dS as in 2, then dQ += dS K in registers.
//   dK and dQ are scaled once at the end and added into dqkv.
// Deterministic: every sum runs in a fixed order (d ascending in FMA chains,
// fixed butterflies, tiles in order), the grid depends on the shape only and
// every (b, h) runs the same code, so the bits do not depend on the batch.
// Loads into shared memory are float4 when D % 4 == 0 and the base pointer is
// 16-byte aligned (then every row start is: 3C and C are multiples of 4).
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

constexpr int kSide = 16;  // threads per side of the 16 x 16 block
constexpr int kThreads = kSide * kSide;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 64;                  // queries (forward, dQ) or keys (dK/dV) a block owns
constexpr int kSubTile = 32;               // the other side's rows per step in the backward kernels
constexpr int kPerThread = kTile / kSide;  // 4 owned rows per thread
constexpr int kSubPerThread = kSubTile / kSide;  // 2 sub-tile rows per thread
constexpr int kMaxHeadDim = 128;

// Copies rows [0, valid_rows) x columns [0, D) of a row-major global matrix
// (rows source_stride floats apart) into a [kRows][kDPad + 1] shared tile and
// zeroes the rest of the tile.
template <int kRows, int kDPad>
__device__ void load_tile(float* tile, const float* source, size_t source_stride, int valid_rows,
                          int D, bool vector4) {
  constexpr int kStride = kDPad + 1;
  if (vector4) {
    constexpr int kGroups = kDPad / 4;
    for (int index = threadIdx.x; index < kRows * kGroups; index += kThreads) {
      const int row = index / kGroups, column = (index % kGroups) * 4;
      float4 value = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (row < valid_rows && column < D) {
        value = *reinterpret_cast<const float4*>(source + row * source_stride + column);
      }
      float* destination = tile + row * kStride + column;
      destination[0] = value.x;
      destination[1] = value.y;
      destination[2] = value.z;
      destination[3] = value.w;
    }
  } else {
    for (int index = threadIdx.x; index < kRows * kDPad; index += kThreads) {
      const int row = index / kDPad, column = index % kDPad;
      tile[row * kStride + column] =
          row < valid_rows && column < D ? source[row * source_stride + column] : 0.0f;
    }
  }
}

// Where one (b, h) head's operands start.
struct HeadPointers {
  size_t qkv_offset;  // row 0 of the head's Q in qkv (K: + C, V: + 2C)
  size_t out_offset;  // row 0 of the head in out and dout
  size_t row_offset;  // the head's first row in logsumexp and row_dot
};

__device__ HeadPointers head_pointers(int T, int H, int D) {
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const size_t C = static_cast<size_t>(H) * D;
  return {static_cast<size_t>(b) * T * 3 * C + static_cast<size_t>(h) * D,
          static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * D,
          (static_cast<size_t>(b) * H + h) * T};
}

template <int kDPad>
constexpr size_t forward_shared_bytes() {
  // Q, K, V tiles, the score tile, and per-row max, sum and rescale factor.
  return sizeof(float) * (3 * kTile * (kDPad + 1) + kTile * (kTile + 1) + 3 * kTile);
}

template <int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(float* out, float* logsumexp, const float* qkv, int T, int H, int D,
                             float scale, bool qkv_vector4) {
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
  const size_t C = static_cast<size_t>(H) * D, C3 = 3 * C;
  const HeadPointers head = head_pointers(T, H, D);
  // The last query tile has the most key tiles: launch it first.
  const int row0 = (gridDim.y - 1 - blockIdx.y) * kTile;
  const int rows = min(kTile, T - row0);
  const float* query = qkv + head.qkv_offset;
  const float* key = query + C;
  const float* value = query + 2 * C;

  load_tile<kTile, kDPad>(q_tile, query + row0 * C3, C3, rows, D, qkv_vector4);
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
    load_tile<kTile, kDPad>(k_tile, key + col0 * C3, C3, cols, D, qkv_vector4);
    load_tile<kTile, kDPad>(v_tile, value + col0 * C3, C3, cols, D, qkv_vector4);
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
    float* out_row = out + head.out_offset + (row0 + r) * C;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < D) out_row[d] = acc[i][j] * inverse_sum;
    }
  }
  if (threadIdx.x < rows) {
    const int r = threadIdx.x;
    logsumexp[head.row_offset + row0 + r] = row_max[r] + logf(row_sum[r]);
  }
}

// row_dot[row] = sum_d dout[b, t, h, d] * out[b, t, h, d] for row = (b * H + h) * T + t:
// one warp per row, lanes over d, then the butterfly.
__global__ void attention_row_dot_kernel(float* row_dot, const float* dout, const float* out, int T,
                                         int H, int D, size_t rows) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  const size_t t = row % T, bh = row / T, h = bh % H, b = bh / H;
  const size_t offset = (b * T + t) * H * D + h * D;
  float sum = 0.0f;
  for (int d = lane; d < D; d += 32) sum = fmaf(dout[offset + d], out[offset + d], sum);
  sum = warp_sum(sum);
  if (lane == 0) row_dot[row] = sum;
}

template <int kDPad>
constexpr size_t backward_dkdv_shared_bytes() {
  // K, V tiles; Q, dOut sub-tiles; P^T and dS^T; logsumexp and row_dot of the sub-tile.
  return sizeof(float) * (2 * kTile * (kDPad + 1) + 2 * kSubTile * (kDPad + 1) +
                          2 * kTile * (kSubTile + 1) + 2 * kSubTile);
}

template <int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(float* dqkv, const float* qkv, const float* dout,
                                   const float* logsumexp, const float* row_dot, int T, int H,
                                   int D, float scale, bool qkv_vector4, bool dout_vector4) {
  constexpr int kStride = kDPad + 1, kProbabilityStride = kSubTile + 1, kColumns = kDPad / kSide;
  extern __shared__ float shared[];
  float* k_tile = shared;
  float* v_tile = k_tile + kTile * kStride;
  float* q_tile = v_tile + kTile * kStride;
  float* dout_tile = q_tile + kSubTile * kStride;
  float* p_tile = dout_tile + kSubTile * kStride;          // P^T [key][query]
  float* ds_tile = p_tile + kTile * kProbabilityStride;    // dS^T [key][query]
  float* lse_tile = ds_tile + kTile * kProbabilityStride;  // [query]
  float* row_dot_tile = lse_tile + kSubTile;               // [query]

  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const size_t C = static_cast<size_t>(H) * D, C3 = 3 * C;
  const HeadPointers head = head_pointers(T, H, D);
  // Key tile 0 sees every query, the most work: it has the lowest block index.
  const int col0 = blockIdx.y * kTile;
  const int cols = min(kTile, T - col0);
  const float* query = qkv + head.qkv_offset;
  const float* dout_head = dout + head.out_offset;

  load_tile<kTile, kDPad>(k_tile, query + C + col0 * C3, C3, cols, D, qkv_vector4);
  load_tile<kTile, kDPad>(v_tile, query + 2 * C + col0 * C3, C3, cols, D, qkv_vector4);
  float dk[kPerThread][kColumns] = {}, dv[kPerThread][kColumns] = {};  // keys ty + 16i

  // Queries before the tile's first key see none of its keys.
  for (int row0 = col0; row0 < T; row0 += kSubTile) {
    const int rows = min(kSubTile, T - row0);
    __syncthreads();  // the previous step's readers are done with the sub-tiles
    load_tile<kSubTile, kDPad>(q_tile, query + row0 * C3, C3, rows, D, qkv_vector4);
    load_tile<kSubTile, kDPad>(dout_tile, dout_head + row0 * C, C, rows, D, dout_vector4);
    if (threadIdx.x < kSubTile) {
      const int r = threadIdx.x;
      lse_tile[r] = r < rows ? logsumexp[head.row_offset + row0 + r] : 0.0f;
      row_dot_tile[r] = r < rows ? row_dot[head.row_offset + row0 + r] : 0.0f;
    }
    __syncthreads();

    // S^T and dP^T for keys ty + 16i and queries tx + 16j.
    float s[kPerThread][kSubPerThread] = {}, dp[kPerThread][kSubPerThread] = {};
#pragma unroll 4
    for (int d = 0; d < kDPad; d++) {
      float k[kPerThread], v[kPerThread], q[kSubPerThread], g[kSubPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
        k[i] = k_tile[(ty + kSide * i) * kStride + d];
        v[i] = v_tile[(ty + kSide * i) * kStride + d];
      }
#pragma unroll
      for (int j = 0; j < kSubPerThread; j++) {
        q[j] = q_tile[(tx + kSide * j) * kStride + d];
        g[j] = dout_tile[(tx + kSide * j) * kStride + d];
      }
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
#pragma unroll
        for (int j = 0; j < kSubPerThread; j++) {
          s[i][j] = fmaf(q[j], k[i], s[i][j]);  // the forward's operand order
          dp[i][j] = fmaf(g[j], v[i], dp[i][j]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
#pragma unroll
      for (int j = 0; j < kSubPerThread; j++) {
        const int c = ty + kSide * i, r = tx + kSide * j;
        // Implies key < T, since the query is.
        const bool visible = col0 + c <= row0 + r && r < rows;
        const float p = visible ? expf(s[i][j] * scale - lse_tile[r]) : 0.0f;
        p_tile[c * kProbabilityStride + r] = p;
        ds_tile[c * kProbabilityStride + r] = visible ? p * (dp[i][j] - row_dot_tile[r]) : 0.0f;
      }
    }
    __syncthreads();

    // dV += P^T dOut, dK += dS^T Q for keys ty + 16i, columns tx + 16j.
#pragma unroll 4
    for (int r = 0; r < kSubTile; r++) {
      float p[kPerThread], ds[kPerThread], g[kColumns], q[kColumns];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
        p[i] = p_tile[(ty + kSide * i) * kProbabilityStride + r];
        ds[i] = ds_tile[(ty + kSide * i) * kProbabilityStride + r];
      }
#pragma unroll
      for (int j = 0; j < kColumns; j++) {
        g[j] = dout_tile[r * kStride + tx + kSide * j];
        q[j] = q_tile[r * kStride + tx + kSide * j];
      }
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
#pragma unroll
        for (int j = 0; j < kColumns; j++) {
          dv[i][j] = fmaf(p[i], g[j], dv[i][j]);
          dk[i][j] = fmaf(ds[i], q[j], dk[i][j]);
        }
      }
    }
  }

  // This block alone owns these rows of dK and dV: plain read-modify-write.
  float* dkey = dqkv + head.qkv_offset + C;
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int c = ty + kSide * i;
    if (c >= cols) continue;
    float* dkey_row = dkey + (col0 + c) * C3;
    float* dvalue_row = dkey_row + C;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < D) {
        dkey_row[d] += dk[i][j] * scale;
        dvalue_row[d] += dv[i][j];
      }
    }
  }
}

template <int kDPad>
constexpr size_t backward_dq_shared_bytes() {
  // Q, dOut tiles; K, V sub-tiles; dS; logsumexp and row_dot of the tile.
  return sizeof(float) * (2 * kTile * (kDPad + 1) + 2 * kSubTile * (kDPad + 1) +
                          kTile * (kSubTile + 1) + 2 * kTile);
}

template <int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(float* dqkv, const float* qkv, const float* dout,
                                 const float* logsumexp, const float* row_dot, int T, int H, int D,
                                 float scale, bool qkv_vector4, bool dout_vector4) {
  constexpr int kStride = kDPad + 1, kScoreStride = kSubTile + 1, kColumns = kDPad / kSide;
  extern __shared__ float shared[];
  float* q_tile = shared;
  float* dout_tile = q_tile + kTile * kStride;
  float* k_tile = dout_tile + kTile * kStride;
  float* v_tile = k_tile + kSubTile * kStride;
  float* ds_tile = v_tile + kSubTile * kStride;  // dS [query][key]
  float* lse_tile = ds_tile + kTile * kScoreStride;
  float* row_dot_tile = lse_tile + kTile;

  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const size_t C = static_cast<size_t>(H) * D, C3 = 3 * C;
  const HeadPointers head = head_pointers(T, H, D);
  const int row0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // longest rows first
  const int rows = min(kTile, T - row0);
  const float* query = qkv + head.qkv_offset;

  load_tile<kTile, kDPad>(q_tile, query + row0 * C3, C3, rows, D, qkv_vector4);
  load_tile<kTile, kDPad>(dout_tile, dout + head.out_offset + row0 * C, C, rows, D, dout_vector4);
  if (threadIdx.x < kTile) {
    const int r = threadIdx.x;
    lse_tile[r] = r < rows ? logsumexp[head.row_offset + row0 + r] : 0.0f;
    row_dot_tile[r] = r < rows ? row_dot[head.row_offset + row0 + r] : 0.0f;
  }
  float dq[kPerThread][kColumns] = {};  // queries ty + 16i, columns tx + 16j

  const int key_end = min(row0 + kTile, T);
  for (int col0 = 0; col0 < key_end; col0 += kSubTile) {
    const int cols = min(kSubTile, T - col0);
    __syncthreads();  // the previous step's readers are done with K, V and dS
    load_tile<kSubTile, kDPad>(k_tile, query + C + col0 * C3, C3, cols, D, qkv_vector4);
    load_tile<kSubTile, kDPad>(v_tile, query + 2 * C + col0 * C3, C3, cols, D, qkv_vector4);
    __syncthreads();

    // S and dP for queries ty + 16i and keys tx + 16j.
    float s[kPerThread][kSubPerThread] = {}, dp[kPerThread][kSubPerThread] = {};
#pragma unroll 4
    for (int d = 0; d < kDPad; d++) {
      float q[kPerThread], g[kPerThread], k[kSubPerThread], v[kSubPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
        q[i] = q_tile[(ty + kSide * i) * kStride + d];
        g[i] = dout_tile[(ty + kSide * i) * kStride + d];
      }
#pragma unroll
      for (int j = 0; j < kSubPerThread; j++) {
        k[j] = k_tile[(tx + kSide * j) * kStride + d];
        v[j] = v_tile[(tx + kSide * j) * kStride + d];
      }
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
#pragma unroll
        for (int j = 0; j < kSubPerThread; j++) {
          s[i][j] = fmaf(q[i], k[j], s[i][j]);
          dp[i][j] = fmaf(g[i], v[j], dp[i][j]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
#pragma unroll
      for (int j = 0; j < kSubPerThread; j++) {
        const int r = ty + kSide * i, c = tx + kSide * j;
        const bool visible = col0 + c <= row0 + r && r < rows;
        const float p = visible ? expf(s[i][j] * scale - lse_tile[r]) : 0.0f;
        ds_tile[r * kScoreStride + c] = visible ? p * (dp[i][j] - row_dot_tile[r]) : 0.0f;
      }
    }
    __syncthreads();

    // dQ += dS K.
#pragma unroll 4
    for (int c = 0; c < kSubTile; c++) {
      float ds[kPerThread], k[kColumns];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) ds[i] = ds_tile[(ty + kSide * i) * kScoreStride + c];
#pragma unroll
      for (int j = 0; j < kColumns; j++) k[j] = k_tile[c * kStride + tx + kSide * j];
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
#pragma unroll
        for (int j = 0; j < kColumns; j++) dq[i][j] = fmaf(ds[i], k[j], dq[i][j]);
      }
    }
  }

  float* dquery = dqkv + head.qkv_offset;
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int r = ty + kSide * i;
    if (r >= rows) continue;
    float* dquery_row = dquery + (row0 + r) * C3;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < D) dquery_row[d] += dq[i][j] * scale;
    }
  }
}

// ---- host side ---------------------------------------------------------------------------------

bool valid_shape(int batch, int seq_len, int num_heads, int head_dim) {
  if (batch <= 0 || seq_len <= 0 || num_heads <= 0 || head_dim <= 0) return false;
  if (head_dim > kMaxHeadDim) {
    throw std::invalid_argument("CUDA attention: head_dim " + std::to_string(head_dim) +
                                " exceeds the supported " + std::to_string(kMaxHeadDim));
  }
  return true;
}

// Lets `kernel` use `bytes` of dynamic shared memory (beyond the default 48 KiB).
template <typename Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes) {
  int device = 0, limit = 0;
  PARAPLAN_CUDA_CHECK(cudaGetDevice(&device));
  PARAPLAN_CUDA_CHECK(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(limit)) {
    throw std::invalid_argument("CUDA attention: this head_dim needs " + std::to_string(bytes) +
                                " bytes of shared memory per block; the device offers " +
                                std::to_string(limit));
  }
  PARAPLAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
}

// One call's operands: forward writes out and new_logsumexp from qkv; backward
// reads the rest and adds into dqkv.
struct Problem {
  float* out;
  float* new_logsumexp;
  float* dqkv;
  const float* qkv;
  const float* dout;
  const float* logsumexp;
  const float* row_dot;
  int batch, seq_len, num_heads, head_dim;
};

// Forward, or the dK/dV and dQ kernels of backward, for head dims up to kDPad.
template <int kDPad>
void launch(const Problem& p, bool forward, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>(p.batch * p.num_heads), ceil_div(p.seq_len, kTile));
  const float scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  const bool qkv_vector4 = p.head_dim % 4 == 0 && is_aligned16(p.qkv);
  if (forward) {
    constexpr size_t bytes = forward_shared_bytes<kDPad>();
    allow_shared_memory(attention_forward_kernel<kDPad>, bytes);
    attention_forward_kernel<kDPad><<<grid, kThreads, bytes, stream>>>(
        p.out, p.new_logsumexp, p.qkv, p.seq_len, p.num_heads, p.head_dim, scale, qkv_vector4);
    PARAPLAN_CUDA_CHECK_LAUNCH();
    return;
  }
  const bool dout_vector4 = p.head_dim % 4 == 0 && is_aligned16(p.dout);
  constexpr size_t dkdv_bytes = backward_dkdv_shared_bytes<kDPad>();
  allow_shared_memory(attention_backward_dkdv_kernel<kDPad>, dkdv_bytes);
  attention_backward_dkdv_kernel<kDPad><<<grid, kThreads, dkdv_bytes, stream>>>(
      p.dqkv, p.qkv, p.dout, p.logsumexp, p.row_dot, p.seq_len, p.num_heads, p.head_dim, scale,
      qkv_vector4, dout_vector4);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  constexpr size_t dq_bytes = backward_dq_shared_bytes<kDPad>();
  allow_shared_memory(attention_backward_dq_kernel<kDPad>, dq_bytes);
  attention_backward_dq_kernel<kDPad><<<grid, kThreads, dq_bytes, stream>>>(
      p.dqkv, p.qkv, p.dout, p.logsumexp, p.row_dot, p.seq_len, p.num_heads, p.head_dim, scale,
      qkv_vector4, dout_vector4);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

// The instantiation for the smallest padded head size that holds head_dim.
void dispatch(const Problem& p, bool forward, cudaStream_t stream) {
  if (p.head_dim <= 16) {
    launch<16>(p, forward, stream);
  } else if (p.head_dim <= 32) {
    launch<32>(p, forward, stream);
  } else if (p.head_dim <= 64) {
    launch<64>(p, forward, stream);
  } else {
    launch<128>(p, forward, stream);
  }
}

}  // namespace

void attention_forward(float* out, float* logsumexp, const float* qkv, int batch, int seq_len,
                       int num_heads, int head_dim, cudaStream_t stream) {
  if (!valid_shape(batch, seq_len, num_heads, head_dim)) return;
  dispatch({out, logsumexp, nullptr, qkv, nullptr, nullptr, nullptr, batch, seq_len, num_heads,
            head_dim},
           true, stream);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* logsumexp, int batch, int seq_len,
                        int num_heads, int head_dim, cudaStream_t stream) {
  if (!valid_shape(batch, seq_len, num_heads, head_dim)) return;
  const size_t rows = static_cast<size_t>(batch) * num_heads * seq_len;
  attention_row_dot_kernel<<<ceil_div(rows, kWarps), kThreads, 0, stream>>>(
      scratch, dout, out, seq_len, num_heads, head_dim, rows);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  dispatch(
      {nullptr, nullptr, dqkv, qkv, dout, logsumexp, scratch, batch, seq_len, num_heads, head_dim},
      false, stream);
}

}  // namespace paraplan::kernels::cuda
