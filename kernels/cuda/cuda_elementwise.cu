// cuda_elementwise.cu: the CUDA backend's elementwise ops (GELU forward and
// backward, residual, accumulate, scale, the bias broadcast of the linear
// fallback), AdamW, and the double-precision sum of squares.
//
// Elementwise kernels are grid-stride loops over float4 (128-bit loads and
// stores) when every pointer is 16-byte aligned, with a scalar tail for the
// last n % 4 elements; otherwise scalar. Each element's result depends only
// on its own inputs, so the vector and scalar paths agree bitwise.
// sum_of_squares is two-pass with a fixed grid: per-block double partials (a
// fixed tree inside each block), then one block sums the partials in order,
// so the result is bitwise reproducible.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned int kMaxBlocks = 1u << 16;  // grid-stride beyond this

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

// Each functor has scalar(i) for element i and vector(v) for elements 4v..4v+3.
struct GeluForward {
  float* out;
  const float* inp;
  __device__ void scalar(size_t i) const { out[i] = gelu(inp[i]); }
  __device__ void vector(size_t v) const {
    const float4 x = load4(inp, v);
    store4(out, v, make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w)));
  }
};

struct GeluBackward {
  float* dinp;
  const float* inp;
  const float* dout;
  __device__ void scalar(size_t i) const { dinp[i] += gelu_grad(inp[i]) * dout[i]; }
  __device__ void vector(size_t v) const {
    const float4 x = load4(inp, v), g = load4(dout, v);
    float4 d = load4(dinp, v);
    d.x += gelu_grad(x.x) * g.x;
    d.y += gelu_grad(x.y) * g.y;
    d.z += gelu_grad(x.z) * g.z;
    d.w += gelu_grad(x.w) * g.w;
    store4(dinp, v, d);
  }
};

struct Add {
  float* out;
  const float* a;
  const float* b;
  __device__ void scalar(size_t i) const { out[i] = a[i] + b[i]; }
  __device__ void vector(size_t v) const {
    const float4 x = load4(a, v), y = load4(b, v);
    store4(out, v, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
  }
};

struct Scale {
  float* x;
  float factor;
  __device__ void scalar(size_t i) const { x[i] *= factor; }
  __device__ void vector(size_t v) const {
    const float4 y = load4(x, v);
    store4(x, v, make_float4(y.x * factor, y.y * factor, y.z * factor, y.w * factor));
  }
};

struct AdamW {
  float* params;
  const float* grads;
  float* first_moment;
  float* second_moment;
  float learning_rate, beta1, beta2, epsilon, decay_factor, beta1_correction, beta2_correction;

  // The CPU backend's formula, operation for operation.
  __device__ __forceinline__ void update(float& param, float grad, float& m, float& v) const {
    m = beta1 * m + (1.0f - beta1) * grad;
    v = beta2 * v + (1.0f - beta2) * grad * grad;
    const float m_hat = m / beta1_correction;
    const float v_hat = v / beta2_correction;
    param = param * decay_factor - learning_rate * m_hat / (sqrtf(v_hat) + epsilon);
  }
  __device__ void scalar(size_t i) const {
    float param = params[i], m = first_moment[i], v = second_moment[i];
    update(param, grads[i], m, v);
    params[i] = param;
    first_moment[i] = m;
    second_moment[i] = v;
  }
  __device__ void vector(size_t i4) const {
    float4 p = load4(params, i4), m = load4(first_moment, i4), v = load4(second_moment, i4);
    const float4 g = load4(grads, i4);
    update(p.x, g.x, m.x, v.x);
    update(p.y, g.y, m.y, v.y);
    update(p.z, g.z, m.z, v.z);
    update(p.w, g.w, m.w, v.w);
    store4(params, i4, p);
    store4(first_moment, i4, m);
    store4(second_moment, i4, v);
  }
};

template <typename Op>
__global__ void elementwise_kernel(Op op, size_t n, bool vectorized) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t scalar_begin = 0;
  if (vectorized) {
    const size_t n4 = n / 4;
    for (size_t v = first; v < n4; v += stride) op.vector(v);
    scalar_begin = n4 * 4;
  }
  for (size_t i = scalar_begin + first; i < n; i += stride) op.scalar(i);
}

