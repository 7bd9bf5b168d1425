// context_attention.h: attention over a context-parallel group's ring
// (plan.fbs, Mesh.context_parallel), and attention within documents
// (Data.document_separator), for one model stage.
//
// Each rank holds its queries, keys and values for its share of every
// sequence (context_shard.h). Forward: the rank's own key/value block first,
// then cp - 1 more, each received from the previous rank of the ring while
// the block before it is computed and passed on to the next rank (only the
// KV heads travel: packed [B, T/cp, 2 Hkv D]); each block's partial result
// is folded into the running one by its log-sum-exp
// (Ops::attention_block_forward). Backward: the key/value blocks travel the
// same way, with each block's fp32 dK/dV accumulator one step behind them.
// As in ring-flash-attention, a rank computes its queries' share of the
// block it holds into a zeroed fp32 buffer of its own while the accumulator
// of that block (the shares of the ranks before it) is still in flight, then
// waits for the accumulator, adds its share (Ops::accumulate_float32) and
// passes it on: each transfer of an accumulator is hidden behind the next
// rank's block backward, as the K/V blocks' are. After cp steps every
// block's gradient is back with its owner, summed in ring order from the
// owner o: dKV(o) = ((s(o) + s(o+1)) + s(o+2)) + ... + s(o-1) (ranks mod
// cp), each rank's share s summed from zero by the block kernel:
// deterministic, the same for any timing. Only the last transfer, of the
// owner's complete accumulator, has no compute left to hide behind.
// With cp = 1 (document masking alone) the ring is one block and no transfer.
//
// Summation order differs from the one-rank attention (the blocks' partial
// sums, combined): equal within rounding, not bitwise.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/context_shard.h"
#include "runtime/model/memory_tracker.h"

namespace paraplan {

// The ring of a context-parallel group: the transfers and the world ranks of
// the neighbours (parallel_state.h). Unused with one rank.
struct ContextRing {
  PeerToPeer* peers = nullptr;
  int next_rank = -1, previous_rank = -1;
};

class ContextAttention {
 public:
  // heads and kv_heads: this tensor rank's; batch: the micro-batch size.
  ContextAttention(const ContextShard& shard, const ContextRing& ring, kernels::Ops& ops,
                   MemoryTracker& memory, int batch, int heads, int kv_heads, int head_dim);
  ~ContextAttention();
  ContextAttention(const ContextAttention&) = delete;
  ContextAttention& operator=(const ContextAttention&) = delete;

  // out [B, T/cp, H D] (storage) and logsumexp [B, H, T/cp] from qkv [B, T/cp,
  // (H + 2 Hkv) D], as Ops::attention_forward lays them out. documents:
  // [B, T] document numbers of the whole sequences, or null (causal only).
  void forward(void* out, float* logsumexp, const void* qkv, const int32_t* documents);
  // dqkv (overwritten) from dout, given forward's qkv, out and logsumexp.
  void backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                const float* logsumexp, const int32_t* documents);

 private:
  // The rank's own block read in place from qkv, or a packed received one.
  kernels::Ops::AttentionBlockShape own_shape() const;
  kernels::Ops::AttentionBlockShape packed_shape() const;
  const int32_t* positions_of(int context_rank) const;
  const void* kv_part(const void* qkv) const;
  void pack_own_kv(const void* qkv);
  PeerToPeer::Posted send(const void* data, kernels::DType dtype, int tag);
  PeerToPeer::Posted receive(void* data, kernels::DType dtype, int tag);
  size_t kv_elements() const;  // of a packed block
  // The last steps of backward: dq and the own block's dK/dV into dqkv.
  void write_gradients(void* dqkv, const float* own_dkv);

  ContextShard shard_;
  ContextRing ring_;
  kernels::Ops& ops_;
  MemoryTracker& memory_;
  int batch_, heads_, kv_heads_, head_dim_;
  std::vector<void*> allocations_;
  int32_t* positions_ = nullptr;     // [cp, T/cp]: each rank's tokens' positions
  float* accumulator_ = nullptr;     // [B, T/cp, H D] fp32: forward's out, backward's dq
  void* kv_blocks_[2] = {};          // packed K/V blocks in flight (storage)
  float* dkv_blocks_[2] = {};        // their fp32 dK/dV accumulators
  float* dkv_share_ = nullptr;       // with a ring: one step's fp32 dK/dV share
  void* storage_scratch_ = nullptr;  // [B, T/cp, H D]: dq rounded to storage
};

}  // namespace paraplan
