// sharded_parameters.cc: ZeRO-3's parameter shard and its gathered units.
#include "runtime/parallel/sharded_parameters.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/parallel/sharded_gradients.h"

namespace paraplan {

ShardedParameters::ShardedParameters(const std::vector<GradientUnit>& units, size_t num_elements,
                                     const std::vector<bool>& resident, kernels::Ops& ops,
                                     MemoryTracker& memory, Communicator& group)
    : ops_(ops),
      memory_(memory),
      group_(group),
      dtype_(ops.storage_dtype()),
      buckets_(unit_buckets(units, num_elements, group.size())),
      resident_(resident) {
  if (resident.size() != units.size())
    throw std::invalid_argument("sharded parameters: one resident flag per unit");
  auto allocate = [&](size_t elements, MemoryCategory category) {
    void* pointer = memory_.allocate(ops_.storage_bytes(std::max<size_t>(elements, 1)), category);
    ops_.zero_bytes(pointer, ops_.storage_bytes(elements));
    allocations_.push_back(pointer);
    return pointer;
  };
  const ShardedUnitSizes sizes = sharded_unit_sizes(buckets_, resident_, group.size());
  slot_elements_ = sizes.slot_elements;
  shard_ = allocate(sizes.shard_elements, MemoryCategory::kWeights);
  resident_storage_.assign(buckets_.size(), nullptr);
  slot_of_.assign(buckets_.size(), -1);
  for (size_t u = 0; u < buckets_.size(); ++u)
    if (resident_[u]) resident_storage_[u] = allocate(padded(u), MemoryCategory::kWeights);
  // Two slots: the unit read and the next one gathering.
  for (int i = 0; i < 2 && slot_elements_ > 0; ++i) {
    slots_.push_back(Slot{allocate(slot_elements_, MemoryCategory::kGathered)});
  }
}

ShardedParameters::~ShardedParameters() {
  for (void* pointer : allocations_) memory_.release(pointer);
}

size_t ShardedParameters::unit_index(size_t offset) const {
  return unit_holding(buckets_, offset, "sharded parameters");
}

const void* ShardedParameters::chunk_of(size_t unit) const {
  return kernels::element_at(shard_, buckets_[unit].shard_offset, dtype_);
}

ShardedParameters::Slot& ShardedParameters::start_gather(size_t unit) {
  auto it = std::find_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.holds < 0; });
  if (it == slots_.end()) {
    void* pointer = memory_.allocate(ops_.storage_bytes(slot_elements_), MemoryCategory::kGathered);
    allocations_.push_back(pointer);
    slots_.push_back(Slot{pointer});
    it = std::prev(slots_.end());
  }
  Slot& slot = *it;
  slot.holds = static_cast<int>(unit);
  slot.waited = false;
  slot.on_demand = false;
  slot_of_[unit] = static_cast<int>(it - slots_.begin());
  group_.start_all_gather(chunk_of(unit), slot.unit, buckets_[unit].chunk, dtype_);
  slot.done_mark = group_.started_mark();
  last_gather_mark_ = slot.done_mark;
  gathered_since_settled_ = true;
  ++gathers_;
  return slot;
}

void ShardedParameters::free_slot(size_t unit) {
  Slot& slot = slots_[slot_of_[unit]];
  slot.holds = -1;
  slot.waited = false;
  slot.on_demand = false;
  slot_of_[unit] = -1;
}

void ShardedParameters::gather(size_t unit) {
  if (unit >= buckets_.size() || resident_[unit] || slot_of_[unit] >= 0)
    throw std::logic_error("sharded parameters: gather of unit " + std::to_string(unit) +
                           (unit >= buckets_.size() ? ", which does not exist"
                            : resident_[unit]       ? ", which is resident"
                                                    : ", which is gathered already"));
  start_gather(unit);
}

void ShardedParameters::release(size_t unit) {
  if (unit >= buckets_.size() || slot_of_[unit] < 0)
    throw std::logic_error("sharded parameters: release of unit " + std::to_string(unit) +
                           ", which is not gathered");
  free_slot(unit);
}

const void* ShardedParameters::parameter(size_t offset) {
  const size_t u = unit_index(offset);
  const size_t within = offset - buckets_[u].begin;
  if (resident_[u]) {
    wait_for_resident();
    return kernels::element_at(resident_storage_[u], within, dtype_);
  }
  if (slot_of_[u] < 0) {
    if (planned_)
      throw std::runtime_error(
          "ZeRO-3: the plan's stream reads parameter unit " + std::to_string(u) +
          " of this rank (buffer offset " + std::to_string(offset) +
          ") where no gather_parameters has gathered it (schema/zero_units.h)");
    start_gather(u).on_demand = true;
  }
  // (Before taking the slot: a prefetch may grow the pool.)
  if (!slots_[slot_of_[u]].waited && slots_[slot_of_[u]].on_demand) prefetch_after(u);
  Slot& slot = slots_[slot_of_[u]];
  if (!slot.waited) {
    group_.wait_started_before(slot.done_mark);
    slot.waited = true;
  }
  return kernels::element_at(slot.unit, within, dtype_);
}

void ShardedParameters::prefetch_after(size_t unit) {
  const bool going_up = static_cast<long>(unit) > last_on_demand_;
  last_on_demand_ = static_cast<long>(unit);
  if (!going_up) return;
  size_t next = unit + 1;
  while (next < buckets_.size() && resident_[next]) ++next;
  if (next < buckets_.size() && slot_of_[next] < 0) start_gather(next).on_demand = true;
}

