// sharded_gradients.cc: ZeRO-2's per-unit gradient slots and shard.
#include "runtime/parallel/sharded_gradients.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace paraplan {
namespace {

size_t round_up(size_t n, size_t unit) {
  return (n + unit - 1) / unit * unit;
}

}  // namespace

std::vector<GradientBucket> unit_buckets(const std::vector<GradientUnit>& units,
                                         size_t num_elements, int group_size) {
  const size_t z = static_cast<size_t>(group_size), unit = shard_unit_elements(group_size);
  std::vector<GradientBucket> buckets;
  size_t shard_offset = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    GradientBucket bucket;
    bucket.begin = units[i].begin;
    bucket.end = i + 1 < units.size() ? units[i + 1].begin : num_elements;
    if (bucket.begin >= bucket.end || (i == 0 && bucket.begin != 0))
      throw std::invalid_argument(
          "sharded units: units must rise strictly from 0 within the buffer");
    bucket.chunk = round_up(bucket.end - bucket.begin, unit) / z;
    bucket.shard_offset = shard_offset;
    shard_offset += bucket.chunk;
    buckets.push_back(bucket);
  }
  return buckets;
}

ShardedUnitSizes sharded_unit_sizes(const std::vector<GradientBucket>& units,
                                    const std::vector<bool>& resident, int group_size) {
  ShardedUnitSizes sizes;
  for (size_t u = 0; u < units.size(); ++u) {
    sizes.shard_elements += units[u].chunk;
    if (!resident[u])
      sizes.slot_elements = std::max(sizes.slot_elements, units[u].chunk * group_size);
  }
  return sizes;
}

size_t ShardedGradients::buffer_elements(const std::vector<GradientUnit>& units,
                                         size_t num_elements, int group_size) {
  size_t elements = num_elements;
  for (const GradientBucket& bucket : unit_buckets(units, num_elements, group_size))
    elements = std::max(elements, bucket.begin + bucket.chunk * group_size);
  return elements;
}

ShardedGradients::ShardedGradients(const std::vector<GradientUnit>& units, size_t num_elements,
                                   const std::vector<bool>& resident, kernels::Ops& ops,
                                   MemoryTracker& memory, Communicator& group)
    : ops_(ops), memory_(memory), group_(group), dtype_(ops.storage_dtype()) {
  if (resident.size() != units.size())
    throw std::invalid_argument("sharded gradients: one resident flag per unit");
  buckets_ = unit_buckets(units, num_elements, group.size());
  resident_ = resident;
  const ShardedUnitSizes sizes = sharded_unit_sizes(buckets_, resident_, group.size());
  shard_elements_ = sizes.shard_elements;
  slot_elements_ = sizes.slot_elements;
  const size_t storage_bytes = kernels::dtype_bytes(dtype_);
  auto allocate = [&](size_t elements, size_t element_bytes) {
    void* pointer =
        memory_.allocate(std::max<size_t>(elements, 1) * element_bytes, MemoryCategory::kGradients);
    allocations_.push_back(pointer);
    return pointer;
  };
  // fp32 whatever the storage: the sum over micro-batches rounds once per
  // addition in fp32, not in bf16 (sharded_gradients.h).
  shard_ = static_cast<float*>(allocate(shard_elements_, sizeof(float)));
  resident_storage_.assign(buckets_.size(), nullptr);
  resident_receive_.assign(buckets_.size(), nullptr);
  slot_of_.assign(buckets_.size(), -1);
  for (size_t u = 0; u < buckets_.size(); ++u) {
    if (!resident_[u]) continue;
    resident_storage_[u] = allocate(padded(u), storage_bytes);
    // The reduce-scatter moves the storage dtype; under fp32 it lands in the
    // shard itself.
    if (dtype_ != kernels::DType::kFloat32)
      resident_receive_[u] = allocate(buckets_[u].chunk, storage_bytes);
  }
  // Two slots: one written while the previous one's reduce-scatter runs.
  if (slot_elements_ > 0)
    for (int i = 0; i < 2; ++i) add_slot();
  zero();
}

ShardedGradients::~ShardedGradients() {
  for (void* pointer : allocations_) memory_.release(pointer);
}

ShardedGradients::Slot& ShardedGradients::add_slot() {
  Slot slot;
  for (void** buffer : {&slot.unit, &slot.receive}) {
    const size_t elements = buffer == &slot.unit ? slot_elements_ : slot_elements_ / group_.size();
    *buffer = memory_.allocate(ops_.storage_bytes(std::max<size_t>(elements, 1)),
                               MemoryCategory::kGradients);
    allocations_.push_back(*buffer);
  }
  slots_.push_back(slot);
  return slots_.back();
}

