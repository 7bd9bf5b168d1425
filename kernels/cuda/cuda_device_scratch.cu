// cuda_device_scratch.cu: DeviceScratch (cuda_kernels.cuh), the device
// scratch an Ops object owns for the kernels that need memory the op set does
// not pass: grown on demand, earlier buffers kept until it is destroyed. And
// device_limits, what launches size their grids by, and the dynamic shared
// memory kernels opt in to.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

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

const DeviceLimits& device_limits() {
  thread_local int cached_device = -1;
  thread_local DeviceLimits cached{};
  int device = 0;
  PARAPLAN_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    int multiprocessors = 0, shared_optin = 0, l2_bytes = 0;
    PARAPLAN_CUDA_CHECK(
        cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    PARAPLAN_CUDA_CHECK(
        cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    PARAPLAN_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
    cached = {std::max(multiprocessors, 1), static_cast<size_t>(shared_optin),
              static_cast<size_t>(l2_bytes)};
    cached_device = device;
  }
  return cached;
}

void allow_dynamic_shared_memory(const void* kernel, size_t bytes, const std::string& what) {
  const DeviceLimits& limits = device_limits();
  if (bytes > limits.shared_optin) {
    throw std::invalid_argument(what + " needs " + std::to_string(bytes) +
                                " bytes of shared memory per block; the device offers " +
                                std::to_string(limits.shared_optin));
  }
  int device = 0;
  PARAPLAN_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> allowed;  // the largest set so far
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& largest = allowed[{kernel, device}];
  if (bytes <= largest) return;
  PARAPLAN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
  largest = bytes;
}

}  // namespace paraplan::kernels::cuda
