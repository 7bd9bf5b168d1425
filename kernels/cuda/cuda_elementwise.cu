// cuda_elementwise.cu: the CUDA backend's elementwise ops (GELU forward and
// backward, residual, accumulate, scale, the bias broadcast of the linear
// fallback, the fp32 <-> storage conversions) and the double-precision sum of
// squares, for fp32 and bf16 storage (AdamW: cuda_optimizer.cu).
//
// Every kernel widens its storage inputs to fp32, computes in fp32 and rounds
// each storage output once when it stores it (accumulations too: dx += y
// stores round(float(dx) + y); GELU's backward, told to overwrite, adds its
// gradient to 0 instead of the old value, never reading it). Elementwise
// kernels are grid-stride loops over 16-byte packs (4 floats or 8 bf16, one
// 128-bit load or store per tensor; cuda_bf16.cuh) when every pointer is
// 16-byte aligned, with a scalar tail for the last n % pack elements;
// otherwise scalar. Each element's result depends only on its own inputs, so
// the vector and scalar paths agree bitwise.
// sum_of_squares is two-pass with a fixed grid: per-block double partials (a
// fixed tree inside each block), then one block sums the partials in order,
// so the result is bitwise reproducible.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_elementwise.cuh"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

constexpr int kThreads = kElementwiseThreads;
constexpr unsigned int kMaxBlocks = kElementwiseMaxBlocks;

// sqrt(2 / pi) and the cubic coefficient of GPT-2's tanh approximation of GELU.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
// exp saturates here instead of overflowing to inf, as the CPU backend's
// exp_approx does (so GELU's backward never forms inf * 0).
constexpr float kExpClamp = 88.0f;

// GELU = 0.5 x (1 + tanh u) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3),
// the same formulation as the CPU backend (no cancellation for negative u).
__device__ __forceinline__ float gelu(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return x / (1.0f + expf(fminf(-2.0f * u, kExpClamp)));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float e = expf(fminf(-2.0f * u, kExpClamp));
  const float s = 1.0f / (1.0f + e);  // (1 + tanh u) / 2
  // sech^2 u = 4 s (1 - s), and 1 - s = e s.
  const float half_sech_squared = 2.0f * e * s * s;
  return s + x * half_sech_squared * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
}

// Each functor has kPackSize, scalar(i) for element i and vector(v) for the
// pack of elements kPackSize * v .. kPackSize * v + kPackSize - 1
// (launch_elementwise, cuda_elementwise.cuh).
template <typename T>
struct GeluForward {
  static constexpr int kPackSize = kPack<T>;
  T* out;
  const T* inp;
  __device__ void scalar(size_t i) const { out[i] = narrow<T>(gelu(widen(inp[i]))); }
  __device__ void vector(size_t v) const {
    float x[kPackSize];
    load_pack(x, inp, v);
#pragma unroll
    for (int k = 0; k < kPackSize; k++) x[k] = gelu(x[k]);
    store_pack(out, v, x);
  }
};

