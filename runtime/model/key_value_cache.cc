// key_value_cache.cc: KeyValueCache (key_value_cache.h).
#include "runtime/model/key_value_cache.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace paraplan {

KeyValueCache::KeyValueCache(kernels::Ops& ops, MemoryTracker& memory, int layers, int positions,
                             int heads, int kv_heads, int head_dim)
    : ops_(ops),
      memory_(memory),
      positions_(positions),
      heads_(heads),
      kv_heads_(kv_heads),
      head_dim_(head_dim) {
  if (layers < 1 || positions < 1 || heads < 1 || kv_heads < 1 || head_dim < 1)
    throw std::invalid_argument("key/value cache: layers, positions and heads must be positive");
  const size_t row = 2 * static_cast<size_t>(kv_heads) * head_dim;
  for (int layer = 0; layer < layers; ++layer) {
    layers_.push_back(
        memory_.allocate(ops_.storage_bytes(row * positions), MemoryCategory::kActivations));
  }
  std::vector<int32_t> numbers(static_cast<size_t>(positions));
  std::iota(numbers.begin(), numbers.end(), 0);
  position_numbers_ = static_cast<int32_t*>(
      memory_.allocate(numbers.size() * sizeof(int32_t), MemoryCategory::kWorkspace));
  ops_.copy_from_host(position_numbers_, numbers.data(), numbers.size() * sizeof(int32_t));
  accumulator_ = static_cast<float*>(
      memory_.allocate(static_cast<size_t>(positions) * heads * head_dim * sizeof(float),
                       MemoryCategory::kActivations));
}

KeyValueCache::~KeyValueCache() {
  for (void* layer : layers_) memory_.release(layer);
  if (position_numbers_ != nullptr) memory_.release(position_numbers_);
  if (accumulator_ != nullptr) memory_.release(accumulator_);
}

void KeyValueCache::attend(int layer, int first, int length, void* out, float* logsumexp,
                           const void* qkv) {
  if (layer < 0 || layer >= static_cast<int>(layers_.size()) || first < 0 || length < 1 ||
      first + length > positions_)
    throw std::out_of_range("key/value cache: layer " + std::to_string(layer) + ", positions " +
                            std::to_string(first) + " + " + std::to_string(length) +
                            " outside its " + std::to_string(positions_));
  const size_t H = heads_, Hkv = kv_heads_, D = head_dim_;
  const size_t qkv_row = (H + 2 * Hkv) * D, kv_row = 2 * Hkv * D;
  // The sequence's keys and values (adjacent in each qkv row) at its positions.
  ops_.copy_rows(kernels::element_at(layers_[layer], first * kv_row, ops_.storage_dtype()),
                 ops_.storage_bytes(kv_row), kernels::element_at(qkv, H * D, ops_.storage_dtype()),
                 ops_.storage_bytes(qkv_row), static_cast<size_t>(length),
                 ops_.storage_bytes(kv_row));
  kernels::Ops::AttentionBlockShape shape;
  shape.batch = 1;
  shape.q_len = length;
  shape.kv_len = first + length;
  shape.seq_len = positions_;
  shape.num_heads = heads_;
  shape.num_kv_heads = kv_heads_;
  shape.head_dim = head_dim_;
  shape.q_row_stride = static_cast<int>(qkv_row);
  shape.kv_row_stride = static_cast<int>(kv_row);
  shape.kv_value_offset = static_cast<int>(Hkv * D);
  ops_.attention_block_forward(accumulator_, logsumexp, qkv, layers_[layer],
                               position_numbers_ + first, position_numbers_, nullptr, shape,
                               /*first=*/true);
  ops_.convert_from_float(out, accumulator_, static_cast<size_t>(length) * H * D);
}

}  // namespace paraplan
