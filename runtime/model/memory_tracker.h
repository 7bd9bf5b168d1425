// memory_tracker.h: every byte a rank allocates through the op set, by
// category, with the peak of each category and of the total, so a run can put
// its measured memory beside the plan's prediction. Memory the backend
// allocates for itself (Ops::internal_bytes: the cuBLAS workspace, kernel
// scratch) counts as workspace, sampled at every allocation and release and
// whenever sample_backend() is called (DistributedOptimizer::finish_step
// does, once per step; evaluation after its batches).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "kernels/ops.h"

namespace paraplan {

// kGathered: ZeRO-3's gathered working set (parallel/sharded_parameters.h),
// the slots a unit's whole parameters are all-gathered into; kWeights holds
// the rank's own shard and the units it keeps whole.
enum class MemoryCategory {
  kWeights,
  kGradients,
  kOptimizerState,
  kGathered,
  kActivations,
  kWorkspace
};
inline constexpr int kNumMemoryCategories = 6;
const char* memory_category_name(MemoryCategory category);

// Thrown when an allocation would take a rank past its device's capacity.
class OutOfDeviceMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "1.5 GiB" (three significant digits).
std::string gibibytes_text(double bytes);
// This machine's physical memory in bytes (0 when unknown).
double physical_memory_bytes();
// The memory this process could be given now without swapping
// (MemAvailable, or less where a cgroup v2 limit leaves less), in bytes; 0
// when unknown.
double available_memory_bytes();
// Refuses, before it is allocated, what this machine could never hold: throws
// std::runtime_error "<what> take X GiB, more than the Y GiB of memory this
// machine has; <remedy>" when `bytes` exceed its physical memory.
void require_host_memory(double bytes, const std::string& what, const std::string& remedy);

class MemoryTracker {
 public:
  // capacity_bytes > 0 makes the tracker refuse (OutOfDeviceMemory) an
  // allocation that would take the total past it: how the CPU backend stands
  // in for a device of the plan's memory size (replay, autotune experiments).
  explicit MemoryTracker(kernels::Ops& ops, uint64_t capacity_bytes = 0)
      : ops_(ops), capacity_(capacity_bytes) {}
  ~MemoryTracker();
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  void* allocate(size_t bytes, MemoryCategory category);
  void release(void* pointer);
  // Brings the backend's own memory up to date (workspace category).
  void sample_backend();

  uint64_t current(MemoryCategory category) const { return current_[index(category)]; }
  uint64_t peak(MemoryCategory category) const { return peak_[index(category)]; }
  uint64_t current_total() const { return current_total_; }
  uint64_t peak_total() const { return peak_total_; }
  uint64_t capacity() const { return capacity_; }

 private:
  static int index(MemoryCategory category) { return static_cast<int>(category); }

  kernels::Ops& ops_;
  std::unordered_map<void*, std::pair<size_t, MemoryCategory>> live_;
  std::array<uint64_t, kNumMemoryCategories> current_{}, peak_{};
  uint64_t current_total_ = 0, peak_total_ = 0;
  uint64_t backend_bytes_ = 0;  // Ops::internal_bytes() when last sampled
  uint64_t capacity_ = 0;
};

}  // namespace paraplan
