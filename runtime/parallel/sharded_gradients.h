// sharded_gradients.h: ZeRO-2's gradient storage of one rank: no whole
// gradient buffer; each unit backward finishes (gradient_storage.h: the
// embedding, a block, the final norm and head) lives in a slot of a small
// pool only while backward writes it, and is reduce-scattered within the
// ZeRO group as soon as it is finished, every micro-batch, its chunk added
// into this rank's fp32 gradient shard (DeepSpeed's ZeRO-2 with gradient
// accumulation; Rajbhandari et al. 2020, P_os+g).
//
// Units and ownership: unit u of L elements is padded to P = L rounded up to
// shard_unit_elements(z) (z: the group size); rank r owns its r-th chunk of
// P / z elements, clipped to the unit, kept at shard_offset in the shard
// (the units' chunks in buffer order). So each unit is one reduce-scatter,
// and after the optimizer step one all-gather into the parameters (in place:
// a unit's padding spills into the next unit's parameters, the last rank's
// copy of them, so the units are gathered from the last down and the spill
// copies values already gathered; the stage's buffer is padded for the last
// unit's spill).
//
// Memory: the shard, fp32 whatever the storage dtype (below); resident
// units whole and the pool, in the storage dtype: two slots of the largest
// other unit (one written while the previous one's reduce-scatter runs:
// taking a slot back waits for its own reduce-scatter only, started a unit
// earlier) with their receive chunks. A resident unit is written over the
// whole backward or summed with another stage's (the tied embedding): it
// accumulates all the step's micro-batches and is reduce-scattered once by
// finish(), straight into the shard under fp32 storage, else into a receive
// chunk of its own that is then added into the shard. Schedules that split
// backward keep each unit from its B to its W, so the pool grows there to
// what they keep at once (at most every unit: ZeRO-1's gradient memory).
// So a rank holds 4 bytes per shard element, and under bf16 storage 2 per
// resident unit chunk besides the units and slots.
//
// Numerics: every element is summed over the group in rank order per
// micro-batch (in the storage dtype: the reduce-scatter moves what backward
// wrote, its volume ZeRO-1's), and over micro-batches in the fp32 shard in
// backward order (Ops::accumulate_into_float), as DeepSpeed and Megatron's
// distributed optimizer accumulate gradients in fp32: under bf16 storage
// the sum over micro-batches is no longer rounded to bf16 at every
// addition (zero_two_test.cc's model, dp2 in 4 micro-batches of 2: at
// step 1 the gradient norm's difference from one unaccumulated micro-batch
// fell from 9.1e-4 to 1.4e-4). A resident unit is written by backward, so
// it still sums its micro-batches in the storage dtype; its reduced chunk
// lands in the shard. Under fp32 storage
// the shard is what it was, and a ZeRO-2 step equals the ZeRO-1 step up to
// the order of the additions.
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

// The units as buckets of a ZeRO group of group_size: each padded to a
// multiple of shard_unit_elements(group_size), chunk = padded / group_size,
// the chunks' shard offsets in unit order. Throws std::invalid_argument
// unless the units rise strictly from 0 within num_elements.
std::vector<GradientBucket> unit_buckets(const std::vector<GradientUnit>& units,
                                         size_t num_elements, int group_size);
// What a rank stores of sharded units besides the resident ones: its shard
// (every unit's chunk; fp32) and, per pool slot, the largest other unit,
// padded (storage dtype).
struct ShardedUnitSizes {
  size_t shard_elements = 0, slot_elements = 0;
};
ShardedUnitSizes sharded_unit_sizes(const std::vector<GradientBucket>& units,
                                    const std::vector<bool>& resident, int group_size);
// The index of the unit (bucket) holding buffer element `offset`; throws
// std::out_of_range naming `who` when none does.
size_t unit_holding(const std::vector<GradientBucket>& units, size_t offset, const char* who);

class ShardedGradients final : public GradientStorage {
 public:
  // units: the stage's (ModelStage::gradient_units), in buffer order from 0;
  // num_elements: the layout's; resident[i]: unit i stays whole for the
  // step (written early, or holding a tied tensor). group: the ZeRO group.
  ShardedGradients(const std::vector<GradientUnit>& units, size_t num_elements,
                   const std::vector<bool>& resident, kernels::Ops& ops, MemoryTracker& memory,
                   Communicator& group);
  ~ShardedGradients() override;
  ShardedGradients(const ShardedGradients&) = delete;
  ShardedGradients& operator=(const ShardedGradients&) = delete;

  // The buffer elements the stage's parameters need: the last unit's
  // all-gather writes its padding past the layout's end.
  static size_t buffer_elements(const std::vector<GradientUnit>& units, size_t num_elements,
                                int group_size);

  void* gradient(size_t offset) override;
  // Backward has written the last gradient of the unit starting at offset
  // for this micro-batch: reduce-scatter it (not a resident one) and give
  // its slot back once that is done. No-op for a unit not written.
  void unit_done(size_t unit_begin);
  // Start of a step: the shard and the resident units zeroed.
  void zero();
  // End of a step's backwards: every written unit reduce-scattered (resident
  // ones now: the caller has summed the tied ones), all of it waited for
  // and added into the shard.
  void finish();

  // The units as buckets (begin, end, chunk, shard_offset): what this rank
  // owns of each and where in the shard.
  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // The rank's summed gradients, fp32 whatever the storage dtype.
  float* shard() { return shard_; }
  size_t shard_elements() const { return shard_elements_; }
  // The pool's slots now (2, more under split backward).
  size_t num_slots() const { return slots_.size(); }

 private:
  struct Slot {
    void* unit = nullptr;     // padded unit elements
    void* receive = nullptr;  // its reduce-scatter chunk
    int holds = -1;           // the unit written into it, or -1
    bool reducing = false;    // its reduce-scatter started, not yet added
    uint64_t done_mark = 0;   // the group's started_mark() just after it
    uint64_t order = 0;       // reductions started before it on this rank
  };
  static constexpr uint64_t kEverything = UINT64_MAX;
  size_t unit_index(size_t offset) const;
  size_t padded(size_t unit) const { return buckets_[unit].chunk * group_.size(); }
  Slot& acquire(size_t unit);
  Slot& add_slot();
  void start_reduce_scatter(Slot& slot);
  // Waits for the reduce-scatters started before `mark` (every one: the
  // group's started_mark()) and adds their chunks to the shard, oldest first.
  void complete_reductions(uint64_t mark);

  kernels::Ops& ops_;
  MemoryTracker& memory_;
  Communicator& group_;
  kernels::DType dtype_;
  std::vector<GradientBucket> buckets_;  // one per unit
  std::vector<bool> resident_;
  std::vector<void*> resident_storage_;  // per unit: whole (resident), else null
  std::vector<int> slot_of_;             // per unit: its slot while written, else -1
  // Per unit: a resident unit's reduce-scatter chunk under a storage dtype
  // other than fp32 (added into the shard after), else null.
  std::vector<void*> resident_receive_;
  std::vector<Slot> slots_;
  uint64_t reductions_started_ = 0;
  size_t slot_elements_ = 0;  // the largest non-resident unit, padded
  float* shard_ = nullptr;
  size_t shard_elements_ = 0;
  std::vector<void*> allocations_;
};

}  // namespace paraplan
