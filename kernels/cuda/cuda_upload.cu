// cuda_upload.cu: the double-buffered pinned staging of cuda_upload.cuh.
#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_upload.cuh"

namespace paraplan::kernels::cuda {

namespace {
constexpr size_t kAlignment = 256;                 // of each staged copy
constexpr size_t kSmallestHalf = size_t{1} << 20;  // 1 MiB
}  // namespace

PinnedUploads::~PinnedUploads() {
  release();
}

void PinnedUploads::release() noexcept {
  for (Half& half : halves_) {
    if (half.read != nullptr) {
      cudaEventSynchronize(half.read);  // no throwing from a destructor
      cudaEventDestroy(half.read);
    }
    if (half.memory != nullptr) cudaFreeHost(half.memory);
    half = Half{};
  }
  capacity_ = 0;
  used_ = 0;
}

void PinnedUploads::wait_for(Half& half) {
  if (half.pending) PARAPLAN_CUDA_CHECK(cudaEventSynchronize(half.read));
  half.pending = false;
}

void PinnedUploads::grow(size_t bytes) {
  for (Half& half : halves_) wait_for(half);
  release();
  capacity_ = std::max(kSmallestHalf, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  for (Half& half : halves_) {
    PARAPLAN_CUDA_CHECK(cudaMallocHost(&half.memory, capacity_));
    PARAPLAN_CUDA_CHECK(cudaEventCreateWithFlags(&half.read, cudaEventDisableTiming));
  }
}

void PinnedUploads::upload(void* device_destination, const void* host_source, size_t bytes) {
  if (bytes == 0) return;
  if (bytes > capacity_) grow(std::max(bytes, 2 * capacity_));
  if (used_ + bytes > capacity_) {
    current_ ^= 1;
    wait_for(halves_[current_]);
    used_ = 0;
  }
  Half& half = halves_[current_];
  char* staged = half.memory + used_;
  std::memcpy(staged, host_source, bytes);
  PARAPLAN_CUDA_CHECK(
      cudaMemcpyAsync(device_destination, staged, bytes, cudaMemcpyHostToDevice, stream_));
  PARAPLAN_CUDA_CHECK(cudaEventRecord(half.read, stream_));
  half.pending = true;
  used_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace paraplan::kernels::cuda
