// sharded_parameters.h: ZeRO-3's parameter storage of one rank
// (Rajbhandari et al. 2020, P_os+g+p): no whole parameter buffer; the rank
// keeps its chunk of every unit (the units and chunks of ShardedGradients:
// unit_buckets), and a unit's whole parameters are all-gathered into a slot
// of a small pool where the plan's stream says (gather(), the
// GatherParameters op) and freed where it says (release(),
// ReleaseParameters): schema/zero_units.h writes those ops one unit ahead
// of the reads, or, where the plan keeps a rank's parameters gathered across
// its micro-batches, once per step. Resident units (those ShardedGradients
// keeps whole: the tied embedding, a tied head's embedding on its own stage)
// stay whole, as under ZeRO-2.
//
// While a step's stream runs (set_planned), a read of a unit the stream has
// not gathered is the plan's error and throws; outside one (evaluation,
// sampling) a read gathers the unit on demand and the stage's unit_used
// frees it. Such reads come as a forward's, unit after unit: the first read
// of a unit past the one read before also starts the next pooled unit's
// gather (a prefetch, freed by its own unit_used), so its all-gather runs
// beside this unit's compute. A step's stream starting (set_planned(true))
// frees a prefetch no read took. Every unit_used is told to the listener
// (the executor runs the releases waiting for it).
//
// The optimizer calls settle_prefetches(), updates the rank's chunks in the
// shard (owned()) and then calls parameters_updated(): gathered slots are
// stale, resident units are all-gathered again (wait_for_resident() before
// the next read).
//
// Memory (MemoryCategory::kGathered for the slots, kWeights for the rest):
// the shard, resident units whole, and two slots of the largest other unit
// (the one read and the next one gathering); more where the stream holds
// more at once (the pool grows then).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/gradient_storage.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/parallel/gradient_buckets.h"

namespace paraplan {

class ShardedParameters final : public ParameterStorage {
 public:
  // As ShardedGradients.
  ShardedParameters(const std::vector<GradientUnit>& units, size_t num_elements,
                    const std::vector<bool>& resident, kernels::Ops& ops, MemoryTracker& memory,
                    Communicator& group);
  ~ShardedParameters() override;
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  const void* parameter(size_t offset) override;
  void unit_used(size_t unit_begin) override;

  // GatherParameters: unit u's all-gather started into a free slot (the pool
  // grows when none is free). Throws if it is resident or gathered already.
  void gather(size_t unit);
  // ReleaseParameters: its slot freed (reads already queued still see it:
  // the next gather into that memory is queued after them). Throws if the
  // unit is not gathered.
  void release(size_t unit);
  // Whether reads must find their unit gathered (a step's stream runs).
  void set_planned(bool planned);
  // Told the unit index of every unit_used.
  void set_unit_used_listener(std::function<void(size_t)> listener) {
    unit_used_listener_ = std::move(listener);
  }
  bool resident(size_t unit) const { return resident_[unit]; }
  size_t unit_at(size_t offset) const { return unit_index(offset); }

  // This rank's part of the element at buffer `offset` of unit `unit`, which
  // it owns (stored at `shard_at` of the shard): where the optimizer writes it.
  void* owned(size_t unit, size_t offset, size_t shard_at);
  // Before anything writes the shard (the optimizer, load_whole): waits for
  // every gather started since the last settle (among them a prefetch no
  // read took, a unit released unread: their all-gathers may still read it).
  void settle_prefetches();
  // After the optimizer wrote this rank's chunks: gathered units dropped,
  // resident units' all-gathers started.
  void parameters_updated();
  // Waits for the resident units' all-gathers (a no-op when none is pending).
  void wait_for_resident();

  // fp32 values of buffer elements [begin, end) from host memory: this rank
  // keeps its chunks' part (and resident units' part whole). Not
  // collective. load_whole: every element at once.
  void load_range(size_t begin, size_t end, const float* values);
  void load_whole(const float* whole);
  // The whole parameters, widened, gathered unit by unit (tests): collective
  // over the group.
  void read_whole(std::vector<float>& whole);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  size_t num_slots() const { return slots_.size(); }
  // Gathers since the last parameters_updated().
  uint64_t gathers() const { return gathers_; }

 private:
  struct Slot {
    void* unit = nullptr;    // the padded unit's whole parameters
    int holds = -1;          // the unit gathered into it, or -1
    bool waited = false;     // its gather waited for since
    bool on_demand = false;  // gathered by a read outside a stream: freed by unit_used
    uint64_t done_mark = 0;  // the group's started_mark() after its gather
  };
  size_t unit_index(size_t offset) const;
  size_t padded(size_t unit) const { return buckets_[unit].chunk * group_.size(); }
  // A slot for unit u (the pool grown if none is free), its gather started.
  Slot& start_gather(size_t unit);
  void free_slot(size_t unit);
  // Outside a stream, on the first read of unit u: the next pooled unit's
  // gather started, if a forward is going up the buffer and it is not held.
  void prefetch_after(size_t unit);
  const void* chunk_of(size_t unit) const;

  kernels::Ops& ops_;
  MemoryTracker& memory_;
  Communicator& group_;
  kernels::DType dtype_;
  bool planned_ = false;
  // The unit the last read outside a stream was of (the prefetch follows
  // reads that go up the buffer); -1 after a step's stream.
  long last_on_demand_ = -1;
  // The last gather's done mark, and whether one started since
  // settle_prefetches() (a released slot's gather may still read the shard).
  uint64_t last_gather_mark_ = 0;
  bool gathered_since_settled_ = false;
  std::function<void(size_t)> unit_used_listener_;
  std::vector<GradientBucket> buckets_;
  std::vector<bool> resident_;
  std::vector<void*> resident_storage_;  // per unit: whole (resident), else null
  std::vector<int> slot_of_;             // per unit: its slot while gathered, else -1
  std::vector<Slot> slots_;
  size_t slot_elements_ = 0;
  void* shard_ = nullptr;
  bool resident_pending_ = false;
  uint64_t gathers_ = 0;
  std::vector<void*> allocations_;
};

}  // namespace paraplan
