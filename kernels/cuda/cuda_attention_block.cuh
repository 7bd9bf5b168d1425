// cuda_attention_block.cuh: what the attention-by-blocks kernels of
// cuda_attention_block.cu (forward) and cuda_attention_block_backward.cu
// share: where a (batch, head)'s operands start in the block layout of
// kernels/ops.h (q rows, kv rows with the value heads at an offset, the
// packed dK|dV accumulator), the mask's per-tile positions and documents in
// shared memory, the block-wide vote that skips fully masked tiles, the
// tile products, and the host-side shape checks. The tile shapes, tile loader
// and head-dim dispatch are cuda_attention.cuh's. Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_kernels.cuh"
#include "kernels/ops.h"

namespace paraplan::kernels::cuda::attention_block {

using Shape = Ops::AttentionBlockShape;

#ifdef __CUDACC__

// Where one (b, query head h)'s operands start, in elements.
struct BlockHead {
  size_t q_offset;      // row 0 of the head's Q in q
  size_t key_offset;    // row 0 of its KV head's K in kv
  size_t value_offset;  // row 0 of its KV head's V in kv
  size_t dkv_offset;    // row 0 of its KV head's dK in the packed dkv accumulator (dV: + Hkv D)
  size_t out_offset;    // row 0 of the head in out, dout and the out and dq accumulators
  size_t row_offset;    // its first row in logsumexp (and the row_dot scratch)
};

__device__ __forceinline__ BlockHead block_head(const Shape& s, int b, int h) {
  const size_t D = s.head_dim, kv_head = h / (s.num_heads / s.num_kv_heads);
  const size_t kv_row0 = static_cast<size_t>(b) * s.kv_len;
  const size_t q_row0 = static_cast<size_t>(b) * s.q_len;
  const size_t key_offset = kv_row0 * s.kv_row_stride + kv_head * D;
  return {q_row0 * s.q_row_stride + h * D,  key_offset,
          key_offset + s.kv_value_offset,   kv_row0 * 2 * s.num_kv_heads * D + kv_head * D,
          q_row0 * s.num_heads * D + h * D, (static_cast<size_t>(b) * s.num_heads + h) * s.q_len};
}

// Padding rows and keys of a partial tile see nothing: a padding key's
// position is above every query's, a padding query's below every key's.
constexpr int32_t kPaddingQuery = INT_MIN, kPaddingKey = INT_MAX;

// Threads [0, kRows) store the positions and documents (0 without documents)
// of rows [row0, row0 + valid) of batch entry b, padded with `padding`.
template <int kRows>
__device__ __forceinline__ void load_positions(int32_t* positions, int32_t* tile_documents,
                                               const int32_t* source, const int32_t* documents,
                                               int b, int seq_len, int row0, int valid,
                                               int32_t padding) {
  const int r = threadIdx.x;
  if (r >= kRows) return;
  const int32_t position = r < valid ? source[row0 + r] : padding;
  positions[r] = position;
  tile_documents[r] = documents != nullptr && r < valid
                          ? documents[static_cast<size_t>(b) * seq_len + position]
                          : 0;
}

// Whether query row r (its position and document) sees key c.
__device__ __forceinline__ bool sees(const int32_t* q_positions, const int32_t* q_documents, int r,
                                     const int32_t* k_positions, const int32_t* k_documents,
                                     int c) {
  return k_positions[c] <= q_positions[r] && k_documents[c] == q_documents[r];
}

// Thread (tx, ty)'s pairs of a tile: visible[i][j] for row ty + 16 i and
// column tx + 16 j, the rows being queries (kQueryRows) or keys. Returns
// whether any pair of the block is visible: a block-wide vote (every thread
// calls it), so a fully masked tile is skipped by the whole block.
template <int kI, int kJ, bool kQueryRows>
__device__ __forceinline__ bool vote_visible(bool (&visible)[kI][kJ], const int32_t* q_positions,
                                             const int32_t* q_documents, const int32_t* k_positions,
                                             const int32_t* k_documents) {
  const int tx = threadIdx.x % attention::kSide, ty = threadIdx.x / attention::kSide;
  bool any = false;
#pragma unroll
  for (int i = 0; i < kI; i++) {
#pragma unroll
    for (int j = 0; j < kJ; j++) {
      const int row = ty + attention::kSide * i, column = tx + attention::kSide * j;
      visible[i][j] = kQueryRows
                          ? sees(q_positions, q_documents, row, k_positions, k_documents, column)
                          : sees(q_positions, q_documents, column, k_positions, k_documents, row);
      any = any || visible[i][j];
    }
  }
  return __syncthreads_or(any);
}

// s[i][j] += a[ty + 16 i] . b[tx + 16 j] and, with c and e, t[i][j] += c[ty +
// 16 i] . e[tx + 16 j]: dot products of rows of [rows][kDPad + 1] shared
// tiles, d ascending in FMA chains.
template <int kI, int kJ, int kDPad, bool kTwo>
__device__ __forceinline__ void row_products(float (&s)[kI][kJ], float (&t)[kI][kJ], const float* a,
                                             const float* b, const float* c, const float* e) {
  constexpr int kStride = kDPad + 1, kSide = attention::kSide;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
#pragma unroll 4
  for (int d = 0; d < kDPad; d++) {
    float left[kI], right[kJ], left2[kI], right2[kJ];
#pragma unroll
    for (int i = 0; i < kI; i++) {
      left[i] = a[(ty + kSide * i) * kStride + d];
      if constexpr (kTwo) left2[i] = c[(ty + kSide * i) * kStride + d];
    }
#pragma unroll
    for (int j = 0; j < kJ; j++) {
      right[j] = b[(tx + kSide * j) * kStride + d];
      if constexpr (kTwo) right2[j] = e[(tx + kSide * j) * kStride + d];
    }
#pragma unroll
    for (int i = 0; i < kI; i++) {
#pragma unroll
      for (int j = 0; j < kJ; j++) {
        s[i][j] = fmaf(left[i], right[j], s[i][j]);
        if constexpr (kTwo) t[i][j] = fmaf(left2[i], right2[j], t[i][j]);
      }
    }
  }
}

// acc[i][j] += sum over c < kCount of w[ty + 16 i][c] * v[c][tx + 16 j]: a
// tile of weights (probabilities, score gradients; rows w_stride apart) times
// a [kCount][kDPad + 1] shared tile, c ascending.
template <int kI, int kDPad, int kCount>
__device__ __forceinline__ void weighted_sum(float (&acc)[kI][kDPad / attention::kSide],
                                             const float* w, int w_stride, const float* v) {
  constexpr int kStride = kDPad + 1, kSide = attention::kSide, kColumns = kDPad / kSide;
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
#pragma unroll 4
  for (int c = 0; c < kCount; c++) {
    float weight[kI], value[kColumns];
#pragma unroll
    for (int i = 0; i < kI; i++) weight[i] = w[(ty + kSide * i) * w_stride + c];
#pragma unroll
    for (int j = 0; j < kColumns; j++) value[j] = v[c * kStride + tx + kSide * j];
#pragma unroll
    for (int i = 0; i < kI; i++) {
#pragma unroll
      for (int j = 0; j < kColumns; j++) acc[i][j] = fmaf(weight[i], value[j], acc[i][j]);
    }
  }
}

#endif  // __CUDACC__

// ---- host side ---------------------------------------------------------------------------------

// False for an empty problem; throws beyond attention::kMaxHeadDim, for KV
// heads that do not divide the heads, or for strides too small.
inline bool valid_shape(const Shape& s, const int32_t* documents) {
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0)
    throw std::invalid_argument("CUDA attention_block: num_kv_heads " +
                                std::to_string(s.num_kv_heads) + " must divide num_heads " +
                                std::to_string(s.num_heads));
  if (s.batch < 0 || s.q_len < 0 || s.kv_len < 0 || s.head_dim < 0)
    throw std::invalid_argument("CUDA attention_block: negative size");
  if (s.q_row_stride < s.num_heads * s.head_dim || s.kv_value_offset < 0 ||
      s.kv_row_stride < s.kv_value_offset + s.num_kv_heads * s.head_dim)
    throw std::invalid_argument("CUDA attention_block: row strides or value offset too small");
  if (documents != nullptr && s.seq_len <= 0)
    throw std::invalid_argument("CUDA attention_block: documents need seq_len > 0");
  if (s.head_dim > attention::kMaxHeadDim)
    throw std::invalid_argument("CUDA attention_block: head_dim " + std::to_string(s.head_dim) +
                                " exceeds the supported " + std::to_string(attention::kMaxHeadDim));
  return s.batch > 0 && s.q_len > 0 && s.num_heads > 0 && s.head_dim > 0;
}

// Whether rows of a strided view at base take the 16-byte loads: every row
// start (base + row * stride + head offset) 16-byte aligned.
inline bool packed_view(DType storage, const void* base, int head_dim, int row_stride,
                        int offset = 0) {
  const int pack = storage == DType::kBFloat16 ? kPack<bf16> : kPack<float>;
  return attention::packed_rows(storage, base, head_dim) && row_stride % pack == 0 &&
         offset % pack == 0;
}

}  // namespace paraplan::kernels::cuda::attention_block
