// sharded_parameters.h: ZeRO-3's parameter storage of one rank
// (Rajbhandari et al. 2020, P_os+g+p): no whole parameter buffer; the rank
// keeps its chunk of every unit (the units and chunks of ShardedGradients:
// unit_buckets), and a unit's whole parameters are all-gathered into a slot
// of a small pool when the stage first reads them in a forward or backward,
// and freed when the stage says it has queued its last read of them
// (ParameterStorage::unit_used), unless the rank keeps them gathered across
// its micro-batches (the plan's choice per pipeline rank). Resident units
// (those ShardedGradients keeps whole: the tied embedding, a tied head's
// embedding on its own stage) stay whole, as under ZeRO-2.
//
// Prefetch: the units a step reads follow the same order every step (the
// schedule is fixed), so the order of the previous step's gathers is
// recorded and, as each unit is read, the next one in that order starts
// gathering into a free slot (on NCCL beside the compute). DeepSpeed's
// ZeRO-3 traces its modules the same way.
//
// The optimizer updates the rank's chunks in the shard (owned()) and then
// calls parameters_updated(): gathered slots are stale, resident units are
// all-gathered again (wait_for_resident() before the next read).
//
// Memory: the shard, resident units whole, and two slots of the largest other
// unit (the one read and the next one prefetched); more where a rank keeps
// units gathered, or reads one while two are held (the pool grows then).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/gradient_storage.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/parallel/gradient_buckets.h"

namespace paraplan {

class ShardedParameters final : public ParameterStorage {
 public:
  // As ShardedGradients; keep_gathered: units stay gathered until the step's end.
  ShardedParameters(const std::vector<GradientUnit>& units, size_t num_elements,
                    const std::vector<bool>& resident, bool keep_gathered, kernels::Ops& ops,
                    MemoryTracker& memory, Communicator& group);
  ~ShardedParameters() override;
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  const void* parameter(size_t offset) override;
  void unit_used(size_t unit_begin) override;

  // This rank's part of the element at buffer `offset` of unit `unit`, which
  // it owns (stored at `shard_at` of the shard): where the optimizer writes it.
  void* owned(size_t unit, size_t offset, size_t shard_at);
  // After the optimizer wrote this rank's chunks: gathered units dropped,
  // resident units' all-gathers started. The recorded order starts afresh.
  void parameters_updated();
  // Waits for the resident units' all-gathers (a no-op when none is pending).
  void wait_for_resident();

  // Whole fp32 values of every parameter from host memory: this rank keeps
  // its chunks (and resident units whole). And back: the whole parameters,
  // widened, gathered unit by unit. Both collective over the group.
  void load_whole(const float* whole);
  void read_whole(std::vector<float>& whole);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  size_t num_slots() const { return slots_.size(); }
  // Gathers this step (each unit read once a forward or backward).
  uint64_t gathers() const { return gathers_; }

 private:
  struct Slot {
    void* unit = nullptr;    // the padded unit's whole parameters
    int holds = -1;          // the unit gathered into it, or -1
    bool in_use = false;     // read since gathered, not yet released
    uint64_t done_mark = 0;  // the group's started_mark() after its gather
  };
  size_t unit_index(size_t offset) const;
  size_t padded(size_t unit) const { return buckets_[unit].chunk * group_.size(); }
  // A slot for unit u, its gather started; null if none is free and `grow`
  // is false (a prefetch does not grow the pool).
  Slot* start_gather(size_t unit, bool grow);
  void prefetch_after(size_t unit);
  const void* chunk_of(size_t unit) const;

  kernels::Ops& ops_;
  MemoryTracker& memory_;
  Communicator& group_;
  kernels::DType dtype_;
  bool keep_gathered_;
  std::vector<GradientBucket> buckets_;
  std::vector<bool> resident_;
  std::vector<void*> resident_storage_;  // per unit: whole (resident), else null
  std::vector<int> slot_of_;             // per unit: its slot while gathered, else -1
  std::vector<Slot> slots_;
  size_t slot_elements_ = 0;
  void* shard_ = nullptr;
  bool resident_pending_ = false;
  // The order of this step's gathers, the previous step's, and where in it
  // the reads are (the prefetch follows it while the reads do).
  std::vector<size_t> order_, previous_order_;
  size_t cursor_ = 0;
  uint64_t gathers_ = 0;
  std::vector<void*> allocations_;
};

}  // namespace paraplan
