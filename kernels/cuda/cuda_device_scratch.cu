// cuda_device_scratch.cu: DeviceScratch (cuda_kernels.cuh), the device
// scratch an Ops object owns for the kernels that need memory the op set does
// not pass: grown on demand, earlier buffers kept until it is destroyed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

DeviceScratch::~DeviceScratch() {
  // No throwing from a destructor.
  for (void* retired : retired_) cudaFree(retired);
  if (data_ != nullptr) cudaFree(data_);
}

void* DeviceScratch::get(size_t bytes) {
  if (bytes <= bytes_ && data_ != nullptr) return data_;
  const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  void* grown = nullptr;
  PARAPLAN_CUDA_CHECK(cudaMalloc(&grown, rounded));
  // Work queued before may still use the old buffer: kept, never freed mid-run.
  if (data_ != nullptr) {
    retired_.push_back(data_);
    retired_bytes_ += bytes_;
  }
  data_ = grown;
  bytes_ = rounded;
  return data_;
}

}  // namespace paraplan::kernels::cuda
