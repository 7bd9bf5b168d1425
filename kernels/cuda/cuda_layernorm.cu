// cuda_layernorm.cu: layer norm and RMS norm (Llama), forward and backward,
// for the CUDA backend (fp32 or bf16 storage; mean and rstd fp32), and the
// deterministic column sums that give the parameter gradients (also used for
// a linear layer's bias gradient when cuBLASLt's epilogue does not apply).
// RMS norm is layer norm without the mean and the bias (the kernels'
// kRms): norm = x * rstd, rstd = 1 / sqrt(mean(x^2) + epsilon), out = norm *
// weight; its weight gradient is the same column sum of norm * dout.
//
// Forward and the input gradient: one warp per row, lanes striding over the
// channels (16-byte packs, 4 floats or 8 bf16, when C is a multiple of the
// pack and every pointer is 16-byte aligned), row sums by warp butterflies,
// all in fp32 on the widened inputs. As on the CPU, the forward is two passes
// (mean, then the variance of the centred values).
// Backward, two launches (llm.c's layernorm_backward): one kernel takes
// contiguous runs of rows per block, gets each row's gradient means (a warp
// per row, as above), then adds the input gradient and, in the same pass
// over dout and inp, sums the block's fp32 columns of norm * dout (dweight)
// and dout (dbias), each column by one thread in row order; a second kernel adds the blocks' sums
// in block order and accumulates into the gradient, rounding once: g = round(float(g) + sum). A
// linear layer's bias gradient (column_sums_accumulate) runs the same second kernel after a
// column-sum kernel over row chunks. No atomics; the grids depend only on the shape and the
// device's SM count (about two blocks per SM, so the reductions fill the GPU), so a device gives
// bitwise the same result on every call.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/kernel_scratch.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;  // 8 warps, one row each
constexpr int kWarpsPerBlock = kRowThreads / 32;
// Backward: rows whose statistics a block computes before running them
// through the column sums (two per warp), blocks per SM of the backward
// kernels, the shared memory the per-block column sums may take (LayerNorm
// at C = 8192; wider rows keep them in the scratch), the default limit above
// which a kernel must opt in, and the threads of column_final_kernel. (The
// scratch they take: common/kernel_scratch.h, which the planner counts.)
constexpr int kRoundRows = 2 * kWarpsPerBlock;
constexpr int kBlocksPerSm = static_cast<int>(kernel_scratch::kBlocksPerSm);
constexpr size_t kMaxSharedSumBytes = size_t{64} << 10;
constexpr size_t kDefaultSharedBytes = size_t{48} << 10;
constexpr size_t kStatsBytes = kRoundRows * sizeof(float4);
constexpr int kFinalThreads = 256;
// column_sums_accumulate: the fewest rows a chunk sums (partials stay small).
constexpr int kMinChunkRows = static_cast<int>(kernel_scratch::kMinChunkRows);

// kRms: RMS norm, the same with the mean taken as 0 and no bias.
template <typename T, bool kVectorized, bool kRms>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* weight, const T* bias, int rows, int C,
                                         float epsilon) {
  constexpr int kP = kPack<T>;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // a whole warp leaves together
  const T* x = inp + static_cast<size_t>(row) * C;
  T* y = out + static_cast<size_t>(row) * C;
  const int packs = C / kP;

  float row_mean = 0.0f;
  if constexpr (!kRms) {
    float sum = 0.0f;
    if constexpr (kVectorized) {
      for (int p = lane; p < packs; p += 32) {
        float v[kP];
        load_pack(v, x, p);
#pragma unroll
        for (int k = 0; k < kP; k++) sum += v[k];
      }
    } else {
      for (int c = lane; c < C; c += 32) sum += widen(x[c]);
    }
    row_mean = warp_sum(sum) / C;
  }

  float sum_squares = 0.0f;
  if constexpr (kVectorized) {
    for (int p = lane; p < packs; p += 32) {
      float v[kP];
      load_pack(v, x, p);
#pragma unroll
      for (int k = 0; k < kP; k++) {
        const float centred = v[k] - row_mean;
        sum_squares += centred * centred;
      }
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      const float centred = widen(x[c]) - row_mean;
      sum_squares += centred * centred;
    }
  }
  const float row_rstd = 1.0f / sqrtf(warp_sum(sum_squares) / C + epsilon);

  if constexpr (kVectorized) {
    for (int p = lane; p < packs; p += 32) {
      float v[kP], w[kP], b[kP] = {};
      load_pack(v, x, p);
      load_pack(w, weight, p);
      if constexpr (!kRms) load_pack(b, bias, p);
#pragma unroll
      for (int k = 0; k < kP; k++) v[k] = (v[k] - row_mean) * row_rstd * w[k] + b[k];
      store_pack(y, p, v);
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      const float b = kRms ? 0.0f : widen(bias[c]);
      y[c] = narrow<T>((widen(x[c]) - row_mean) * row_rstd * widen(weight[c]) + b);
    }
  }
  if (lane == 0) {
    if constexpr (!kRms) mean[row] = row_mean;
    rstd[row] = row_rstd;
  }
}

