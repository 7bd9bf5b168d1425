// cuda_attention.cuh: what the fused attention kernels of cuda_attention.cu
// (forward) and cuda_attention_backward.cu (backward) share: the block and
// tile shapes, the tile loader that widens storage elements (fp32 or bf16)
// into fp32 shared memory, where a (batch, head)'s operands start, and the
// host-side shape checks, shared-memory opt-in and head-dim dispatch; and the
// entry points of the bf16 tensor-core kernels (cuda_attention_tensor_core.cu,
// cuda_attention_tensor_core_backward.cu) with the test of when they apply.
// The algorithm is described at the top of cuda_attention.cu. Internal to
// kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda::attention {

constexpr int kSide = 16;  // threads per side of the 16 x 16 block
constexpr int kThreads = kSide * kSide;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 64;                  // queries (forward, dQ) or keys (dK/dV) a block owns
constexpr int kSubTile = 32;               // the other side's rows per step in the backward kernels
constexpr int kPerThread = kTile / kSide;  // 4 owned rows per thread
constexpr int kSubPerThread = kSubTile / kSide;  // 2 sub-tile rows per thread
constexpr int kMaxHeadDim = 128;

#ifdef __CUDACC__

// Copies rows [0, valid_rows) x columns [0, D) of a row-major global matrix of
// storage elements (rows source_stride elements apart) into a [kRows][kDPad +
// 1] fp32 shared tile, widened, and zeroes the rest of the tile. packed: D is
// a multiple of kPack<T> and every row start is 16-byte aligned, so each
// thread moves 16 bytes at a time.
template <int kRows, int kDPad, typename T>
__device__ void load_tile(float* tile, const T* source, size_t source_stride, int valid_rows, int D,
                          bool packed) {
  constexpr int kStride = kDPad + 1;
  if (packed) {
    constexpr int kP = kPack<T>;
    constexpr int kGroups = kDPad / kP;
    for (int index = threadIdx.x; index < kRows * kGroups; index += kThreads) {
      const int row = index / kGroups, column = (index % kGroups) * kP;
      float value[kP];
      if (row < valid_rows && column < D) {  // D % kP == 0: the whole pack is inside
        load_pack(value, source + row * source_stride + column, 0);
      } else {
#pragma unroll
        for (int k = 0; k < kP; k++) value[k] = 0.0f;
      }
      float* destination = tile + row * kStride + column;
#pragma unroll
      for (int k = 0; k < kP; k++) destination[k] = value[k];
    }
  } else {
    for (int index = threadIdx.x; index < kRows * kDPad; index += kThreads) {
      const int row = index / kDPad, column = index % kDPad;
      tile[row * kStride + column] =
          row < valid_rows && column < D ? widen(source[row * source_stride + column]) : 0.0f;
    }
  }
}

// Where one (b, h) query head's operands start (in elements), in qkv [B, T,
// (H + 2 Hkv) D] (q heads | k heads | v heads; query head h reads KV head
// h / (H / Hkv), so Hkv = H is GPT-2's multi-head [B, T, 3 H D]).
struct HeadPointers {
  size_t qkv_offset;    // row 0 of the head's Q in qkv (and dqkv)
  size_t key_offset;    // row 0 of its KV head's K
  size_t value_offset;  // row 0 of its KV head's V
  size_t out_offset;    // row 0 of the head in out and dout
  size_t row_offset;    // the head's first row in logsumexp and row_dot
  size_t stride;        // elements between rows of qkv: (H + 2 Hkv) D
};

__device__ __forceinline__ HeadPointers head_pointers(int b, int h, int T, int H, int Hkv, int D) {
  const size_t C = static_cast<size_t>(H) * D;
  const size_t stride = C + 2 * static_cast<size_t>(Hkv) * D;
  const size_t row0 = static_cast<size_t>(b) * T * stride;
  const size_t key_offset = row0 + C + static_cast<size_t>(h / (H / Hkv)) * D;
  return {row0 + static_cast<size_t>(h) * D,
          key_offset,
          key_offset + static_cast<size_t>(Hkv) * D,
          static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * D,
          (static_cast<size_t>(b) * H + h) * T,
          stride};
}

// The query head of a block whose blockIdx.x is b * H + h (forward, dQ).
__device__ __forceinline__ HeadPointers query_head_pointers(int T, int H, int Hkv, int D) {
  return head_pointers(blockIdx.x / H, blockIdx.x % H, T, H, Hkv, D);
}

// Query head g of the group of a block whose blockIdx.x is b * Hkv + kv_head
// (dK/dV: one block per KV head sums over its H / Hkv query heads).
__device__ __forceinline__ HeadPointers group_head_pointers(int g, int T, int H, int Hkv, int D) {
  const int b = blockIdx.x / Hkv, kv_head = blockIdx.x % Hkv;
  return head_pointers(b, kv_head * (H / Hkv) + g, T, H, Hkv, D);
}

