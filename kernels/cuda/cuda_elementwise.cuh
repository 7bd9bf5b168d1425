// cuda_elementwise.cuh: the grid-stride launcher the CUDA backend's
// elementwise kernels share (cuda_elementwise.cu, cuda_llama_ops.cu). An op is
// a functor with kPackSize, scalar(i) for element i and vector(v) for the pack
// of elements kPackSize * v .. kPackSize * v + kPackSize - 1 (16-byte loads
// and stores, cuda_bf16.cuh); the kernel runs the packs when `vectorized`
// (every pointer 16-byte aligned), then the scalar tail. Each element's
// result depends only on its own inputs, so both paths give the same bits.
// Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

inline constexpr int kElementwiseThreads = 256;
inline constexpr unsigned int kElementwiseMaxBlocks = 1u << 16;  // grid-stride beyond this

#ifdef __CUDACC__

template <typename Op>
__global__ void elementwise_kernel(Op op, size_t n, bool vectorized) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t scalar_begin = 0;
  if (vectorized) {
    const size_t packs = n / Op::kPackSize;
    for (size_t v = first; v < packs; v += stride) op.vector(v);
    scalar_begin = packs * Op::kPackSize;
  }
  for (size_t i = scalar_begin + first; i < n; i += stride) op.scalar(i);
}

// op over n elements on stream.
template <typename Op>
void launch_elementwise(const Op& op, size_t n, bool vectorized, cudaStream_t stream) {
  if (n == 0) return;
  const size_t work = vectorized ? std::max<size_t>(n / Op::kPackSize, 1) : n;
  const unsigned int blocks = std::min(ceil_div(work, kElementwiseThreads), kElementwiseMaxBlocks);
  elementwise_kernel<<<blocks, kElementwiseThreads, 0, stream>>>(op, n, vectorized);
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

#endif  // __CUDACC__

}  // namespace paraplan::kernels::cuda
