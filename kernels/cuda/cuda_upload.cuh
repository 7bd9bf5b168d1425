// cuda_upload.cuh: host-to-device copies that do not make the host wait
// (Ops::copy_from_host_async): the host bytes are copied into page-locked
// staging memory and transferred from there in stream order, so the caller's
// buffer is free at once and the transfer overlaps the device's work.
//
// Double-buffered: two halves, filled in turn; an event after the last copy
// out of a half tells when the device has read it. The host waits (on that
// event) only when it comes back to a half the device has not finished
// reading, i.e. when it runs a whole half ahead of the device; a micro-batch's
// tokens and targets (8 bytes a position: 64 KB for 8 x 1024) fit many times
// in a half (1 MiB at least, grown to the largest copy).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace paraplan::kernels::cuda {

class PinnedUploads {
 public:
  explicit PinnedUploads(cudaStream_t stream) : stream_(stream) {}
  ~PinnedUploads();
  PinnedUploads(const PinnedUploads&) = delete;
  PinnedUploads& operator=(const PinnedUploads&) = delete;

  void upload(void* device_destination, const void* host_source, size_t bytes);
  // Page-locked host bytes held (both halves).
  size_t pinned_bytes() const { return 2 * capacity_; }

 private:
  struct Half {
    char* memory = nullptr;
    cudaEvent_t read = nullptr;  // recorded after the last copy out of this half
    bool pending = false;
  };
  void release() noexcept;
  void grow(size_t bytes);
  void wait_for(Half& half);

  cudaStream_t stream_;
  Half halves_[2];
  int current_ = 0;
  size_t capacity_ = 0;  // bytes per half
  size_t used_ = 0;      // of the current half
};

}  // namespace paraplan::kernels::cuda
