// cuda_attention_backward.cu: the backward of the CUDA backend's fused causal
// attention (kernels/ops.h attention_backward): the row_dot, dK/dV and dQ
// kernels, for fp32 or bf16 storage (dqkv += g stores round(float(dqkv) + g),
// once per element, or, told to overwrite, round(0 + g) without reading dqkv;
// the scratch is fp32). The algorithm, tiling and
// determinism argument are described at the top of cuda_attention.cu; the
// tile loader and shapes are in cuda_attention.cuh. With bf16 storage and
// head_dim 64 or 128 the row-dot kernel is followed by the tensor-core dK/dV
// and dQ kernels of cuda_attention_tensor_core_backward.cu instead.
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

using namespace attention;

template <int kDPad>
constexpr size_t backward_dkdv_shared_bytes() {
  // K, V tiles; Q, dOut sub-tiles; P^T and dS^T; logsumexp and row_dot of the sub-tile.
  return sizeof(float) * (2 * kTile * (kDPad + 1) + 2 * kSubTile * (kDPad + 1) +
                          2 * kTile * (kSubTile + 1) + 2 * kSubTile);
}

template <typename Storage, int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dkdv_kernel(Storage* dqkv, const Storage* qkv, const Storage* dout,
                                   const float* logsumexp, const float* row_dot, int T, int H,
                                   int Hkv, int D, float scale, bool qkv_packed, bool dout_packed,
                                   bool accumulate) {
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
  const size_t C = static_cast<size_t>(H) * D;
  // The block's KV head, as seen from the first query head of its group.
  const HeadPointers kv_head = group_head_pointers(0, T, H, Hkv, D);
  const size_t C3 = kv_head.stride;
  // Key tile 0 sees every query, the most work: it has the lowest block index.
  const int col0 = blockIdx.y * kTile;
  const int cols = min(kTile, T - col0);

  load_tile<kTile, kDPad>(k_tile, qkv + kv_head.key_offset + col0 * C3, C3, cols, D, qkv_packed);
  load_tile<kTile, kDPad>(v_tile, qkv + kv_head.value_offset + col0 * C3, C3, cols, D, qkv_packed);
  float dk[kPerThread][kColumns] = {}, dv[kPerThread][kColumns] = {};  // keys ty + 16i

  // The query heads sharing this KV head, in order: their dK and dV sum here.
  for (int member = 0; member < H / Hkv; member++) {
    const HeadPointers head = group_head_pointers(member, T, H, Hkv, D);
    const Storage* query = qkv + head.qkv_offset;
    const Storage* dout_head = dout + head.out_offset;
    // Queries before the tile's first key see none of its keys.
    for (int row0 = col0; row0 < T; row0 += kSubTile) {
      const int rows = min(kSubTile, T - row0);
      __syncthreads();  // the previous step's readers are done with the sub-tiles
      load_tile<kSubTile, kDPad>(q_tile, query + row0 * C3, C3, rows, D, qkv_packed);
      load_tile<kSubTile, kDPad>(dout_tile, dout_head + row0 * C, C, rows, D, dout_packed);
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
  }

  // This block alone owns these rows of dK and dV: plain read-modify-write
  // (or, overwriting, a write of 0 + the sum).
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int c = ty + kSide * i;
    if (c >= cols) continue;
    Storage* dkey_row = dqkv + kv_head.key_offset + (col0 + c) * C3;
    Storage* dvalue_row = dqkv + kv_head.value_offset + (col0 + c) * C3;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < D) {
        const float old_key = accumulate ? widen(dkey_row[d]) : 0.0f;
        const float old_value = accumulate ? widen(dvalue_row[d]) : 0.0f;
        dkey_row[d] = narrow<Storage>(old_key + dk[i][j] * scale);
        dvalue_row[d] = narrow<Storage>(old_value + dv[i][j]);
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

template <typename Storage, int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_backward_dq_kernel(Storage* dqkv, const Storage* qkv, const Storage* dout,
                                 const float* logsumexp, const float* row_dot, int T, int H,
                                 int Hkv, int D, float scale, bool qkv_packed, bool dout_packed,
                                 bool accumulate) {
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
  const size_t C = static_cast<size_t>(H) * D;
  const HeadPointers head = query_head_pointers(T, H, Hkv, D);
  const size_t C3 = head.stride;
  const int row0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // longest rows first
  const int rows = min(kTile, T - row0);
  const Storage* query = qkv + head.qkv_offset;

  load_tile<kTile, kDPad>(q_tile, query + row0 * C3, C3, rows, D, qkv_packed);
  load_tile<kTile, kDPad>(dout_tile, dout + head.out_offset + row0 * C, C, rows, D, dout_packed);
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
    load_tile<kSubTile, kDPad>(k_tile, qkv + head.key_offset + col0 * C3, C3, cols, D, qkv_packed);
    load_tile<kSubTile, kDPad>(v_tile, qkv + head.value_offset + col0 * C3, C3, cols, D,
                               qkv_packed);
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

  Storage* dquery = dqkv + head.qkv_offset;
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int r = ty + kSide * i;
    if (r >= rows) continue;
    Storage* dquery_row = dquery + (row0 + r) * C3;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < D) {
        const float old = accumulate ? widen(dquery_row[d]) : 0.0f;
        dquery_row[d] = narrow<Storage>(old + dq[i][j] * scale);
      }
    }
  }
}

}  // namespace

