// key_value_cache.h: the keys and values of every layer for the tokens a
// decoder has seen, so generating a token runs the model over that token
// alone (`paraplan sample`). A stage given a cache (ModelStageOptions::
// key_value_cache) holds a short sequence at first_position() of the text:
// each layer's attention appends the sequence's keys and values at their
// positions, then attends from its queries over every position up to its
// own (Ops::attention_block_forward with the queries' and keys' positions:
// the same causal mask). A prefill stage of the prompt's length and a
// one-token stage share one cache and one set of parameters.
//
// One sequence (micro-batch 1), one rank (no tensor or context parallelism),
// forwards only. Summation order differs from the whole-sequence attention
// (the block kernel's): equal within rounding.
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/ops.h"
#include "runtime/model/memory_tracker.h"

namespace paraplan {

class KeyValueCache {
 public:
  // positions: the most tokens the cache holds (the model's context).
  KeyValueCache(kernels::Ops& ops, MemoryTracker& memory, int layers, int positions, int heads,
                int kv_heads, int head_dim);
  ~KeyValueCache();
  KeyValueCache(const KeyValueCache&) = delete;
  KeyValueCache& operator=(const KeyValueCache&) = delete;

  int positions() const { return positions_; }
  // Whether a stage of this model shape may use it.
  bool fits(int layers, int heads, int kv_heads, int head_dim) const {
    return layers == static_cast<int>(layers_.size()) && heads == heads_ && kv_heads == kv_heads_ &&
           head_dim == head_dim_;
  }

  // Attention of `length` tokens at positions [first, first + length) of
  // layer `layer`: their keys and values (from qkv [length, (H + 2 Hkv) D],
  // Ops::attention_forward's layout) join the cache, then out [length, H D]
  // (storage) and logsumexp [H, length] as Ops::attention_forward gives them,
  // over positions [0, first + length). The positions before `first` must
  // have been appended already.
  void attend(int layer, int first, int length, void* out, float* logsumexp, const void* qkv);

 private:
  kernels::Ops& ops_;
  MemoryTracker& memory_;
  int positions_, heads_, kv_heads_, head_dim_;
  std::vector<void*> layers_;            // [positions, 2 Hkv D] storage each: keys, then values
  int32_t* position_numbers_ = nullptr;  // 0, 1, ..., positions - 1 (backend memory)
  float* accumulator_ = nullptr;         // [positions, H D] fp32: a sequence's attention
};

}  // namespace paraplan
