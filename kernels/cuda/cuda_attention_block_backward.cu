// cuda_attention_block_backward.cu: the backward of attention by blocks for
// the CUDA backend (kernels/ops.h attention_block_backward; the forward and
// the mask are described in cuda_attention_block.cu): given the whole
// result's out and logsumexp, one block's gradients are added (fp32) into
// dq_accumulator [B, q_len, H D] and the packed dkv_accumulator [B, kv_len,
// 2 Hkv D]. Three kernels, as cuda_attention_backward.cu's, no atomics (every
// accumulator element has one owner, so the sums have a fixed order):
//   1. row_dot[b, h, i] = dOut_i . out_i, one warp per row, into the Ops'
//      device scratch.
//   2. dQ: one block per (64-query tile, b, h) holding Q, dOut; per 32-key
//      tile the block votes whether any pair is visible (else skips it),
//      then P = exp(S - lse) (masked: 0), dS = P (dP - row_dot) and
//      dQ += dS K in registers; dq_accumulator += dQ * scale at the end.
//   3. dK, dV: one block per (64-key tile, b, KV head) holding K, V; for each
//      query head of the group in turn, per 32-query tile (every tile of the
//      block's queries: positions need not be sorted, so the vote skips the
//      masked ones), P^T and dS^T as in 2, then dV += P^T dOut, dK += dS^T Q;
//      dkv_accumulator += (dK * scale | dV) at the end.
// A row with logsumexp -inf sees no key anywhere: every entry of it is masked
// and exp is never taken of its +inf difference.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_attention_block.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

using namespace attention;
using namespace attention_block;

// The tensors of one backward call.
template <typename Storage>
struct BackwardTensors {
  float* dq_accumulator;
  float* dkv_accumulator;
  const Storage* dout;
  const float* logsumexp;
  const float* row_dot;
  const Storage* q;
  const Storage* kv;
  const int32_t* q_positions;
  const int32_t* kv_positions;
  const int32_t* documents;
};

template <int kDPad>
constexpr size_t dq_shared_bytes() {
  // Q, dOut tiles; K, V sub-tiles; dS; logsumexp and row_dot of the tile;
  // int32 positions and documents of the tile and the sub-tile.
  return sizeof(float) * (2 * kTile * (kDPad + 1) + 2 * kSubTile * (kDPad + 1) +
                          kTile * (kSubTile + 1) + 2 * kTile) +
         sizeof(int32_t) * (2 * kTile + 2 * kSubTile);
}