// ---- backward: helpers ----------------------------------------------------------------------
// A "unit" is what one thread loads at once: a 16-byte pack (kE = kPack<T>)
// on the vector path, one element (kE = 1) on the scalar path.

template <typename T, int kE>
__device__ __forceinline__ void load_units(float (&out)[kE], const T* base, size_t unit) {
  if constexpr (kE == 1) {
    out[0] = widen(base[unit]);
  } else {
    load_pack(out, base, unit);
  }
}

template <typename T, int kE>
__device__ __forceinline__ void store_units(T* base, size_t unit, const float (&in)[kE]) {
  if constexpr (kE == 1) {
    base[unit] = narrow<T>(in[0]);
  } else {
    store_pack(base, unit, in);
  }
}

// kE fp32 column sums at `at` (16-byte aligned when kE > 1), shared or global memory.
template <int kE>
__device__ __forceinline__ void load_sums(float (&out)[kE], const float* at) {
  if constexpr (kE % 4 == 0) {
    load_floats<kE>(out, at);
  } else {
    for (int k = 0; k < kE; k++) out[k] = at[k];
  }
}

template <int kE>
__device__ __forceinline__ void store_sums(float* at, const float (&in)[kE]) {
  if constexpr (kE % 4 == 0) {
    store_floats<kE>(at, in);
  } else {
    for (int k = 0; k < kE; k++) at[k] = in[k];
  }
}

// The row terms of the input gradient, on every lane of the warp: mean(dnorm)
// (0 for RMS norm) and mean(dnorm * norm), dnorm = weight * dy, norm = (x -
// mean) * rstd. Lanes stride over the units; warp butterflies add them up.
template <typename T, int kE, bool kRms>
__device__ __forceinline__ float2 row_gradient_means(const T* x, const T* dy, const T* weight,
                                                     float row_mean, float row_rstd, int units,
                                                     int C, int lane) {
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int u = lane; u < units; u += 32) {
    float xs[kE], gs[kE], ws[kE];
    load_units<T, kE>(xs, x, u);
    load_units<T, kE>(gs, dy, u);
    load_units<T, kE>(ws, weight, u);
#pragma unroll
    for (int k = 0; k < kE; k++) {
      const float norm = (xs[k] - row_mean) * row_rstd;
      const float dnorm = ws[k] * gs[k];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
    }
  }
  return make_float2(kRms ? 0.0f : warp_sum(dnorm_sum) / C, warp_sum(dnorm_norm_sum) / C);
}

// One thread's share of a round for its column unit u, rows in order: dinp +=
// (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, and the unit's
// column sums += norm * dy (weight) and dy (bias, unless sums_b is null).
// stats[j] = (mean, rstd, mean(dnorm), mean(dnorm * norm)) of the round's row j.
template <typename T, int kE>
__device__ __forceinline__ void backward_unit(T* dinp, float* sums_w, float* sums_b, const T* dout,
                                              const T* inp, const T* weight, const float4* stats,
                                              size_t round_offset, int count, int C, int u) {
  float ws[kE], sw[kE], sb[kE] = {};
  load_units<T, kE>(ws, weight, u);
  load_sums(sw, sums_w + static_cast<size_t>(u) * kE);
  if (sums_b != nullptr) load_sums(sb, sums_b + static_cast<size_t>(u) * kE);
#pragma unroll 2
  for (int j = 0; j < count; j++) {
    const size_t offset = round_offset + static_cast<size_t>(j) * C;
    const float4 s = stats[j];
    float xs[kE], gs[kE], ds[kE];
    load_units<T, kE>(xs, inp + offset, u);
    load_units<T, kE>(gs, dout + offset, u);
    load_units<T, kE>(ds, dinp + offset, u);
#pragma unroll
    for (int k = 0; k < kE; k++) {
      const float norm = (xs[k] - s.x) * s.y;
      const float dnorm = ws[k] * gs[k];
      ds[k] += (dnorm - s.z - norm * s.w) * s.y;
      sw[k] += norm * gs[k];
      sb[k] += gs[k];
    }
    store_units<T, kE>(dinp + offset, u, ds);
  }
  store_sums(sums_w + static_cast<size_t>(u) * kE, sw);
  if (sums_b != nullptr) store_sums(sums_b + static_cast<size_t>(u) * kE, sb);
}

