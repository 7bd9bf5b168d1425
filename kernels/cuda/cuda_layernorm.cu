// cuda_layernorm.cu: layer norm forward and backward for the CUDA backend, and
// the deterministic column sums that give the parameter gradients (also used
// for a linear layer's bias gradient when cuBLASLt's epilogue does not apply).
//
// Forward and the input gradient: one warp per row, lanes striding over the
// channels (float4 loads when C % 4 == 0 and every pointer is 16-byte
// aligned), row sums by warp butterflies. As on the CPU, the forward is two
// passes (mean, then the variance of the centred values).
// dweight / dbias: no atomics. Pass 1: the rows are cut into at most
// kMaxChunks chunks; thread c of block (x, chunk) sums column c over its
// chunk's rows in order and writes a partial. Pass 2: thread c adds the
// chunks' partials in chunk order and accumulates (+=) into the gradient.
// The chunking depends only on the row count, so the result is bitwise
// reproducible.
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

template <bool kVectorized>
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int rows, int C,
                                         float epsilon) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // a whole warp leaves together
  const float* x = inp + static_cast<size_t>(row) * C;
  float* y = out + static_cast<size_t>(row) * C;
  const int C4 = C / 4;

  float sum = 0.0f;
  if constexpr (kVectorized) {
    for (int c4 = lane; c4 < C4; c4 += 32) {
      const float4 v = load4(x, c4);
      sum += v.x;
      sum += v.y;
      sum += v.z;
      sum += v.w;
    }
  } else {
    for (int c = lane; c < C; c += 32) sum += x[c];
  }
  const float row_mean = warp_sum(sum) / C;

  float sum_squares = 0.0f;
  if constexpr (kVectorized) {
    for (int c4 = lane; c4 < C4; c4 += 32) {
      const float4 v = load4(x, c4);
      const float a = v.x - row_mean, b = v.y - row_mean, c = v.z - row_mean, d = v.w - row_mean;
      sum_squares += a * a;
      sum_squares += b * b;
      sum_squares += c * c;
      sum_squares += d * d;
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      const float centred = x[c] - row_mean;
      sum_squares += centred * centred;
    }
  }
  const float row_rstd = 1.0f / sqrtf(warp_sum(sum_squares) / C + epsilon);

  if constexpr (kVectorized) {
    for (int c4 = lane; c4 < C4; c4 += 32) {
      const float4 v = load4(x, c4), w = load4(weight, c4), b = load4(bias, c4);
      store4(y, c4,
             make_float4(
                 (v.x - row_mean) * row_rstd * w.x + b.x, (v.y - row_mean) * row_rstd * w.y + b.y,
                 (v.z - row_mean) * row_rstd * w.z + b.z, (v.w - row_mean) * row_rstd * w.w + b.w));
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      y[c] = (x[c] - row_mean) * row_rstd * weight[c] + bias[c];
    }
  }
  if (lane == 0) {
    mean[row] = row_mean;
    rstd[row] = row_rstd;
  }
}

// dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, with
// norm = (x - mean) * rstd and dnorm = weight * dout.
template <bool kVectorized>
__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* weight, const float* mean,
                                                const float* rstd, int rows, int C) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const size_t offset = static_cast<size_t>(row) * C;
  const float* x = inp + offset;
  const float* dy = dout + offset;
  float* dx = dinp + offset;
  const float row_mean = mean[row], row_rstd = rstd[row];
  const int C4 = C / 4;

  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  if constexpr (kVectorized) {
    for (int c4 = lane; c4 < C4; c4 += 32) {
      const float4 v = load4(x, c4), g = load4(dy, c4), w = load4(weight, c4);
      const float xs[4] = {v.x, v.y, v.z, v.w}, gs[4] = {g.x, g.y, g.z, g.w},
                  ws[4] = {w.x, w.y, w.z, w.w};
      for (int k = 0; k < 4; k++) {
        const float norm = (xs[k] - row_mean) * row_rstd;
        const float dnorm = ws[k] * gs[k];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * norm;
      }
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      const float norm = (x[c] - row_mean) * row_rstd;
      const float dnorm = weight[c] * dy[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * norm;
    }
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / C;
  const float dnorm_norm_mean = warp_sum(dnorm_norm_sum) / C;

  if constexpr (kVectorized) {
    for (int c4 = lane; c4 < C4; c4 += 32) {
      const float4 v = load4(x, c4), g = load4(dy, c4), w = load4(weight, c4);
      float4 d = load4(dx, c4);
      const float xs[4] = {v.x, v.y, v.z, v.w}, gs[4] = {g.x, g.y, g.z, g.w},
                  ws[4] = {w.x, w.y, w.z, w.w};
      float ds[4] = {d.x, d.y, d.z, d.w};
      for (int k = 0; k < 4; k++) {
        const float norm = (xs[k] - row_mean) * row_rstd;
        const float dnorm = ws[k] * gs[k];
        ds[k] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * row_rstd;
      }
      store4(dx, c4, make_float4(ds[0], ds[1], ds[2], ds[3]));
    }
  } else {
    for (int c = lane; c < C; c += 32) {
      const float norm = (x[c] - row_mean) * row_rstd;
      const float dnorm = weight[c] * dy[c];
      dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * row_rstd;
    }
  }
}

// Pass 1 of the column sums: partial_b[chunk, c] = sum of dy[r, c] over the
// chunk's rows; with kNorm also partial_a[chunk, c] = sum of norm[r, c] * dy[r, c].
template <bool kNorm>
__global__ void column_partials_kernel(float* partial_a, float* partial_b, const float* dy,
                                       const float* x, const float* mean, const float* rstd,
                                       int rows, int cols, int chunk_rows) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int chunk = blockIdx.y;
  const int first = chunk * chunk_rows;
  const int last = min(rows, first + chunk_rows);
  float sum_a = 0.0f, sum_b = 0.0f;
  for (int r = first; r < last; r++) {
    const size_t index = static_cast<size_t>(r) * cols + c;
    const float g = dy[index];
    if constexpr (kNorm) {
      const float norm = (x[index] - mean[r]) * rstd[r];
      sum_a += norm * g;
    }
    sum_b += g;
  }
  const size_t out = static_cast<size_t>(chunk) * cols + c;
  if constexpr (kNorm) partial_a[out] = sum_a;
  partial_b[out] = sum_b;
}

