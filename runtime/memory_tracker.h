// memory_tracker.h: every byte a rank allocates through the op set, by
// category, with the peak of each category and of the total, so a run can put
// its measured memory beside the plan's prediction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "kernels/ops.h"

namespace paraplan {

enum class MemoryCategory { kWeights, kGradients, kOptimizerState, kActivations, kWorkspace };
inline constexpr int kNumMemoryCategories = 5;
const char* memory_category_name(MemoryCategory category);

class MemoryTracker {
 public:
  explicit MemoryTracker(kernels::Ops& ops) : ops_(ops) {}
  ~MemoryTracker();
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  void* allocate(size_t bytes, MemoryCategory category);
  void release(void* pointer);

  uint64_t current(MemoryCategory category) const { return current_[index(category)]; }
  uint64_t peak(MemoryCategory category) const { return peak_[index(category)]; }
  uint64_t current_total() const { return current_total_; }
  uint64_t peak_total() const { return peak_total_; }

 private:
  static int index(MemoryCategory category) { return static_cast<int>(category); }

  kernels::Ops& ops_;
  std::unordered_map<void*, std::pair<size_t, MemoryCategory>> live_;
  std::array<uint64_t, kNumMemoryCategories> current_{}, peak_{};
  uint64_t current_total_ = 0, peak_total_ = 0;
};

}  // namespace paraplan