template <typename Storage, int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_block_dq_kernel(BackwardTensors<Storage> t, Shape s, float scale, bool q_packed,
                              bool kv_packed, bool dout_packed) {
  constexpr int kStride = kDPad + 1, kScoreStride = kSubTile + 1, kColumns = kDPad / kSide;
  extern __shared__ float shared[];
  float* q_tile = shared;
  float* dout_tile = q_tile + kTile * kStride;
  float* k_tile = dout_tile + kTile * kStride;
  float* v_tile = k_tile + kSubTile * kStride;
  float* ds_tile = v_tile + kSubTile * kStride;  // dS [query][key]
  float* lse_tile = ds_tile + kTile * kScoreStride;
  float* row_dot_tile = lse_tile + kTile;
  int32_t* q_pos = reinterpret_cast<int32_t*>(row_dot_tile + kTile);
  int32_t* q_doc = q_pos + kTile;
  int32_t* k_pos = q_doc + kTile;
  int32_t* k_doc = k_pos + kSubTile;

  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int b = blockIdx.x / s.num_heads, h = blockIdx.x % s.num_heads;
  const BlockHead head = block_head(s, b, h);
  const size_t C = static_cast<size_t>(s.num_heads) * s.head_dim;
  const size_t q_stride = s.q_row_stride, kv_stride = s.kv_row_stride;
  const int row0 = blockIdx.y * kTile;
  const int rows = min(kTile, s.q_len - row0);

  load_tile<kTile, kDPad>(q_tile, t.q + head.q_offset + row0 * q_stride, q_stride, rows, s.head_dim,
                          q_packed);
  load_tile<kTile, kDPad>(dout_tile, t.dout + head.out_offset + row0 * C, C, rows, s.head_dim,
                          dout_packed);
  load_positions<kTile>(q_pos, q_doc, t.q_positions, t.documents, b, s.seq_len, row0, rows,
                        kPaddingQuery);
  if (threadIdx.x < kTile) {
    const int r = threadIdx.x;
    lse_tile[r] = r < rows ? t.logsumexp[head.row_offset + row0 + r] : 0.0f;
    row_dot_tile[r] = r < rows ? t.row_dot[head.row_offset + row0 + r] : 0.0f;
  }
  float dq[kPerThread][kColumns] = {};  // queries ty + 16i, columns tx + 16j

  for (int col0 = 0; col0 < s.kv_len; col0 += kSubTile) {
    const int cols = min(kSubTile, s.kv_len - col0);
    __syncthreads();  // the previous step's readers are done with k_pos, K, V and dS
    load_positions<kSubTile>(k_pos, k_doc, t.kv_positions, t.documents, b, s.seq_len, col0, cols,
                             kPaddingKey);
    __syncthreads();
    bool visible[kPerThread][kSubPerThread];
    if (!vote_visible<kPerThread, kSubPerThread, true>(visible, q_pos, q_doc, k_pos, k_doc))
      continue;
    load_tile<kSubTile, kDPad>(k_tile, t.kv + head.key_offset + col0 * kv_stride, kv_stride, cols,
                               s.head_dim, kv_packed);
    load_tile<kSubTile, kDPad>(v_tile, t.kv + head.value_offset + col0 * kv_stride, kv_stride, cols,
                               s.head_dim, kv_packed);
    __syncthreads();

    // S and dP for queries ty + 16i and keys tx + 16j.
    float score[kPerThread][kSubPerThread] = {}, dp[kPerThread][kSubPerThread] = {};
    row_products<kPerThread, kSubPerThread, kDPad, true>(score, dp, q_tile, k_tile, dout_tile,
                                                         v_tile);
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
#pragma unroll
      for (int j = 0; j < kSubPerThread; j++) {
        const int r = ty + kSide * i, c = tx + kSide * j;
        const float p = visible[i][j] ? expf(score[i][j] * scale - lse_tile[r]) : 0.0f;
        ds_tile[r * kScoreStride + c] = visible[i][j] ? p * (dp[i][j] - row_dot_tile[r]) : 0.0f;
      }
    }
    __syncthreads();

    weighted_sum<kPerThread, kDPad, kSubTile>(dq, ds_tile, kScoreStride, k_tile);  // dQ += dS K
  }

  // This block alone owns these rows of dq_accumulator.
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int r = ty + kSide * i;
    if (r >= rows) continue;
    float* dq_row = t.dq_accumulator + head.out_offset + (row0 + r) * C;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < s.head_dim) dq_row[d] += dq[i][j] * scale;
    }
  }
}

template <int kDPad>
constexpr size_t dkv_shared_bytes() {
  // K, V tiles; Q, dOut sub-tiles; P^T and dS^T; logsumexp and row_dot of the
  // sub-tile; int32 positions and documents of the tile and the sub-tile.
  return sizeof(float) * (2 * kTile * (kDPad + 1) + 2 * kSubTile * (kDPad + 1) +
                          2 * kTile * (kSubTile + 1) + 2 * kSubTile) +
         sizeof(int32_t) * (2 * kTile + 2 * kSubTile);
}