size_t unit_holding(const std::vector<GradientBucket>& units, size_t offset, const char* who) {
  // The last unit beginning at or before offset.
  const auto it =
      std::upper_bound(units.begin(), units.end(), offset,
                       [](size_t at, const GradientBucket& bucket) { return at < bucket.begin; });
  if (it == units.begin() || offset >= std::prev(it)->end)
    throw std::out_of_range(std::string(who) + ": offset " + std::to_string(offset) +
                            " is in no unit");
  return static_cast<size_t>(std::prev(it) - units.begin());
}

size_t ShardedGradients::unit_index(size_t offset) const {
  return unit_holding(buckets_, offset, "sharded gradients");
}

void* ShardedGradients::gradient(size_t offset) {
  const size_t u = unit_index(offset);
  const size_t within = offset - buckets_[u].begin;
  if (resident_[u]) return kernels::element_at(resident_storage_[u], within, dtype_);
  if (slot_of_[u] < 0) acquire(u);
  return kernels::element_at(slots_[slot_of_[u]].unit, within, dtype_);
}

ShardedGradients::Slot& ShardedGradients::acquire(size_t unit) {
  auto free_slot = [&] {
    return std::find_if(slots_.begin(), slots_.end(),
                        [](const Slot& slot) { return slot.holds < 0 && !slot.reducing; });
  };
  auto it = free_slot();
  if (it == slots_.end()) {
    // The oldest reduction's slot, once it (and what started before it) is done.
    const Slot* oldest = nullptr;
    for (const Slot& slot : slots_)
      if (slot.reducing && (!oldest || slot.order < oldest->order)) oldest = &slot;
    if (oldest != nullptr) {
      complete_reductions(oldest->done_mark);
      it = free_slot();
    }
  }
  // Every slot written and none reducing: a split backward keeps units from
  // their B to their W; the pool grows to what it keeps at once.
  Slot& slot = it != slots_.end() ? *it : add_slot();
  slot.holds = static_cast<int>(unit);
  slot_of_[unit] = static_cast<int>(&slot - slots_.data());
  // The padding too: the reduce-scatter sums the padded unit.
  ops_.zero_bytes(slot.unit, ops_.storage_bytes(padded(unit)));
  return slot;
}

void ShardedGradients::unit_done(size_t unit_begin) {
  const size_t u = unit_index(unit_begin);
  if (buckets_[u].begin != unit_begin)
    throw std::logic_error("sharded gradients: " + std::to_string(unit_begin) +
                           " is not where a unit begins");
  if (resident_[u] || slot_of_[u] < 0) return;
  start_reduce_scatter(slots_[slot_of_[u]]);
}

void ShardedGradients::start_reduce_scatter(Slot& slot) {
  const size_t u = static_cast<size_t>(slot.holds);
  group_.start_reduce_scatter(slot.unit, slot.receive, buckets_[u].chunk, dtype_);
  slot.reducing = true;
  slot.done_mark = group_.started_mark();
  slot.order = reductions_started_++;
  slot_of_[u] = -1;
}

void ShardedGradients::complete_reductions(uint64_t mark) {
  if (mark == kEverything)
    group_.wait_pending();
  else
    group_.wait_started_before(mark);
  // Oldest first: the shard's additions in the order backward produced them.
  for (;;) {
    Slot* oldest = nullptr;
    for (Slot& slot : slots_)
      if (slot.reducing && (mark == kEverything || slot.done_mark <= mark) &&
          (!oldest || slot.order < oldest->order))
        oldest = &slot;
    if (oldest == nullptr) return;
    const GradientBucket& bucket = buckets_[oldest->holds];
    ops_.accumulate_into_float(shard_ + bucket.shard_offset, oldest->receive, bucket.chunk);
    oldest->reducing = false;
    oldest->holds = -1;
  }
}

void ShardedGradients::zero() {
  ops_.zero_bytes(shard_, shard_elements_ * sizeof(float));
  for (size_t u = 0; u < buckets_.size(); ++u)
    if (resident_storage_[u] != nullptr)
      ops_.zero_bytes(resident_storage_[u], ops_.storage_bytes(padded(u)));
}

void ShardedGradients::finish() {
  for (Slot& slot : slots_)
    if (slot.holds >= 0 && !slot.reducing) start_reduce_scatter(slot);
  // A resident unit is reduced once a step: its chunk is the shard's (under
  // fp32 storage received there, else widened into it once received).
  for (size_t u = 0; u < buckets_.size(); ++u)
    if (resident_[u])
      group_.start_reduce_scatter(
          resident_storage_[u],
          resident_receive_[u] ? resident_receive_[u] : shard_ + buckets_[u].shard_offset,
          buckets_[u].chunk, dtype_);
  complete_reductions(kEverything);
  for (size_t u = 0; u < buckets_.size(); ++u)
    if (resident_receive_[u])
      ops_.accumulate_into_float(shard_ + buckets_[u].shard_offset, resident_receive_[u],
                                 buckets_[u].chunk);
}

}  // namespace paraplan