// ---- backward: kernels -------------------------------------------------------------------------

// The whole norm backward in one pass over dout and inp (llm.c's
// layernorm_backward): dinp += the input gradient, and partial_weight[block,
// c] (partial_bias[block, c], unless null) = the sum of norm * dy (dy) over
// the block's rows, first to last. A block takes a contiguous run of
// block_rows rows (the grid is about kBlocksPerSm blocks per SM), kRoundRows
// at a time: each warp computes the gradient means of its rows of the round
// (a warp per row, lanes across the row), then each thread takes fixed column
// units and runs the round's rows through them in order (the rows were just
// read, so mostly L1 hits). Every round gives a thread the same units, so
// each column sum has one owner: no atomics, no synchronization, a fixed
// order. The sums live in dynamic shared memory (sums_in_shared) or, when a
// row's sums would not fit, in the block's partial rows of the scratch; the
// arithmetic, and so the result, is the same either way.
template <typename T, int kE, bool kRms>
__global__ void __launch_bounds__(kRowThreads, kBlocksPerSm)
    norm_backward_kernel(T* dinp, float* partial_weight, float* partial_bias, const T* dout,
                         const T* inp, const T* weight, const float* mean, const float* rstd,
                         int rows, int C, int block_rows, bool sums_in_shared) {
  extern __shared__ __align__(16) float shared_sums[];  // weight sums [C], then bias sums [C]
  __shared__ float4 stats[kRoundRows];
  const int units = C / kE;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t block_offset = static_cast<size_t>(blockIdx.x) * C;
  float* sums_w = sums_in_shared ? shared_sums : partial_weight + block_offset;
  float* sums_b = nullptr;
  if (!kRms && partial_bias != nullptr) {
    sums_b = sums_in_shared ? shared_sums + C : partial_bias + block_offset;
  }
  for (int u = threadIdx.x; u < units; u += kRowThreads) {
    const float zeros[kE] = {};
    store_sums(sums_w + static_cast<size_t>(u) * kE, zeros);
    if (sums_b != nullptr) store_sums(sums_b + static_cast<size_t>(u) * kE, zeros);
  }
  const int first = blockIdx.x * block_rows;
  const int last = min(rows, first + block_rows);
  for (int round = first; round < last; round += kRoundRows) {
    const int count = min(kRoundRows, last - round);
    for (int j = warp; j < count; j += kWarpsPerBlock) {
      const int row = round + j;
      const size_t offset = static_cast<size_t>(row) * C;
      const float row_mean = kRms ? 0.0f : mean[row], row_rstd = rstd[row];
      const float2 means = row_gradient_means<T, kE, kRms>(inp + offset, dout + offset, weight,
                                                           row_mean, row_rstd, units, C, lane);
      if (lane == 0) stats[j] = make_float4(row_mean, row_rstd, means.x, means.y);
    }
    __syncthreads();  // the round's stats are in
    for (int u = threadIdx.x; u < units; u += kRowThreads) {
      backward_unit<T, kE>(dinp, sums_w, sums_b, dout, inp, weight, stats,
                           static_cast<size_t>(round) * C, count, C, u);
    }
    __syncthreads();  // the next round overwrites stats
  }
  if (!sums_in_shared) return;
  for (int u = threadIdx.x; u < units; u += kRowThreads) {  // the thread's own sums
    const size_t at = static_cast<size_t>(u) * kE;
    float sums[kE];
    load_sums(sums, sums_w + at);
    store_sums(partial_weight + block_offset + at, sums);
    if (sums_b != nullptr) {
      load_sums(sums, sums_b + at);
      store_sums(partial_bias + block_offset + at, sums);
    }
  }
}

