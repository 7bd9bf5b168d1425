// distributed_optimizer_state.cc: DistributedOptimizer's state (master
// weights, AdamW moments) to and from host memory, a range of the stage's
// buffer at a time, for checkpoints and initialization. Reading sends each
// ZeRO rank's owned part of the range to the ZeRO rank that writes it, point
// to point: only the range crosses, and only to that rank.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "runtime/parallel/distributed_optimizer.h"

namespace paraplan {

float* DistributedOptimizer::state_at(StateArray array, size_t bucket, const OwnedRange& range,
                                      size_t begin) {
  const size_t at = range.shard_offset + (begin - range.begin);
  switch (array) {
    case StateArray::kFirstMoment:
      return first_moment_ + at;
    case StateArray::kSecondMoment:
      return second_moment_ + at;
    case StateArray::kParameters:
      // Without master weights the storage is fp32: the parameters are the state.
      return master_ ? master_at(at) : static_cast<float*>(owned_parameters(bucket, begin, at));
  }
  throw std::logic_error("state_at: unknown array");
}

void DistributedOptimizer::read_range(StateArray array, size_t begin, size_t end, float* host,
                                      int destination) {
  if (!reads_state())
    throw std::logic_error("read_range on a rank outside the first ZeRO group (reads_state())");
  if (begin > end || end > layout_.num_elements())
    throw std::logic_error("read_range: [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") is not within the stage's " + std::to_string(layout_.num_elements()) +
                           " elements");
  if (destination < 0 || destination >= state_readers())
    throw std::logic_error("read_range: destination " + std::to_string(destination) +
                           " is not a ZeRO rank of the group (0.." +
                           std::to_string(state_readers() - 1) + ")");
  wait_for_parameters();  // nothing of this step's may still be in flight
  if (array == StateArray::kParameters) initialize_master();
  if (!sharded_) {  // every element is this rank's (and every replica's): one range
    if (begin < end && state_reader_rank() == destination)
      ops_.copy_to_host(host, state_at(array, 0, owned_[0], begin), (end - begin) * sizeof(float));
    return;
  }
  const int own_rank = groups_.zero->rank();
  const std::vector<int>& members = groups_.members.at("zero");
  std::vector<float> piece;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    if (bucket.end <= begin || bucket.begin >= end) continue;
    for (int rank = 0; rank < groups_.zero->size(); ++rank) {
      const OwnedRange range = owned_by(bucket, rank);
      const size_t lo = std::max(begin, range.begin), hi = std::min(end, range.end);
      if (lo >= hi) continue;
      const size_t count = hi - lo;
      if (rank == own_rank && own_rank == destination) {
        ops_.copy_to_host(host + (lo - begin), state_at(array, b, range, lo),
                          count * sizeof(float));
      } else if (rank == own_rank) {
        piece.resize(count);
        ops_.copy_to_host(piece.data(), state_at(array, b, range, lo), count * sizeof(float));
        groups_.peers->send_receive(piece.data(), count, members[destination], nullptr, 0, -1,
                                    kernels::DType::kFloat32);
      } else if (own_rank == destination) {
        groups_.peers->send_receive(nullptr, 0, -1, host + (lo - begin), count, members[rank],
                                    kernels::DType::kFloat32);
      }
    }
  }
}

void DistributedOptimizer::load_range(StateArray array, size_t begin, size_t end,
                                      const float* host) {
  if (begin > end || end > layout_.num_elements())
    throw std::logic_error("load_range: [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") is not within the stage's " + std::to_string(layout_.num_elements()) +
                           " elements");
  wait_for_parameters();
  // The fp32 state this rank owns: moments, and master weights where the
  // storage is bf16 (fp32 parameters are stored below, as the storage).
  if (array != StateArray::kParameters || master_) {
    for (size_t i = 0; i < owned_.size(); ++i) {
      const OwnedRange& range = owned_[i];
      const size_t lo = std::max(begin, range.begin), hi = std::min(end, range.end);
      if (lo < hi)
        ops_.copy_from_host(state_at(array, i, range, lo), host + (lo - begin),
                            (hi - lo) * sizeof(float));
    }
  }
  if (array != StateArray::kParameters) return;
  // The storage copy (rounded under bf16): ZeRO-3's chunks and resident
  // units, or the stage's buffer.
  if (sharded_parameters_)
    sharded_parameters_->load_range(begin, end, host);
  else
    stage_.load_parameters(host, end - begin, begin);
  master_valid_ = true;
}

std::vector<std::pair<size_t, size_t>> DistributedOptimizer::held_ranges(StateArray array,
                                                                         size_t begin,
                                                                         size_t end) const {
  std::vector<std::pair<size_t, size_t>> held;
  const auto hold = [&](size_t lo, size_t hi) {
    lo = std::max(lo, begin), hi = std::min(hi, end);
    if (lo >= hi) return;
    if (!held.empty() && held.back().second == lo)
      held.back().second = hi;
    else
      held.emplace_back(lo, hi);
  };
  if (array == StateArray::kParameters && !sharded_parameters_) {
    hold(begin, end);  // the storage copy is the whole stage
  } else if (array == StateArray::kParameters) {
    for (size_t b = 0; b < buckets_.size(); ++b)  // ZeRO-3: chunks, resident units whole
      resident_[b] ? hold(buckets_[b].begin, buckets_[b].end)
                   : hold(owned_[b].begin, owned_[b].end);
  } else {
    for (const OwnedRange& range : owned_) hold(range.begin, range.end);
  }
  return held;
}

void DistributedOptimizer::load_parameters(const float* whole) {
  load_range(StateArray::kParameters, 0, layout_.num_elements(), whole);
}

void DistributedOptimizer::load_moments(const float* first, const float* second) {
  load_range(StateArray::kFirstMoment, 0, layout_.num_elements(), first);
  load_range(StateArray::kSecondMoment, 0, layout_.num_elements(), second);
}

}  // namespace paraplan