void ShardedParameters::set_planned(bool planned) {
  planned_ = planned;
  if (!planned) return;
  last_on_demand_ = -1;
  for (size_t u = 0; u < buckets_.size(); ++u) {
    if (slot_of_[u] < 0 || !slots_[slot_of_[u]].on_demand) continue;
    // An untaken prefetch: its all-gather done before its slot takes another.
    if (!slots_[slot_of_[u]].waited) group_.wait_started_before(slots_[slot_of_[u]].done_mark);
    free_slot(u);
  }
}

void ShardedParameters::unit_used(size_t unit_begin) {
  const size_t u = unit_index(unit_begin);
  if (buckets_[u].begin != unit_begin)
    throw std::logic_error("sharded parameters: " + std::to_string(unit_begin) +
                           " is not where a unit begins");
  if (!resident_[u] && slot_of_[u] >= 0 && slots_[slot_of_[u]].on_demand) free_slot(u);
  if (unit_used_listener_) unit_used_listener_(u);
}

void* ShardedParameters::owned(size_t unit, size_t offset, size_t shard_at) {
  if (resident_[unit])
    return kernels::element_at(resident_storage_[unit], offset - buckets_[unit].begin, dtype_);
  return kernels::element_at(shard_, shard_at, dtype_);
}

void ShardedParameters::settle_prefetches() {
  // Every gather since the last settle, also of a slot released unread.
  if (gathered_since_settled_) group_.wait_started_before(last_gather_mark_);
  gathered_since_settled_ = false;
  for (Slot& slot : slots_)
    if (slot.holds >= 0) slot.waited = true;
}

void ShardedParameters::parameters_updated() {
  settle_prefetches();  // (a no-op where the optimizer settled them)
  for (Slot& slot : slots_) slot.holds = -1, slot.waited = false, slot.on_demand = false;
  last_on_demand_ = -1;
  std::fill(slot_of_.begin(), slot_of_.end(), -1);
  gathers_ = 0;
  const int rank = group_.rank();
  for (size_t u = 0; u < buckets_.size(); ++u) {
    if (!resident_[u]) continue;
    const GradientBucket& bucket = buckets_[u];
    group_.start_all_gather(kernels::element_at(resident_storage_[u], bucket.chunk * rank, dtype_),
                            resident_storage_[u], bucket.chunk, dtype_);
    resident_pending_ = true;
  }
}

void ShardedParameters::wait_for_resident() {
  if (!resident_pending_) return;
  group_.wait_pending();
  resident_pending_ = false;
}

void ShardedParameters::load_range(size_t begin, size_t end, const float* values) {
  wait_for_resident();
  settle_prefetches();
  const size_t rank = static_cast<size_t>(group_.rank());
  std::vector<char> converted;
  auto store = [&](void* device, const float* host, size_t count) {
    converted.resize(ops_.storage_bytes(count));
    kernels::host_from_float(converted.data(), host, dtype_, count);
    ops_.copy_from_host(device, converted.data(), converted.size());
  };
  for (size_t u = 0; u < buckets_.size(); ++u) {
    const GradientBucket& bucket = buckets_[u];
    if (bucket.end <= begin || bucket.begin >= end) continue;
    if (resident_[u]) {
      const size_t lo = std::max(begin, bucket.begin), hi = std::min(end, bucket.end);
      store(kernels::element_at(resident_storage_[u], lo - bucket.begin, dtype_),
            values + (lo - begin), hi - lo);
      continue;
    }
    const size_t chunk_begin = bucket.begin + bucket.chunk * rank;  // may lie past the unit
    const size_t lo = std::max(begin, chunk_begin);
    const size_t hi = std::min({end, bucket.end, chunk_begin + bucket.chunk});
    // (The chunk's padding past the unit's end, zeroed when made, is never written.)
    if (lo < hi)
      store(kernels::element_at(shard_, bucket.shard_offset + (lo - chunk_begin), dtype_),
            values + (lo - begin), hi - lo);
  }
  // What was gathered holds the old values.
  for (Slot& slot : slots_) slot.holds = -1, slot.waited = false, slot.on_demand = false;
  std::fill(slot_of_.begin(), slot_of_.end(), -1);
}

void ShardedParameters::load_whole(const float* whole) {
  load_range(0, buckets_.empty() ? 0 : buckets_.back().end, whole);
}

void ShardedParameters::read_whole(std::vector<float>& whole) {
  wait_for_resident();
  whole.assign(buckets_.empty() ? 0 : buckets_.back().end, 0.0f);
  void* gathered = memory_.allocate(ops_.storage_bytes(std::max<size_t>(slot_elements_, 1)),
                                    MemoryCategory::kWorkspace);
  std::vector<char> raw;
  for (size_t u = 0; u < buckets_.size(); ++u) {
    const GradientBucket& bucket = buckets_[u];
    const void* source = resident_storage_[u];
    if (!resident_[u]) {
      group_.all_gather(chunk_of(u), gathered, bucket.chunk, dtype_);
      source = gathered;
    }
    const size_t count = bucket.end - bucket.begin;
    raw.resize(ops_.storage_bytes(count));
    ops_.copy_to_host(raw.data(), source, raw.size());
    kernels::host_to_float(whole.data() + bucket.begin, raw.data(), dtype_, count);
  }
  memory_.release(gathered);
}

}  // namespace paraplan