// Pass 2: out_b[c] += sum over chunks (in order) of partial_b[chunk, c]; the
// same for out_a when it is given.
__global__ void column_final_kernel(float* out_a, float* out_b, const float* partial_a,
                                    const float* partial_b, int chunks, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float sum_a = 0.0f, sum_b = 0.0f;
  for (int k = 0; k < chunks; k++) {
    const size_t index = static_cast<size_t>(k) * cols + c;
    if (out_a != nullptr) sum_a += partial_a[index];
    sum_b += partial_b[index];
  }
  if (out_a != nullptr) out_a[c] += sum_a;
  out_b[c] += sum_b;
}

struct Chunking {
  int chunk_rows, chunks;
};

Chunking chunking(int rows) {
  const int chunk_rows = std::max(kMinChunkRows, static_cast<int>(ceil_div(rows, kMaxChunks)));
  return {chunk_rows, static_cast<int>(ceil_div(rows, chunk_rows))};
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int rows, int channels, float epsilon,
                       cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  const unsigned int blocks = ceil_div(rows, kWarpsPerBlock);
  const bool vectorized = channels % 4 == 0 && is_aligned16(out) && is_aligned16(inp) &&
                          is_aligned16(weight) && is_aligned16(bias);
  if (vectorized) {
    layernorm_forward_kernel<true><<<blocks, kRowThreads, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, rows, channels, epsilon);
  } else {
    layernorm_forward_kernel<false><<<blocks, kRowThreads, 0, stream>>>(
        out, mean, rstd, inp, weight, bias, rows, channels, epsilon);
  }
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int rows, int channels, DeviceScratch& scratch, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  const unsigned int row_blocks = ceil_div(rows, kWarpsPerBlock);
  const bool vectorized = channels % 4 == 0 && is_aligned16(dinp) && is_aligned16(dout) &&
                          is_aligned16(inp) && is_aligned16(weight);
  if (vectorized) {
    layernorm_backward_input_kernel<true><<<row_blocks, kRowThreads, 0, stream>>>(
        dinp, dout, inp, weight, mean, rstd, rows, channels);
  } else {
    layernorm_backward_input_kernel<false><<<row_blocks, kRowThreads, 0, stream>>>(
        dinp, dout, inp, weight, mean, rstd, rows, channels);
  }
  PARAPLAN_CUDA_CHECK_LAUNCH();

  const Chunking split = chunking(rows);
  const size_t partial_count = static_cast<size_t>(split.chunks) * channels;
  float* partial_weight = static_cast<float*>(scratch.get(2 * partial_count * sizeof(float)));
  float* partial_bias = partial_weight + partial_count;
  const dim3 grid(ceil_div(channels, kColumnThreads), split.chunks);
  column_partials_kernel<true><<<grid, kColumnThreads, 0, stream>>>(
      partial_weight, partial_bias, dout, inp, mean, rstd, rows, channels, split.chunk_rows);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  column_final_kernel<<<ceil_div(channels, kColumnThreads), kColumnThreads, 0, stream>>>(
      dweight, dbias, partial_weight, partial_bias, split.chunks, channels);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void column_sums_accumulate(float* out, const float* x, int rows, int cols, DeviceScratch& scratch,
                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const Chunking split = chunking(rows);
  float* partials =
      static_cast<float*>(scratch.get(static_cast<size_t>(split.chunks) * cols * sizeof(float)));
  const dim3 grid(ceil_div(cols, kColumnThreads), split.chunks);
  column_partials_kernel<false><<<grid, kColumnThreads, 0, stream>>>(
      nullptr, partials, x, nullptr, nullptr, nullptr, rows, cols, split.chunk_rows);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  column_final_kernel<<<ceil_div(cols, kColumnThreads), kColumnThreads, 0, stream>>>(
      nullptr, out, nullptr, partials, split.chunks, cols);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace paraplan::kernels::cuda