// Pass 1 of column_sums_accumulate: partials[chunk, c] = the sum of x[r, c]
// over the chunk's rows. A block takes 32 column units (a unit per lane: on
// the vector path a warp reads 512 contiguous bytes of a row) and one chunk:
// warp w sums rows w, w + 8, ... in order, then the 8 warp sums are added in
// warp order. Chunks are sized (column_partials below) so that the grid has about
// kBlocksPerSm blocks per SM even for 768 columns (3 to 6 tiles), while each
// block still reads kMinChunkRows rows or more: x is read once, and the
// partials are a small fraction of its bytes.
template <typename T, int kE>
__global__ void __launch_bounds__(kRowThreads)
    column_partials_kernel(float* partials, const T* x, int rows, int cols, int chunk_rows) {
  __shared__ __align__(16) float warp_sums[kWarpsPerBlock][32 * kE];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int unit = blockIdx.x * 32 + lane;
  const int first = blockIdx.y * chunk_rows;
  const int last = min(rows, first + chunk_rows);
  float sums[kE] = {};
  if (unit < cols / kE) {
#pragma unroll 4
    for (int r = first + warp; r < last; r += kWarpsPerBlock) {
      float v[kE];
      load_units<T, kE>(v, x + static_cast<size_t>(r) * cols, unit);
#pragma unroll
      for (int k = 0; k < kE; k++) sums[k] += v[k];
    }
  }
  store_sums(&warp_sums[warp][lane * kE], sums);
  __syncthreads();
  for (int i = threadIdx.x; i < 32 * kE; i += kRowThreads) {
    const int c = blockIdx.x * 32 * kE + i;
    if (c >= cols) break;
    float total = warp_sums[0][i];
    for (int w = 1; w < kWarpsPerBlock; w++) total += warp_sums[w][i];
    partials[static_cast<size_t>(blockIdx.y) * cols + c] = total;
  }
}

// Up to two column-sum outputs finished by one column_final_kernel launch.
struct ColumnOutputs {
  void* out[2];              // storage vectors [cols]
  const float* partials[2];  // their fp32 partial sums [parts, cols]
};

// Pass 2: out[c] += the sum over p = 0, 1, ... of partials[p, c], rounded
// once, for output blockIdx.y. A block takes `width` columns (a power of two
// <= 32, narrow enough that the grid has at least one block per SM even for
// 768 columns) and its threads split the parts: thread t sums column t %
// width over parts t / width, + groups, ... in order; a fixed shared-memory
// tree then adds the groups' sums.
template <typename T>
__global__ void __launch_bounds__(kFinalThreads)
    column_final_kernel(ColumnOutputs outputs, int parts, int cols, int width) {
  __shared__ float sums[kFinalThreads];
  // Constant indices: a parameter array indexed by blockIdx.y would go through local memory.
  T* out = static_cast<T*>(blockIdx.y == 0 ? outputs.out[0] : outputs.out[1]);
  const float* partials = blockIdx.y == 0 ? outputs.partials[0] : outputs.partials[1];
  const int group = threadIdx.x / width, groups = kFinalThreads / width;
  const int c = blockIdx.x * width + threadIdx.x % width;
  float sum = 0.0f;
  if (c < cols) {
    for (int p = group; p < parts; p += groups) sum += partials[static_cast<size_t>(p) * cols + c];
  }
  sums[threadIdx.x] = sum;
  for (int stride = groups / 2; stride > 0; stride /= 2) {
    __syncthreads();
    if (group < stride) sums[threadIdx.x] += sums[threadIdx.x + stride * width];
  }
  if (group == 0 && c < cols) out[c] = narrow<T>(widen(out[c]) + sums[threadIdx.x]);
}

// ---- backward: launches ------------------------------------------------------------------------

int multiprocessor_count() {
  return device_limits().multiprocessors;
}