template <typename Storage, int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_block_dkv_kernel(BackwardTensors<Storage> t, Shape s, float scale, bool q_packed,
                               bool kv_packed, bool dout_packed) {
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
  int32_t* k_pos = reinterpret_cast<int32_t*>(row_dot_tile + kSubTile);
  int32_t* k_doc = k_pos + kTile;
  int32_t* q_pos = k_doc + kTile;
  int32_t* q_doc = q_pos + kSubTile;

  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int group = s.num_heads / s.num_kv_heads;
  const int b = blockIdx.x / s.num_kv_heads, kv_head = blockIdx.x % s.num_kv_heads;
  const BlockHead kv_view = block_head(s, b, kv_head * group);  // the group's first query head
  const size_t C = static_cast<size_t>(s.num_heads) * s.head_dim;
  const size_t q_stride = s.q_row_stride, kv_stride = s.kv_row_stride;
  const int col0 = blockIdx.y * kTile;
  const int cols = min(kTile, s.kv_len - col0);

  load_tile<kTile, kDPad>(k_tile, t.kv + kv_view.key_offset + col0 * kv_stride, kv_stride, cols,
                          s.head_dim, kv_packed);
  load_tile<kTile, kDPad>(v_tile, t.kv + kv_view.value_offset + col0 * kv_stride, kv_stride, cols,
                          s.head_dim, kv_packed);
  load_positions<kTile>(k_pos, k_doc, t.kv_positions, t.documents, b, s.seq_len, col0, cols,
                        kPaddingKey);
  float dk[kPerThread][kColumns] = {}, dv[kPerThread][kColumns] = {};  // keys ty + 16i

  // The query heads sharing this KV head, in order: their dK and dV sum here.
  for (int member = 0; member < group; member++) {
    const BlockHead head = block_head(s, b, kv_head * group + member);
    for (int row0 = 0; row0 < s.q_len; row0 += kSubTile) {
      const int rows = min(kSubTile, s.q_len - row0);
      __syncthreads();  // the previous step's readers are done with q_pos and the sub-tiles
      load_positions<kSubTile>(q_pos, q_doc, t.q_positions, t.documents, b, s.seq_len, row0, rows,
                               kPaddingQuery);
      __syncthreads();
      bool visible[kPerThread][kSubPerThread];  // keys ty + 16i, queries tx + 16j
      if (!vote_visible<kPerThread, kSubPerThread, false>(visible, q_pos, q_doc, k_pos, k_doc))
        continue;
      load_tile<kSubTile, kDPad>(q_tile, t.q + head.q_offset + row0 * q_stride, q_stride, rows,
                                 s.head_dim, q_packed);
      load_tile<kSubTile, kDPad>(dout_tile, t.dout + head.out_offset + row0 * C, C, rows,
                                 s.head_dim, dout_packed);
      if (threadIdx.x < kSubTile) {
        const int r = threadIdx.x;
        lse_tile[r] = r < rows ? t.logsumexp[head.row_offset + row0 + r] : 0.0f;
        row_dot_tile[r] = r < rows ? t.row_dot[head.row_offset + row0 + r] : 0.0f;
      }
      __syncthreads();

      // S^T and dP^T for keys ty + 16i and queries tx + 16j.
      float score[kPerThread][kSubPerThread] = {}, dp[kPerThread][kSubPerThread] = {};
      row_products<kPerThread, kSubPerThread, kDPad, true>(score, dp, k_tile, q_tile, v_tile,
                                                           dout_tile);
#pragma unroll
      for (int i = 0; i < kPerThread; i++) {
#pragma unroll
        for (int j = 0; j < kSubPerThread; j++) {
          const int c = ty + kSide * i, r = tx + kSide * j;
          const float p = visible[i][j] ? expf(score[i][j] * scale - lse_tile[r]) : 0.0f;
          p_tile[c * kProbabilityStride + r] = p;
          ds_tile[c * kProbabilityStride + r] =
              visible[i][j] ? p * (dp[i][j] - row_dot_tile[r]) : 0.0f;
        }
      }
      __syncthreads();

      // dV += P^T dOut, dK += dS^T Q for keys ty + 16i, columns tx + 16j.
      weighted_sum<kPerThread, kDPad, kSubTile>(dv, p_tile, kProbabilityStride, dout_tile);
      weighted_sum<kPerThread, kDPad, kSubTile>(dk, ds_tile, kProbabilityStride, q_tile);
    }
  }

  // This block alone owns these rows of the KV head's dK and dV.
  const size_t dkv_stride = 2 * static_cast<size_t>(s.num_kv_heads) * s.head_dim;
  const size_t value_column = static_cast<size_t>(s.num_kv_heads) * s.head_dim;
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int c = ty + kSide * i;
    if (c >= cols) continue;
    float* dkey_row = t.dkv_accumulator + kv_view.dkv_offset + (col0 + c) * dkv_stride;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < s.head_dim) {
        dkey_row[d] += dk[i][j] * scale;
        dkey_row[value_column + d] += dv[i][j];
      }
    }
  }
}

}  // namespace