// dinp (+)= gelu'(inp) * dout: added to dinp when accumulate, else to 0
// (dinp not read): bitwise what accumulating into zeros gives.
template <typename T>
struct GeluBackward {
  static constexpr int kPackSize = kPack<T>;
  T* dinp;
  const T* inp;
  const T* dout;
  bool accumulate;
  __device__ void scalar(size_t i) const {
    const float old = accumulate ? widen(dinp[i]) : 0.0f;
    dinp[i] = narrow<T>(old + gelu_grad(widen(inp[i])) * widen(dout[i]));
  }
  __device__ void vector(size_t v) const {
    float x[kPackSize], g[kPackSize], d[kPackSize];
    load_pack(x, inp, v);
    load_pack(g, dout, v);
    if (accumulate) {
      load_pack(d, dinp, v);
    } else {
#pragma unroll
      for (int k = 0; k < kPackSize; k++) d[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kPackSize; k++) d[k] = d[k] + gelu_grad(x[k]) * g[k];
    store_pack(dinp, v, d);
  }
};

// out = a + b (out may be a: accumulate is Add{dx, dx, dout}).
template <typename T>
struct Add {
  static constexpr int kPackSize = kPack<T>;
  T* out;
  const T* a;
  const T* b;
  __device__ void scalar(size_t i) const { out[i] = narrow<T>(widen(a[i]) + widen(b[i])); }
  __device__ void vector(size_t v) const {
    float x[kPackSize], y[kPackSize];
    load_pack(x, a, v);
    load_pack(y, b, v);
#pragma unroll
    for (int k = 0; k < kPackSize; k++) x[k] = x[k] + y[k];
    store_pack(out, v, x);
  }
};

// x (storage) += y (fp32).
template <typename T>
struct AddFloat {
  static constexpr int kPackSize = kPack<T>;
  T* x;
  const float* y;
  __device__ void scalar(size_t i) const { x[i] = narrow<T>(widen(x[i]) + y[i]); }
  __device__ void vector(size_t v) const {
    float a[kPackSize], b[kPackSize];
    load_pack(a, x, v);
    load_floats(b, y + v * kPackSize);
#pragma unroll
    for (int k = 0; k < kPackSize; k++) a[k] = a[k] + b[k];
    store_pack(x, v, a);
  }
};

// x (fp32) += y (storage), widened.
template <typename T>
struct AddIntoFloat {
  static constexpr int kPackSize = kPack<T>;
  float* x;
  const T* y;
  __device__ void scalar(size_t i) const { x[i] = x[i] + widen(y[i]); }
  __device__ void vector(size_t v) const {
    float a[kPackSize], b[kPackSize];
    load_floats(a, x + v * kPackSize);
    load_pack(b, y, v);
#pragma unroll
    for (int k = 0; k < kPackSize; k++) a[k] = a[k] + b[k];
    store_floats(x + v * kPackSize, a);
  }
};

template <typename T>
struct Scale {
  static constexpr int kPackSize = kPack<T>;
  T* x;
  float factor;
  __device__ void scalar(size_t i) const { x[i] = narrow<T>(widen(x[i]) * factor); }
  __device__ void vector(size_t v) const {
    float y[kPackSize];
    load_pack(y, x, v);
#pragma unroll
    for (int k = 0; k < kPackSize; k++) y[k] = y[k] * factor;
    store_pack(x, v, y);
  }
};

// out (storage) = in (fp32) rounded.
template <typename T>
struct FromFloat {
  static constexpr int kPackSize = kPack<T>;
  T* out;
  const float* in;
  __device__ void scalar(size_t i) const { out[i] = narrow<T>(in[i]); }
  __device__ void vector(size_t v) const {
    float x[kPackSize];
    load_floats(x, in + v * kPackSize);
    store_pack(out, v, x);
  }
};

// out (fp32) = in (storage).
template <typename T>
struct ToFloat {
  static constexpr int kPackSize = kPack<T>;
  float* out;
  const T* in;
  __device__ void scalar(size_t i) const { out[i] = widen(in[i]); }
  __device__ void vector(size_t v) const {
    float x[kPackSize];
    load_pack(x, in, v);
    store_floats(out + v * kPackSize, x);
  }
};

template <typename T>
__global__ void broadcast_rows_kernel(T* out, const T* row, int rows, int cols) {
  const size_t total = static_cast<size_t>(rows) * cols;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    out[i] = row[i % cols];
  }
}

// Pass 1: block b sums the squares of its grid-stride share in double, then a
// fixed tree in shared memory; partials[b] = the block's sum.
template <typename T>
__global__ void sum_of_squares_partials_kernel(double* partials, const T* x, size_t n,
                                               bool vectorized, bool square) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double sum = 0.0;
  size_t scalar_begin = 0;
  if (vectorized) {
    const size_t packs = n / kPack<T>;
    for (size_t v = first; v < packs; v += stride) {
      float f[kPack<T>];
      load_pack(f, x, v);
#pragma unroll
      for (int k = 0; k < kPack<T>; k++) {
        const double a = f[k];
        sum += square ? a * a : a;
      }
    }
    scalar_begin = packs * kPack<T>;
  }
  for (size_t i = scalar_begin + first; i < n; i += stride) {
    const double a = widen(x[i]);
    sum += square ? a * a : a;
  }
  __shared__ double warp_sums[kThreads / 32];
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double block_sum = 0.0;
    for (int w = 0; w < kThreads / 32; w++) block_sum += warp_sums[w];
    partials[blockIdx.x] = block_sum;
  }
}

// Pass 2: one block; thread t sums partials t, t + 256, ... in order, then the
// same tree; the total is added to *accumulator.
__global__ void sum_of_squares_final_kernel(double* accumulator, const double* partials,
                                            int count) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  __shared__ double warp_sums[kThreads / 32];
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kThreads / 32; w++) total += warp_sums[w];
    *accumulator += total;
  }
}

}  // namespace

