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
// dweight / dbias: no atomics. Pass 1: the rows are cut into at most
// kMaxChunks chunks; thread c of block (x, chunk) sums column c over its
// chunk's rows in order and writes an fp32 partial. Pass 2: thread c adds the
// chunks' partials in chunk order and accumulates into the gradient, rounding
// once: g = round(float(g) + sum). The chunking depends only on the row
// count, so the result is bitwise reproducible.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;  // 8 warps, one row each
constexpr int kWarpsPerBlock = kRowThreads / 32;
constexpr int kColumnThreads = 256;
constexpr int kMaxChunks = 256;
constexpr int kMinChunkRows = 32;

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

// dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, with
// norm = (x - mean) * rstd and dnorm = weight * dout; kRms: the mean and
// mean(dnorm) are 0.
template <typename T, bool kVectorized, bool kRms>
__global__ void layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                                const T* weight, const float* mean,
                                                const float* rstd, int rows, int C) {
  constexpr int kP = kPack<T>;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const size_t offset = static_cast<size_t>(row) * C;
  const T* x = inp + offset;
  const T* dy = dout + offset;
  T* dx = dinp + offset;
  const float row_mean = kRms ? 0.0f : mean[row], row_rstd = rstd[row];
  const int packs = C / kP;

  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  if constexpr (kVectorized) {
    for (int p = lane; p < packs; p += 32) {
      float xs[kP], gs[kP], ws[kP];
      load_pack(xs, x, p);
      load_pack(gs, dy, p);
      load_pack(ws, weight, p);
#pragma unroll
      for (int k = 0; k < kP; k++) {
        const float norm = (xs[k] - row_mean) * row_rstd;
        const float dnorm = ws[k] * gs[k];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * norm;
      }
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      const float norm = (widen(x[c]) - row_mean) * row_rstd;
      const float dnorm = widen(weight[c]) * widen(dy[c]);
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
    }
  }
  const float dnorm_mean = kRms ? 0.0f : warp_sum(dnorm_sum) / C;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;

  if constexpr (kVectorized) {
    for (int p = lane; p < packs; p += 32) {
      float xs[kP], gs[kP], ws[kP], ds[kP];
      load_pack(xs, x, p);
      load_pack(gs, dy, p);
      load_pack(ws, weight, p);
      load_pack(ds, dx, p);
#pragma unroll
      for (int k = 0; k < kP; k++) {
        const float norm = (xs[k] - row_mean) * row_rstd;
        const float dnorm = ws[k] * gs[k];
        ds[k] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * row_rstd;
      }
      store_pack(dx, p, ds);
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      const float norm = (widen(x[c]) - row_mean) * row_rstd;
      const float dnorm = widen(weight[c]) * widen(dy[c]);
      dx[c] = narrow<T>(widen(dx[c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * row_rstd);
    }
  }
}

// Pass 1 of the column sums: partial_b[chunk, c] = sum of dy[r, c] over the
// chunk's rows (unless partial_b is null); with kNorm also partial_a[chunk, c]
// = sum of norm[r, c] * dy[r, c], norm = (x - mean) * rstd (mean null: 0, RMS norm).
template <typename T, bool kNorm>
__global__ void column_partials_kernel(float* partial_a, float* partial_b, const T* dy, const T* x,
                                       const float* mean, const float* rstd, int rows, int cols,
                                       int chunk_rows) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int chunk = blockIdx.y;
  const int first = chunk * chunk_rows;
  const int last = min(rows, first + chunk_rows);
  float sum_a = 0.0f, sum_b = 0.0f;
  for (int r = first; r < last; r++) {
    const size_t index = static_cast<size_t>(r) * cols + c;
    const float g = widen(dy[index]);
    if constexpr (kNorm) {
      const float norm = (widen(x[index]) - (mean != nullptr ? mean[r] : 0.0f)) * rstd[r];
      sum_a += norm * g;
    }
    sum_b += g;
  }
  const size_t out = static_cast<size_t>(chunk) * cols + c;
  if constexpr (kNorm) partial_a[out] = sum_a;
  if (partial_b != nullptr) partial_b[out] = sum_b;
}

// Pass 2: out_b[c] += sum over chunks (in order) of partial_b[chunk, c],
// rounded once; the same for out_a and out_b when they are given.
template <typename T>
__global__ void column_final_kernel(T* out_a, T* out_b, const float* partial_a,
                                    const float* partial_b, int chunks, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum_a = 0.0f, sum_b = 0.0f;
  for (int k = 0; k < chunks; k++) {
    const size_t index = static_cast<size_t>(k) * cols + c;
    if (out_a != nullptr) sum_a += partial_a[index];
    if (out_b != nullptr) sum_b += partial_b[index];
  }
  if (out_a != nullptr) out_a[c] = narrow<T>(widen(out_a[c]) + sum_a);
  if (out_b != nullptr) out_b[c] = narrow<T>(widen(out_b[c]) + sum_b);
}

struct Chunking {
  int chunk_rows, chunks;
};

Chunking chunking(int rows) {
  const int chunk_rows = std::max(kMinChunkRows, static_cast<int>(ceil_div(rows, kMaxChunks)));
  return {chunk_rows, static_cast<int>(ceil_div(rows, chunk_rows))};
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

// The input gradient, then dweight (and dbias, unless null) by column sums.
template <bool kRms>
void norm_backward(DType storage, void* dinp, void* dweight, void* dbias, const void* dout,
                   const void* inp, const void* weight, const float* mean, const float* rstd,
                   int rows, int channels, DeviceScratch& scratch, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  const unsigned int row_blocks = ceil_div(rows, kWarpsPerBlock);
  const Chunking split = chunking(rows);
  const size_t partial_count = static_cast<size_t>(split.chunks) * channels;
  float* partial_weight = static_cast<float*>(scratch.get(2 * partial_count * sizeof(float)));
  float* partial_bias = dbias != nullptr ? partial_weight + partial_count : nullptr;
  const dim3 grid(ceil_div(channels, kColumnThreads), split.chunks);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dx = static_cast<T*>(dinp);
    const T *dy = static_cast<const T*>(dout), *x = static_cast<const T*>(inp),
            *w = static_cast<const T*>(weight);
    const bool vectorized = channels % kPack<T> == 0 && is_aligned16(dx) && is_aligned16(dy) &&
                            is_aligned16(x) && is_aligned16(w);
    if (vectorized) {
      layernorm_backward_input_kernel<T, true, kRms>
          <<<row_blocks, kRowThreads, 0, stream>>>(dx, dy, x, w, mean, rstd, rows, channels);
    } else {
      layernorm_backward_input_kernel<T, false, kRms>
          <<<row_blocks, kRowThreads, 0, stream>>>(dx, dy, x, w, mean, rstd, rows, channels);
    }
    PARAPLAN_CUDA_CHECK_LAUNCH();
    column_partials_kernel<T, true><<<grid, kColumnThreads, 0, stream>>>(
        partial_weight, partial_bias, dy, x, mean, rstd, rows, channels, split.chunk_rows);
    PARAPLAN_CUDA_CHECK_LAUNCH();
    column_final_kernel<T><<<ceil_div(channels, kColumnThreads), kColumnThreads, 0, stream>>>(
        static_cast<T*>(dweight), static_cast<T*>(dbias), partial_weight, partial_bias,
        split.chunks, channels);
    PARAPLAN_CUDA_CHECK_LAUNCH();
  });
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
  const Chunking split = chunking(rows);
  float* partials =
      static_cast<float*>(scratch.get(static_cast<size_t>(split.chunks) * cols * sizeof(float)));
  const dim3 grid(ceil_div(cols, kColumnThreads), split.chunks);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    column_partials_kernel<T, false>
        <<<grid, kColumnThreads, 0, stream>>>(nullptr, partials, static_cast<const T*>(x), nullptr,
                                              nullptr, nullptr, rows, cols, split.chunk_rows);
    PARAPLAN_CUDA_CHECK_LAUNCH();
    column_final_kernel<T><<<ceil_div(cols, kColumnThreads), kColumnThreads, 0, stream>>>(
        nullptr, static_cast<T*>(out), nullptr, partials, split.chunks, cols);
    PARAPLAN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace paraplan::kernels::cuda