void attention_block_backward(DType storage, float* dq_accumulator, float* dkv_accumulator,
                              const void* dout, const void* out, const float* logsumexp,
                              const void* q, const void* kv, const int32_t* q_positions,
                              const int32_t* kv_positions, const int32_t* documents,
                              const Ops::AttentionBlockShape& shape, DeviceScratch& scratch,
                              cudaStream_t stream) {
  if (!attention_block::valid_shape(shape, documents) || shape.kv_len == 0) return;
  const size_t rows = static_cast<size_t>(shape.batch) * shape.num_heads * shape.q_len;
  float* row_dot = static_cast<float*>(scratch.get(rows * sizeof(float)));
  const dim3 dq_grid(static_cast<unsigned int>(shape.batch * shape.num_heads),
                     ceil_div(shape.q_len, kTile));
  const dim3 dkv_grid(static_cast<unsigned int>(shape.batch * shape.num_kv_heads),
                      ceil_div(shape.kv_len, kTile));
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int D = shape.head_dim;
  const bool q_packed = packed_view(storage, q, D, shape.q_row_stride);
  const bool kv_packed = packed_view(storage, kv, D, shape.kv_row_stride, shape.kv_value_offset);
  const bool dout_packed = attention::packed_rows(storage, dout, D);
  with_storage(storage, [&](auto tag) {
    using Storage = typename decltype(tag)::type;
    const BackwardTensors<Storage> tensors{dq_accumulator,
                                           dkv_accumulator,
                                           static_cast<const Storage*>(dout),
                                           logsumexp,
                                           row_dot,
                                           static_cast<const Storage*>(q),
                                           static_cast<const Storage*>(kv),
                                           q_positions,
                                           kv_positions,
                                           documents};
    attention_row_dot_kernel<Storage><<<ceil_div(rows, kWarps), kThreads, 0, stream>>>(
        row_dot, tensors.dout, static_cast<const Storage*>(out), shape.q_len, shape.num_heads, D,
        rows);
    PARAPLAN_CUDA_CHECK_LAUNCH();
    dispatch_head_dim(D, [&](auto padded) {
      constexpr int kDPad = decltype(padded)::value;
      constexpr size_t dq_bytes = dq_shared_bytes<kDPad>();
      allow_shared_memory(attention_block_dq_kernel<Storage, kDPad>, dq_bytes);
      attention_block_dq_kernel<Storage, kDPad><<<dq_grid, kThreads, dq_bytes, stream>>>(
          tensors, shape, scale, q_packed, kv_packed, dout_packed);
      PARAPLAN_CUDA_CHECK_LAUNCH();
      constexpr size_t dkv_bytes = dkv_shared_bytes<kDPad>();
      allow_shared_memory(attention_block_dkv_kernel<Storage, kDPad>, dkv_bytes);
      attention_block_dkv_kernel<Storage, kDPad><<<dkv_grid, kThreads, dkv_bytes, stream>>>(
          tensors, shape, scale, q_packed, kv_packed, dout_packed);
      PARAPLAN_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace paraplan::kernels::cuda