// The backward's rows' D_t (kernels/ops.h), for the fused and the block
// attention (cuda_attention_block_backward.cu, T = q_len):
// row_dot[row] = sum_d dout[b, t, h, d] * out[b, t, h, d] for row = (b * H + h) * T + t:
// one warp per row, lanes over d, then the butterfly.
template <typename Storage>
__global__ void attention_row_dot_kernel(float* row_dot, const Storage* dout, const Storage* out,
                                         int T, int H, int D, size_t rows) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  const size_t t = row % T, bh = row / T, h = bh % H, b = bh / H;
  const size_t offset = (b * T + t) * H * D + h * D;
  float sum = 0.0f;
  for (int d = lane; d < D; d += 32) {
    sum = fmaf(widen(dout[offset + d]), widen(out[offset + d]), sum);
  }
  sum = warp_sum(sum);
  if (lane == 0) row_dot[row] = sum;
}

#endif  // __CUDACC__

// ---- host side ---------------------------------------------------------------------------------

// False for an empty problem (nothing to do); throws beyond kMaxHeadDim or
// for KV heads that do not divide the heads.
inline bool valid_shape(int batch, int seq_len, int num_heads, int num_kv_heads, int head_dim) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) {
    throw std::invalid_argument("CUDA attention: num_kv_heads " + std::to_string(num_kv_heads) +
                                " must divide num_heads " + std::to_string(num_heads));
  }
  if (batch <= 0 || seq_len <= 0 || num_heads <= 0 || head_dim <= 0) return false;
  if (head_dim > kMaxHeadDim) {
    throw std::invalid_argument("CUDA attention: head_dim " + std::to_string(head_dim) +
                                " exceeds the supported " + std::to_string(kMaxHeadDim));
  }
  return true;
}

// Whether tiles of a [rows, head_dim] head slice at base take the 16-byte
// path: head_dim a multiple of the pack and base 16-byte aligned (then every
// row start is too: row strides and head offsets are multiples of head_dim).
inline bool packed_rows(DType storage, const void* base, int head_dim) {
  const int pack = storage == DType::kBFloat16 ? kPack<bf16> : kPack<float>;
  return head_dim % pack == 0 && is_aligned16(base);
}

// Lets `kernel` use `bytes` of dynamic shared memory (beyond the default 48
// KiB), once per kernel and size (allow_dynamic_shared_memory).
template <typename Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes) {
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), bytes,
                              "CUDA attention: this head_dim");
}

// f(std::integral_constant<int, kDPad>{}) for the smallest padded head size
// (16, 32, 64, 128) that holds head_dim.
template <typename F>
void dispatch_head_dim(int head_dim, F&& f) {
  if (head_dim <= 16) {
    f(std::integral_constant<int, 16>{});
  } else if (head_dim <= 32) {
    f(std::integral_constant<int, 32>{});
  } else if (head_dim <= 64) {
    f(std::integral_constant<int, 64>{});
  } else {
    f(std::integral_constant<int, 128>{});
  }
}

// ---- bf16 tensor-core kernels (cuda_attention_tensor_core*.cu) ---------------------------------

// Whether the tensor-core kernels take a problem: bf16 storage, head_dim 64 or
// 128 (their compile-time specialisations), and every storage tensor they
// touch 16-byte aligned (cp.async moves 16 bytes; the epilogues store bf16
// pairs). The FMA kernels take everything else.
inline bool tensor_core_applies(DType storage, int head_dim,
                                std::initializer_list<const void*> tensors) {
  if (storage != DType::kBFloat16 || (head_dim != 64 && head_dim != 128)) return false;
  for (const void* tensor : tensors) {
    if (!is_aligned16(tensor)) return false;
  }
  return true;
}

// attention_forward for a problem tensor_core_applies to (valid_shape checked by the caller).
void attention_forward_tensor_core(bf16* out, float* logsumexp, const bf16* qkv, int batch,
                                   int seq_len, int num_heads, int num_kv_heads, int head_dim,
                                   cudaStream_t stream);
// The dK/dV and dQ kernels of attention_backward, given row_dot (D_t, already
// computed into the caller's scratch); dqkv += the gradient (accumulate), or
// dqkv = 0 + the gradient without reading dqkv, rounded once.
void attention_backward_tensor_core(bf16* dqkv, const float* row_dot, const bf16* dout,
                                    const bf16* qkv, const float* logsumexp, int batch, int seq_len,
                                    int num_heads, int num_kv_heads, int head_dim, bool accumulate,
                                    cudaStream_t stream);

}  // namespace paraplan::kernels::cuda::attention