// outputs' first `count` entries += their partials' column sums (column_final_kernel).
template <typename T>
void column_final(const ColumnOutputs& outputs, int count, int parts, int cols,
                  cudaStream_t stream) {
  if (count == 0) return;
  const size_t sms = multiprocessor_count();
  int width = 32;
  while (width > 1 && static_cast<size_t>(ceil_div(cols, width)) * count < sms) width /= 2;
  const dim3 grid(ceil_div(cols, width), count);
  column_final_kernel<T><<<grid, kFinalThreads, 0, stream>>>(outputs, parts, cols, width);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace {

template <bool kRms>
void norm_forward(DType storage, void* out, float* mean, float* rstd, const void* inp,
                  const void* weight, const void* bias, int rows, int channels, float epsilon,
                  cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  const unsigned int blocks = ceil_div(rows, kWarpsPerBlock);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = static_cast<T*>(out);
    const T *x = static_cast<const T*>(inp), *w = static_cast<const T*>(weight),
            *b = static_cast<const T*>(bias);
    const bool vectorized = channels % kPack<T> == 0 && is_aligned16(y) && is_aligned16(x) &&
                            is_aligned16(w) && is_aligned16(b);
    if (vectorized) {
      layernorm_forward_kernel<T, true, kRms>
          <<<blocks, kRowThreads, 0, stream>>>(y, mean, rstd, x, w, b, rows, channels, epsilon);
    } else {
      layernorm_forward_kernel<T, false, kRms>
          <<<blocks, kRowThreads, 0, stream>>>(y, mean, rstd, x, w, b, rows, channels, epsilon);
    }
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

// norm_backward_kernel<T, kE, kRms> on `blocks` blocks of block_rows rows:
// the column sums in dynamic shared memory when they fit kMaxSharedSumBytes
// and the device (above the default 48 KiB this opts the kernel in), else in
// the scratch.
template <typename T, int kE, bool kRms>
void launch_norm_backward(T* dx, float* partial_weight, float* partial_bias, const T* dy,
                          const T* x, const T* w, const float* mean, const float* rstd, int rows,
                          int channels, int blocks, int block_rows, cudaStream_t stream) {
  const size_t sum_bytes = (partial_bias != nullptr ? 2 : 1) * sizeof(float) * channels;
  // The static stats array (kRoundRows float4s) shares the opt-in limit.
  const bool in_shared =
      sum_bytes <= std::min(kMaxSharedSumBytes, device_limits().shared_optin - kStatsBytes);
  const size_t shared = in_shared ? sum_bytes : 0;
  auto kernel = norm_backward_kernel<T, kE, kRms>;
  // Without the opt-in, static and dynamic shared memory together stay
  // within the default (C = 6144 with biases, GPT-NeoX-20B's, is 48 KiB of
  // sums alone).
  if (shared > 0 && shared + kStatsBytes > kDefaultSharedBytes) {
    allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), shared,
                                "CUDA norm backward: these channels");
  }
  kernel<<<blocks, kRowThreads, shared, stream>>>(dx, partial_weight, partial_bias, dy, x, w, mean,
                                                  rstd, rows, channels, block_rows, in_shared);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

// Two launches: norm_backward_kernel (dinp and per-block fp32 column sums of
// dweight and dbias, about kBlocksPerSm blocks per SM, each a contiguous run
// of rows), then column_final (the blocks' sums in block order, added into
// dweight and dbias, at least one block per SM). A last-block-finishes
// reduction inside the first kernel would save the second launch but needs a
// counter reset on every call (the scratch is shared with other ops) and
// leaves the final sums to one block; the second kernel keeps both simple.
// The grid depends on the row count and the device's SM count only, so a
// given device gives bitwise the same result on every call.
template <bool kRms>
void norm_backward(DType storage, void* dinp, void* dweight, void* dbias, const void* dout,
                   const void* inp, const void* weight, const float* mean, const float* rstd,
                   int rows, int channels, DeviceScratch& scratch, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  const int block_rows = ceil_div(rows, static_cast<size_t>(kBlocksPerSm) * multiprocessor_count());
  const int blocks = ceil_div(rows, block_rows);
  const bool bias = !kRms && dbias != nullptr;
  const size_t partial_count = static_cast<size_t>(blocks) * channels;
  float* partial_weight =
      static_cast<float*>(scratch.get((bias ? 2 : 1) * partial_count * sizeof(float)));
  float* partial_bias = bias ? partial_weight + partial_count : nullptr;
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dx = static_cast<T*>(dinp);
    const T *dy = static_cast<const T*>(dout), *x = static_cast<const T*>(inp),
            *w = static_cast<const T*>(weight);
    const bool vectorized = channels % kPack<T> == 0 && is_aligned16(dx) && is_aligned16(dy) &&
                            is_aligned16(x) && is_aligned16(w);
    if (vectorized) {
      launch_norm_backward<T, kPack<T>, kRms>(dx, partial_weight, partial_bias, dy, x, w, mean,
                                              rstd, rows, channels, blocks, block_rows, stream);
    } else {
      launch_norm_backward<T, 1, kRms>(dx, partial_weight, partial_bias, dy, x, w, mean, rstd, rows,
                                       channels, blocks, block_rows, stream);
    }
    ColumnOutputs outputs{};
    int count = 0;
    if (dweight != nullptr) {
      outputs.out[count] = dweight;
      outputs.partials[count++] = partial_weight;
    }
    if (bias) {
      outputs.out[count] = dbias;
      outputs.partials[count++] = partial_bias;
    }
    column_final<T>(outputs, count, blocks, channels, stream);
  });
}