template <typename Op>
void launch_elementwise(const Op& op, size_t n, bool vectorized, cudaStream_t stream) {
  if (n == 0) return;
  const size_t work = vectorized ? std::max<size_t>(n / 4, 1) : n;
  const unsigned int blocks = std::min(ceil_div(work, kThreads), kMaxBlocks);
  elementwise_kernel<<<blocks, kThreads, 0, stream>>>(op, n, vectorized);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

__global__ void broadcast_rows_kernel(float* out, const float* row, int rows, int cols) {
  const size_t total = static_cast<size_t>(rows) * cols;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    out[i] = row[i % cols];
  }
}

// Pass 1: block b sums the squares of its grid-stride share in double, then a
// fixed tree in shared memory; partials[b] = the block's sum.
__global__ void sum_of_squares_partials_kernel(double* partials, const float* x, size_t n,
                                               bool vectorized) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double sum = 0.0;
  size_t scalar_begin = 0;
  if (vectorized) {
    const size_t n4 = n / 4;
    for (size_t v = first; v < n4; v += stride) {
      const float4 f = load4(x, v);
      const double a = f.x, b = f.y, c = f.z, d = f.w;
      sum += a * a;
      sum += b * b;
      sum += c * c;
      sum += d * d;
    }
    scalar_begin = n4 * 4;
  }
  for (size_t i = scalar_begin + first; i < n; i += stride) {
    const double a = x[i];
    sum += a * a;
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

// Pass 2: one block; thread t sums partials t, t + 256, ... in order, then the same tree.
__global__ void sum_of_squares_final_kernel(double* partials, int count) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  __shared__ double warp_sums[kThreads / 32];
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kThreads / 32; w++) total += warp_sums[w];
    partials[count] = total;
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  launch_elementwise(GeluForward{out, inp}, n, is_aligned16(out) && is_aligned16(inp), stream);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n,
                   cudaStream_t stream) {
  launch_elementwise(GeluBackward{dinp, inp, dout}, n,
                     is_aligned16(dinp) && is_aligned16(inp) && is_aligned16(dout), stream);
}

void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  launch_elementwise(Add{out, a, b}, n, is_aligned16(out) && is_aligned16(a) && is_aligned16(b),
                     stream);
}

void accumulate(float* dx, const float* dout, size_t n, cudaStream_t stream) {
  // dx += dout is out = dx + dout, in place.
  launch_elementwise(Add{dx, dx, dout}, n, is_aligned16(dx) && is_aligned16(dout), stream);
}

void scale(float* x, float factor, size_t n, cudaStream_t stream) {
  launch_elementwise(Scale{x, factor}, n, is_aligned16(x), stream);
}

void broadcast_rows(float* out, const float* row, int rows, int cols, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(rows) * cols;
  if (total == 0) return;
  broadcast_rows_kernel<<<std::min(ceil_div(total, kThreads), kMaxBlocks), kThreads, 0, stream>>>(
      out, row, rows, cols);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void adamw(float* params, const float* grads, float* first_moment, float* second_moment, size_t n,
           float learning_rate, float beta1, float beta2, float epsilon, float weight_decay,
           float beta1_correction, float beta2_correction, cudaStream_t stream) {
  const AdamW op{params,
                 grads,
                 first_moment,
                 second_moment,
                 learning_rate,
                 beta1,
                 beta2,
                 epsilon,
                 1.0f - learning_rate * weight_decay,
                 beta1_correction,
                 beta2_correction};
  const bool vectorized = is_aligned16(params) && is_aligned16(grads) &&
                          is_aligned16(first_moment) && is_aligned16(second_moment);
  launch_elementwise(op, n, vectorized, stream);
}

double sum_of_squares(const float* x, size_t n, double* partials, cudaStream_t stream) {
  if (n == 0) return 0.0;
  // The grid is a function of n alone: the same n gives the same summation order.
  const bool vectorized = is_aligned16(x);
  const size_t work = vectorized ? std::max<size_t>(n / 4, 1) : n;
  const int blocks =
      static_cast<int>(std::min<unsigned int>(ceil_div(work, kThreads), kSumOfSquaresBlocks));
  sum_of_squares_partials_kernel<<<blocks, kThreads, 0, stream>>>(partials, x, n, vectorized);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  sum_of_squares_final_kernel<<<1, kThreads, 0, stream>>>(partials, blocks);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  double result = 0.0;
  PARAPLAN_CUDA_CHECK(
      cudaMemcpyAsync(&result, partials + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  PARAPLAN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace paraplan::kernels::cuda