void attention_backward(DType storage, bool tensor_cores, void* dqkv, float* scratch,
                        const void* dout, const void* qkv, const void* out, const float* logsumexp,
                        int batch, int seq_len, int num_heads, int num_kv_heads, int head_dim,
                        GradientWrite write, cudaStream_t stream) {
  if (!valid_shape(batch, seq_len, num_heads, num_kv_heads, head_dim)) return;
  const bool accumulate = write == GradientWrite::kAccumulate;
  const size_t rows = static_cast<size_t>(batch) * num_heads * seq_len;
  // dQ: a block per (query tile, b, query head); dK/dV: per (key tile, b, KV head).
  const dim3 grid(static_cast<unsigned int>(batch * num_heads), ceil_div(seq_len, kTile));
  const dim3 kv_grid(static_cast<unsigned int>(batch * num_kv_heads), ceil_div(seq_len, kTile));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const bool qkv_packed = packed_rows(storage, qkv, head_dim);
  const bool dout_packed = packed_rows(storage, dout, head_dim);
  with_storage(storage, [&](auto tag) {
    using Storage = typename decltype(tag)::type;
    Storage* gradient = static_cast<Storage*>(dqkv);
    const Storage* input = static_cast<const Storage*>(qkv);
    const Storage* out_gradient = static_cast<const Storage*>(dout);
    attention_row_dot_kernel<Storage><<<ceil_div(rows, kWarps), kThreads, 0, stream>>>(
        scratch, out_gradient, static_cast<const Storage*>(out), seq_len, num_heads, head_dim,
        rows);
    PARAPLAN_CUDA_CHECK_LAUNCH();
    if constexpr (std::is_same_v<Storage, bf16>) {
      // out is read only by the row-dot kernel above (scalar loads).
      if (tensor_cores && tensor_core_applies(storage, head_dim, {dqkv, dout, qkv})) {
        attention_backward_tensor_core(gradient, scratch, out_gradient, input, logsumexp, batch,
                                       seq_len, num_heads, num_kv_heads, head_dim, accumulate,
                                       stream);
        return;
      }
    }
    dispatch_head_dim(head_dim, [&](auto padded) {
      constexpr int kDPad = decltype(padded)::value;
      constexpr size_t dkdv_bytes = backward_dkdv_shared_bytes<kDPad>();
      allow_shared_memory(attention_backward_dkdv_kernel<Storage, kDPad>, dkdv_bytes);
      attention_backward_dkdv_kernel<Storage, kDPad><<<kv_grid, kThreads, dkdv_bytes, stream>>>(
          gradient, input, out_gradient, logsumexp, scratch, seq_len, num_heads, num_kv_heads,
          head_dim, scale, qkv_packed, dout_packed, accumulate);
      PARAPLAN_CUDA_CHECK_LAUNCH();
      constexpr size_t dq_bytes = backward_dq_shared_bytes<kDPad>();
      allow_shared_memory(attention_backward_dq_kernel<Storage, kDPad>, dq_bytes);
      attention_backward_dq_kernel<Storage, kDPad><<<grid, kThreads, dq_bytes, stream>>>(
          gradient, input, out_gradient, logsumexp, scratch, seq_len, num_heads, num_kv_heads,
          head_dim, scale, qkv_packed, dout_packed, accumulate);
      PARAPLAN_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace paraplan::kernels::cuda