// column_sums_accumulate's pass 1 on kE-element units: 32 units per block
// across, chunks of the rows down; about kBlocksPerSm blocks per SM, chunks
// of at least kMinChunkRows rows. Returns the chunk count (the partial rows).
template <typename T, int kE>
int column_partials(float** partials, const T* x, int rows, int cols, DeviceScratch& scratch,
                    cudaStream_t stream) {
  const size_t tiles = ceil_div(cols / kE, 32);
  const size_t target = static_cast<size_t>(kBlocksPerSm) * multiprocessor_count();
  const size_t wanted = std::min<size_t>(ceil_div(target, tiles), ceil_div(rows, kMinChunkRows));
  const int chunk_rows = ceil_div(rows, std::max<size_t>(wanted, 1));
  const int chunks = ceil_div(rows, chunk_rows);
  *partials = static_cast<float*>(scratch.get(static_cast<size_t>(chunks) * cols * sizeof(float)));
  const dim3 grid(tiles, chunks);
  column_partials_kernel<T, kE>
      <<<grid, kRowThreads, 0, stream>>>(*partials, x, rows, cols, chunk_rows);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  return chunks;
}

}  // namespace

void layernorm_forward(DType storage, void* out, float* mean, float* rstd, const void* inp,
                       const void* weight, const void* bias, int rows, int channels, float epsilon,
                       cudaStream_t stream) {
  norm_forward<false>(storage, out, mean, rstd, inp, weight, bias, rows, channels, epsilon, stream);
}

void layernorm_backward(DType storage, void* dinp, void* dweight, void* dbias, const void* dout,
                        const void* inp, const void* weight, const float* mean, const float* rstd,
                        int rows, int channels, DeviceScratch& scratch, cudaStream_t stream) {
  norm_backward<false>(storage, dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, channels,
                       scratch, stream);
}

void rmsnorm_forward(DType storage, void* out, float* rstd, const void* inp, const void* weight,
                     int rows, int channels, float epsilon, cudaStream_t stream) {
  norm_forward<true>(storage, out, nullptr, rstd, inp, weight, nullptr, rows, channels, epsilon,
                     stream);
}

void rmsnorm_backward(DType storage, void* dinp, void* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int rows, int channels,
                      DeviceScratch& scratch, cudaStream_t stream) {
  norm_backward<true>(storage, dinp, dweight, nullptr, dout, inp, weight, nullptr, rstd, rows,
                      channels, scratch, stream);
}

void column_sums_accumulate(DType storage, void* out, const void* x, int rows, int cols,
                            DeviceScratch& scratch, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* input = static_cast<const T*>(x);
    float* partials = nullptr;
    const int chunks =
        cols % kPack<T> == 0 && is_aligned16(input)
            ? column_partials<T, kPack<T>>(&partials, input, rows, cols, scratch, stream)
            : column_partials<T, 1>(&partials, input, rows, cols, scratch, stream);
    ColumnOutputs outputs{};
    outputs.out[0] = out;
    outputs.partials[0] = partials;
    column_final<T>(outputs, 1, chunks, cols, stream);
  });
}

}  // namespace paraplan::kernels::cuda
