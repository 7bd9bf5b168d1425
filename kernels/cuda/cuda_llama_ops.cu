// cuda_llama_ops.cu: SwiGLU and the rotary position embedding for the CUDA
// backend (kernels/ops.h; RMS norm is beside the layer norm in
// cuda_layernorm.cu), fp32 or bf16 storage, every output rounded once.
//
// SwiGLU: elementwise over out [rows, hidden] (launch_elementwise), each
// element reading its gate and up values from the [rows, 2 * hidden] row; 16-byte
// packs when hidden is a multiple of the pack (a pack then stays in one row)
// and every pointer is aligned. silu(x) = x / (1 + exp(-x)), the exponent
// clamped at 88 as the CPU backend's exp_approx saturates.
// Rotary embedding: one thread per rotated pair (x[i], x[i + D/2]) of a query
// or key head, angles from the caller's fp32 cos/sin tables [T, D/2]; in
// place, each element read and written by one thread.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_elementwise.cuh"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

constexpr float kExpClamp = 88.0f;

// Element i of out [rows, hidden] reads gate_up[r, j] and gate_up[r, hidden + j]
// (r = i / hidden, j = i % hidden): the gate's index is i + r * hidden.
__device__ __forceinline__ size_t gate_index(size_t i, int hidden) {
  return i + (i / hidden) * hidden;
}

template <typename T>
struct SwigluForward {
  static constexpr int kPackSize = kPack<T>;
  T* out;
  const T* gate_up;
  int hidden;
  __device__ static float value(float gate, float up) {
    return gate / (1.0f + expf(fminf(-gate, kExpClamp))) * up;
  }
  __device__ void scalar(size_t i) const {
    const size_t g = gate_index(i, hidden);
    out[i] = narrow<T>(value(widen(gate_up[g]), widen(gate_up[g + hidden])));
  }
  __device__ void vector(size_t v) const {
    const size_t g = gate_index(v * kPackSize, hidden) / kPackSize;
    float gate[kPackSize], up[kPackSize];
    load_pack(gate, gate_up, g);
    load_pack(up, gate_up, g + hidden / kPackSize);
#pragma unroll
    for (int k = 0; k < kPackSize; k++) gate[k] = value(gate[k], up[k]);
    store_pack(out, v, gate);
  }
};

// d gate += dy * up * silu'(gate), silu'(x) = s (1 + x (1 - s)) with
// s = 1 / (1 + exp(-x)) (not s (1 + x e s): x e overflows for x below about
// -88); d up += dy * silu(gate). As the CPU backend computes it.
template <typename T>
struct SwigluBackward {
  static constexpr int kPackSize = kPack<T>;
  T* dgate_up;
  const T* gate_up;
  const T* dout;
  int hidden;
  bool accumulate;  // else the gradients are added to 0, dgate_up not read
  __device__ static void gradients(float x, float up, float dy, float& dgate, float& dup) {
    const float e = expf(fminf(-x, kExpClamp));
    const float s = 1.0f / (1.0f + e);
    dgate += dy * up * (s * (1.0f + x * (1.0f - s)));
    dup += dy * (x * s);
  }
  __device__ void scalar(size_t i) const {
    const size_t g = gate_index(i, hidden), u = g + hidden;
    float dgate = accumulate ? widen(dgate_up[g]) : 0.0f;
    float dup = accumulate ? widen(dgate_up[u]) : 0.0f;
    gradients(widen(gate_up[g]), widen(gate_up[u]), widen(dout[i]), dgate, dup);
    dgate_up[g] = narrow<T>(dgate);
    dgate_up[u] = narrow<T>(dup);
  }
  __device__ void vector(size_t v) const {
    const size_t g = gate_index(v * kPackSize, hidden) / kPackSize, u = g + hidden / kPackSize;
    float gate[kPackSize], up[kPackSize], dy[kPackSize], dgate[kPackSize], dup[kPackSize];
    load_pack(gate, gate_up, g);
    load_pack(up, gate_up, u);
    load_pack(dy, dout, v);
    if (accumulate) {
      load_pack(dgate, dgate_up, g);
      load_pack(dup, dgate_up, u);
    } else {
#pragma unroll
      for (int k = 0; k < kPackSize; k++) dgate[k] = dup[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kPackSize; k++) gradients(gate[k], up[k], dy[k], dgate[k], dup[k]);
    store_pack(dgate_up, g, dgate);
    store_pack(dgate_up, u, dup);
  }
};

// Pair p = ((row * rotated_heads) + head) * half + i of qkv rows [B * T],
// rotated_heads = H + Hkv (the query heads, then the key heads); sign -1
// rotates backwards.
template <typename T>
__global__ void rope_kernel(T* qkv, const float* cos, const float* sin, size_t pairs, int seq_len,
                            int rotated_heads, int half, size_t stride, float sign) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += step) {
    const int i = static_cast<int>(p % half);
    const size_t head_row = p / half;
    const int head = static_cast<int>(head_row % rotated_heads);
    const size_t row = head_row / rotated_heads;
    const size_t angle = (row % seq_len) * half + i;
    const float c = cos[angle], s = sign * sin[angle];
    T* x1 = qkv + row * stride + static_cast<size_t>(head) * 2 * half + i;
    T* x2 = x1 + half;
    const float a = widen(*x1), b = widen(*x2);
    *x1 = narrow<T>(a * c - b * s);
    *x2 = narrow<T>(b * c + a * s);
  }
}

}  // namespace

