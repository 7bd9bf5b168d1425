// context_attention.cc: the context-parallel ring's attention, forward and
// backward (context_attention.h).
#include "runtime/model/context_attention.h"

#include <stdexcept>

namespace paraplan {
namespace {

// The ring's messages between two neighbours, apart from the pipeline's
// (which tag each link between virtual stages from 0 up).
constexpr int kKeyValueTag = PeerToPeer::kMaxPeerTags - 1;
constexpr int kKeyValueGradientTag = PeerToPeer::kMaxPeerTags - 2;

}  // namespace

ContextAttention::ContextAttention(const ContextShard& shard, const ContextRing& ring,
                                   kernels::Ops& ops, MemoryTracker& memory, int batch, int heads,
                                   int kv_heads, int head_dim)
    : shard_(shard),
      ring_(ring),
      ops_(ops),
      memory_(memory),
      batch_(batch),
      heads_(heads),
      kv_heads_(kv_heads),
      head_dim_(head_dim) {
  shard_.check();
  if (shard_.size > 1 && (ring_.peers == nullptr || ring_.next_rank < 0 || ring_.previous_rank < 0))
    throw std::invalid_argument("context attention: " + std::to_string(shard_.size) +
                                " context-parallel ranks but no ring to pass blocks around");
  const size_t rows = static_cast<size_t>(batch) * shard_.local_length();
  const size_t attention = rows * heads * head_dim;
  const auto allocate = [&](size_t bytes) {
    void* pointer = memory_.allocate(bytes, MemoryCategory::kWorkspace);
    allocations_.push_back(pointer);
    return pointer;
  };
  std::vector<int32_t> positions;
  for (int r = 0; r < shard_.size; ++r) {
    const std::vector<int32_t> of_rank = shard_.positions_of(r);
    positions.insert(positions.end(), of_rank.begin(), of_rank.end());
  }
  positions_ = static_cast<int32_t*>(allocate(positions.size() * sizeof(int32_t)));
  ops_.copy_from_host(positions_, positions.data(), positions.size() * sizeof(int32_t));
  accumulator_ = static_cast<float*>(allocate(attention * sizeof(float)));
  storage_scratch_ = allocate(ops_.storage_bytes(attention));
  // One block without a ring (the own one is read in place), two with one.
  const int blocks = shard_.size > 1 ? 2 : 1;
  for (int i = 0; i < blocks; ++i) {
    kv_blocks_[i] = allocate(ops_.storage_bytes(kv_elements()));
    dkv_blocks_[i] = static_cast<float*>(allocate(kv_elements() * sizeof(float)));
  }
  if (shard_.size > 1) dkv_share_ = static_cast<float*>(allocate(kv_elements() * sizeof(float)));
}

ContextAttention::~ContextAttention() {
  for (void* pointer : allocations_) memory_.release(pointer);
}

size_t ContextAttention::kv_elements() const {
  return static_cast<size_t>(batch_) * shard_.local_length() * 2 * kv_heads_ * head_dim_;
}

kernels::Ops::AttentionBlockShape ContextAttention::own_shape() const {
  kernels::Ops::AttentionBlockShape shape;
  shape.batch = batch_;
  shape.q_len = shape.kv_len = shard_.local_length();
  shape.seq_len = shard_.seq_len;
  shape.num_heads = heads_;
  shape.num_kv_heads = kv_heads_;
  shape.head_dim = head_dim_;
  shape.q_row_stride = shape.kv_row_stride = (heads_ + 2 * kv_heads_) * head_dim_;
  shape.kv_value_offset = kv_heads_ * head_dim_;
  return shape;
}

kernels::Ops::AttentionBlockShape ContextAttention::packed_shape() const {
  kernels::Ops::AttentionBlockShape shape = own_shape();
  shape.kv_row_stride = 2 * kv_heads_ * head_dim_;
  return shape;
}

const int32_t* ContextAttention::positions_of(int context_rank) const {
  return positions_ + static_cast<size_t>(context_rank) * shard_.local_length();
}

const void* ContextAttention::kv_part(const void* qkv) const {
  return kernels::element_at(qkv, static_cast<size_t>(heads_) * head_dim_, ops_.storage_dtype());
}

void ContextAttention::pack_own_kv(const void* qkv) {
  const size_t row_elements = static_cast<size_t>(heads_ + 2 * kv_heads_) * head_dim_;
  const size_t kv_row = 2 * static_cast<size_t>(kv_heads_) * head_dim_;
  ops_.copy_rows(kv_blocks_[0], ops_.storage_bytes(kv_row), kv_part(qkv),
                 ops_.storage_bytes(row_elements),
                 static_cast<size_t>(batch_) * shard_.local_length(), ops_.storage_bytes(kv_row));
}

PeerToPeer::Posted ContextAttention::send(const void* data, kernels::DType dtype, int tag) {
  return ring_.peers->post_send(data, kv_elements(), ring_.next_rank, dtype, tag);
}

PeerToPeer::Posted ContextAttention::receive(void* data, kernels::DType dtype, int tag) {
  return ring_.peers->post_receive(data, kv_elements(), ring_.previous_rank, dtype, tag);
}

void ContextAttention::forward(void* out, float* logsumexp, const void* qkv,
                               const int32_t* documents) {
  const int n = shard_.size, r = shard_.rank;
  const kernels::DType dtype = ops_.storage_dtype();
  PeerToPeer::Posted sent = 0, received = 0;
  if (n > 1) {
    // The own block leaves while it is computed on.
    pack_own_kv(qkv);
    sent = send(kv_blocks_[0], dtype, kKeyValueTag);
    received = receive(kv_blocks_[1], dtype, kKeyValueTag);
  }
  ops_.attention_block_forward(accumulator_, logsumexp, qkv, kv_part(qkv), positions_of(r),
                               positions_of(r), documents, own_shape(), /*first=*/true);
  for (int step = 1; step < n; ++step) {
    // kv_blocks_[step % 2] holds rank (r - step)'s block; the other one was
    // sent at the step before and may take the next block once that is done.
    ring_.peers->wait(received);
    ring_.peers->wait(sent);
    void* block = kv_blocks_[step % 2];
    if (step + 1 < n) {
      sent = send(block, dtype, kKeyValueTag);
      received = receive(kv_blocks_[(step + 1) % 2], dtype, kKeyValueTag);
    }
    ops_.attention_block_forward(accumulator_, logsumexp, qkv, block, positions_of(r),
                                 positions_of((r - step + n) % n), documents, packed_shape(),
                                 /*first=*/false);
  }
  ops_.convert_from_float(out, accumulator_,
                          static_cast<size_t>(batch_) * shard_.local_length() * heads_ * head_dim_);
}

void ContextAttention::backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                                const float* logsumexp, const int32_t* documents) {
  const int n = shard_.size, r = shard_.rank;
  const kernels::DType dtype = ops_.storage_dtype(), fp32 = kernels::DType::kFloat32;
  const size_t attention = static_cast<size_t>(batch_) * shard_.local_length() * heads_ * head_dim_;
  ops_.zero_bytes(accumulator_, attention * sizeof(float));
  ops_.zero_bytes(dkv_blocks_[0], kv_elements() * sizeof(float));
  PeerToPeer::Posted kv_sent = 0, kv_received = 0, dkv_sent = 0, dkv_received = 0;
  if (n > 1) {
    pack_own_kv(qkv);
    kv_sent = send(kv_blocks_[0], dtype, kKeyValueTag);
    kv_received = receive(kv_blocks_[1], dtype, kKeyValueTag);
  }
  ops_.attention_block_backward(accumulator_, dkv_blocks_[0], dout, out, logsumexp, qkv,
                                kv_part(qkv), positions_of(r), positions_of(r), documents,
                                own_shape());
  if (n == 1) {
    write_gradients(dqkv, dkv_blocks_[0]);
    return;
  }
  // The own block's dK/dV follow it round the ring, each rank adding its share.
  dkv_sent = send(dkv_blocks_[0], fp32, kKeyValueGradientTag);
  dkv_received = receive(dkv_blocks_[1], fp32, kKeyValueGradientTag);
  for (int step = 1; step < n; ++step) {
    ring_.peers->wait(kv_received);
    ring_.peers->wait(kv_sent);
    void* block = kv_blocks_[step % 2];
    if (step + 1 < n) {
      kv_sent = send(block, dtype, kKeyValueTag);
      kv_received = receive(kv_blocks_[(step + 1) % 2], dtype, kKeyValueTag);
    }
    // This rank's share of the block's dK/dV, summed from zero while the
    // shares of the ranks before it in the ring (into dkv_blocks_[step % 2])
    // are still on their way; then added to them.
    ops_.zero_bytes(dkv_share_, kv_elements() * sizeof(float));
    ops_.attention_block_backward(accumulator_, dkv_share_, dout, out, logsumexp, qkv, block,
                                  positions_of(r), positions_of((r - step + n) % n), documents,
                                  packed_shape());
    float* dkv = dkv_blocks_[step % 2];
    ring_.peers->wait(dkv_received);
    ops_.accumulate_float32(dkv, dkv_share_, kv_elements());
    ring_.peers->wait(dkv_sent);
    dkv_sent = send(dkv, fp32, kKeyValueGradientTag);
    // After the last step: the own block's, from the rank before, complete.
    dkv_received = receive(dkv_blocks_[(step + 1) % 2], fp32, kKeyValueGradientTag);
  }
  ring_.peers->wait(dkv_received);
  ring_.peers->wait(dkv_sent);
  write_gradients(dqkv, dkv_blocks_[n % 2]);
}

void ContextAttention::write_gradients(void* dqkv, const float* own_dkv) {
  const size_t rows = static_cast<size_t>(batch_) * shard_.local_length();
  const size_t q_row = static_cast<size_t>(heads_) * head_dim_;
  const size_t kv_row = 2 * static_cast<size_t>(kv_heads_) * head_dim_;
  const size_t row = q_row + kv_row;
  ops_.convert_from_float(storage_scratch_, accumulator_, rows * q_row);
  ops_.copy_rows(dqkv, ops_.storage_bytes(row), storage_scratch_, ops_.storage_bytes(q_row), rows,
                 ops_.storage_bytes(q_row));
  // The key/value blocks are all delivered: the first one is scratch again.
  ops_.convert_from_float(kv_blocks_[0], own_dkv, rows * kv_row);
  ops_.copy_rows(kernels::element_at(dqkv, q_row, ops_.storage_dtype()), ops_.storage_bytes(row),
                 kv_blocks_[0], ops_.storage_bytes(kv_row), rows, ops_.storage_bytes(kv_row));
}

}  // namespace paraplan
