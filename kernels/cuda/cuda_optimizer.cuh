// cuda_optimizer.cuh: Ops::adamw_runs on the CUDA backend: the run list kept
// on the device (AdamWRunTable) and the one launch that updates every run
// (cuda_optimizer.cu). Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda/cuda_upload.cuh"
#include "kernels/ops.h"

namespace paraplan::kernels::cuda {

// A run as the kernel reads it: AdamWRun, where its chunks start among all
// runs' chunks, and whether all five pointers allow 16-byte accesses.
struct DeviceAdamWRun {
  float* master;
  void* params;
  const void* grads;
  float* first_moment;
  float* second_moment;
  size_t n;
  size_t first_chunk;
  float weight_decay;
  int vectorized;
};

// The runs of the last adamw_runs call, on the device. A step's list is the
// same as the one before unless the optimizer's buffers moved, so set()
// uploads (queued, through pinned staging) only when it changed: a step
// sends nothing but the kernel's arguments.
class AdamWRunTable {
 public:
  AdamWRunTable() = default;
  ~AdamWRunTable();
  AdamWRunTable(const AdamWRunTable&) = delete;
  AdamWRunTable& operator=(const AdamWRunTable&) = delete;

  void set(const std::vector<AdamWRun>& runs, PinnedUploads& uploads);
  const DeviceAdamWRun* device_runs() const { return device_; }
  int count() const { return static_cast<int>(host_.size()); }
  size_t total_chunks() const { return total_chunks_; }
  size_t device_bytes() const { return capacity_ * sizeof(DeviceAdamWRun); }

 private:
  std::vector<DeviceAdamWRun> host_;  // what the device holds
  DeviceAdamWRun* device_ = nullptr;
  std::vector<DeviceAdamWRun*> retired_;  // outgrown tables, freed at destruction
  size_t capacity_ = 0;                   // runs the device buffer holds
  size_t total_chunks_ = 0;
};

// Ops::adamw_runs over the table's runs in one launch. pending_errors: the
// backend's two deferred target-error words (cuda_loss.cu); while either is
// set, the kernel changes nothing.
void adamw_runs(DType storage, DType gradients, const AdamWRunTable& table,
                const AdamWStep& hyperparameters, const GradientClip& clip,
                const unsigned long long* pending_errors, cudaStream_t stream);

}  // namespace paraplan::kernels::cuda