void swiglu_forward(DType storage, void* out, const void* gate_up, int rows, int hidden,
                    cudaStream_t stream) {
  if (rows <= 0 || hidden <= 0) return;
  const size_t n = static_cast<size_t>(rows) * hidden;
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vectorized = hidden % kPack<T> == 0 && is_aligned16(out) && is_aligned16(gate_up);
    launch_elementwise(
        SwigluForward<T>{static_cast<T*>(out), static_cast<const T*>(gate_up), hidden}, n,
        vectorized, stream);
  });
}

void swiglu_backward(DType storage, void* dgate_up, const void* gate_up, const void* dout, int rows,
                     int hidden, GradientWrite write, cudaStream_t stream) {
  if (rows <= 0 || hidden <= 0) return;
  const size_t n = static_cast<size_t>(rows) * hidden;
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vectorized = hidden % kPack<T> == 0 && is_aligned16(dgate_up) &&
                            is_aligned16(gate_up) && is_aligned16(dout);
    launch_elementwise(
        SwigluBackward<T>{static_cast<T*>(dgate_up), static_cast<const T*>(gate_up),
                          static_cast<const T*>(dout), hidden, write == GradientWrite::kAccumulate},
        n, vectorized, stream);
  });
}

void rope(DType storage, void* qkv, const float* cos, const float* sin, int batch, int seq_len,
          int num_heads, int num_kv_heads, int head_dim, bool inverse, cudaStream_t stream) {
  if (head_dim % 2 != 0)
    throw std::invalid_argument("rope: head_dim " + std::to_string(head_dim) +
                                " is odd; the rotary embedding pairs dimension i with i + D/2");
  if (batch <= 0 || seq_len <= 0 || head_dim <= 0) return;
  const int half = head_dim / 2, rotated_heads = num_heads + num_kv_heads;
  const size_t pairs = static_cast<size_t>(batch) * seq_len * rotated_heads * half;
  if (pairs == 0) return;
  const size_t stride = static_cast<size_t>(num_heads + 2 * num_kv_heads) * head_dim;
  const unsigned int blocks = std::min(ceil_div(pairs, kElementwiseThreads), kElementwiseMaxBlocks);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<blocks, kElementwiseThreads, 0, stream>>>(static_cast<T*>(qkv), cos, sin,
                                                               pairs, seq_len, rotated_heads, half,
                                                               stride, inverse ? -1.0f : 1.0f);
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace paraplan::kernels::cuda