void gelu_forward(DType storage, void* out, const void* inp, size_t n, cudaStream_t stream) {
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(GeluForward<T>{static_cast<T*>(out), static_cast<const T*>(inp)}, n,
                       is_aligned16(out) && is_aligned16(inp), stream);
  });
}

void gelu_backward(DType storage, void* dinp, const void* inp, const void* dout, size_t n,
                   GradientWrite write, cudaStream_t stream) {
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(
        GeluBackward<T>{static_cast<T*>(dinp), static_cast<const T*>(inp),
                        static_cast<const T*>(dout), write == GradientWrite::kAccumulate},
        n, is_aligned16(dinp) && is_aligned16(inp) && is_aligned16(dout), stream);
  });
}

void residual_forward(DType storage, void* out, const void* a, const void* b, size_t n,
                      cudaStream_t stream) {
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(
        Add<T>{static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b)}, n,
        is_aligned16(out) && is_aligned16(a) && is_aligned16(b), stream);
  });
}

void accumulate(DType storage, void* dx, const void* dout, size_t n, cudaStream_t stream) {
  // dx += dout is out = dx + dout, in place.
  residual_forward(storage, dx, dx, dout, n, stream);
}

void accumulate_float(DType storage, void* x, const float* y, size_t n, cudaStream_t stream) {
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(AddFloat<T>{static_cast<T*>(x), y}, n, is_aligned16(x) && is_aligned16(y),
                       stream);
  });
}

void accumulate_into_float(DType storage, float* x, const void* y, size_t n, cudaStream_t stream) {
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(AddIntoFloat<T>{x, static_cast<const T*>(y)}, n,
                       is_aligned16(x) && is_aligned16(y), stream);
  });
}

void scale(DType storage, void* x, float factor, size_t n, cudaStream_t stream) {
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(Scale<T>{static_cast<T*>(x), factor}, n, is_aligned16(x), stream);
  });
}

void broadcast_rows(DType storage, void* out, const void* row, int rows, int cols,
                    cudaStream_t stream) {
  const size_t total = static_cast<size_t>(rows) * cols;
  if (total == 0) return;
  const unsigned int blocks = std::min(ceil_div(total, kThreads), kMaxBlocks);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    broadcast_rows_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<T*>(out),
                                                           static_cast<const T*>(row), rows, cols);
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void convert_from_float(DType storage, void* out, const float* in, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (storage == DType::kFloat32) {
    if (out != in) {
      PARAPLAN_CUDA_CHECK(
          cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  launch_elementwise(FromFloat<bf16>{static_cast<bf16*>(out), in}, n,
                     is_aligned16(out) && is_aligned16(in), stream);
}

void convert_to_float(DType storage, float* out, const void* in, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (storage == DType::kFloat32) {
    if (out != in) {
      PARAPLAN_CUDA_CHECK(
          cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  launch_elementwise(ToFloat<bf16>{out, static_cast<const bf16*>(in)}, n,
                     is_aligned16(out) && is_aligned16(in), stream);
}

namespace {

// *accumulator += the sum (of squares when square) of n elements of T, in an
// order that depends on n and the alignment only.
template <typename T>
void accumulate_sum_in_fixed_order(double* accumulator, const T* x, size_t n, bool square,
                                   double* partials, cudaStream_t stream) {
  if (n == 0) return;
  const bool vectorized = is_aligned16(x);
  const size_t work = vectorized ? std::max<size_t>(n / kPack<T>, 1) : n;
  const int blocks =
      static_cast<int>(std::min<unsigned int>(ceil_div(work, kThreads), kSumOfSquaresBlocks));
  sum_of_squares_partials_kernel<<<blocks, kThreads, 0, stream>>>(partials, x, n, vectorized,
                                                                  square);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  sum_of_squares_final_kernel<<<1, kThreads, 0, stream>>>(accumulator, partials, blocks);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void accumulate_sum_of_squares(DType storage, double* accumulator, const void* x, size_t n,
                               double* partials, cudaStream_t stream) {
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    accumulate_sum_in_fixed_order(accumulator, static_cast<const T*>(x), n, true, partials, stream);
  });
}

void accumulate_sum(double* accumulator, const float* x, size_t n, double* partials,
                    cudaStream_t stream) {
  accumulate_sum_in_fixed_order(accumulator, x, n, false, partials, stream);
}

}  // namespace paraplan::kernels::cuda
