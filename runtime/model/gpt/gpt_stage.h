// gpt_stage.h: one pipeline stage of a GPT-2 model (learned positions,
// pre-LayerNorm blocks, GELU MLP, tied embeddings by default), written once
// against kernels/ops.h; a ModelStage (model_stage.h).
//
// Attention is fused (kernels/ops.h): no [B, H, T, T] tensor exists, only the
// per-row logsumexp [B, H, T] that its backward reads beside qkv and the
// attention output. Per layer, the recompute mode decides what a slot keeps
// for backward:
//   none      everything the backward pass reads, logsumexp included;
//   selective all but the attention output atty [BT, A] and logsumexp: backward
//             recomputes both with one attention_forward from the saved qkv,
//             into shared scratch;
//   full      only the block output; the whole block is recomputed in backward.
//
// Tensor parallelism (Megatron) when the layout has tensor_size > 1: QKV and
// MLP-up are column-parallel, attention-out and MLP-down row-parallel, with
// the f and g mappings of tensor_parallel.h around them; the embedding and
// the head are vocab-parallel. Row-parallel biases are added once (by tensor
// rank 0) before g's all-reduce; every rank computes their gradient, so
// replicated parameters stay identical.
#pragma once

#include <functional>
#include <vector>

#include "runtime/model/gpt/gpt_layout.h"
#include "runtime/model/model_stage.h"
#include "runtime/model/tensor_parallel.h"

namespace paraplan {

class GptStage final : public ModelStage {
 public:
  GptStage(const GptLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
           const ModelStageOptions& options);

  void* input(int slot) override { return slots_[slot].input; }
  const void* output(int slot) const override;
  void* output_gradient() override { return residual_gradient_; }
  const void* input_gradient() const override { return residual_gradient_; }
  void run_forward(int slot, float loss_scale, bool training) override;
  void backward(int slot, const std::function<void(size_t)>& gradients_final_from = {}) override;
  const void* logits(int slot) const override { return slots_[slot].logits; }

 private:
  // The activations of one transformer block for one micro-batch: storage
  // tensors (void*, dtype()) and fp32 statistics (float*).
  struct BlockActivations {
    void* ln1 = nullptr;  // [BT, C]
    float* ln1_mean = nullptr;
    float* ln1_rstd = nullptr;   // [BT]
    void* qkv = nullptr;         // [BT, 3A]
    float* logsumexp = nullptr;  // [B, H, T] of the attention scores' rows
    void* atty = nullptr;        // [BT, A] attention output before the projection
    void* residual2 = nullptr;   // [BT, C] input + attention branch
    void* ln2 = nullptr;
    float* ln2_mean = nullptr;
    float* ln2_rstd = nullptr;
    void* fch = nullptr;       // [BT, F] MLP up-projection
    void* fch_gelu = nullptr;  // [BT, F]
    void* output = nullptr;    // [BT, C] the block output (next block's input)
  };
  struct Slot {
    void* input = nullptr;  // [BT, C]: the embedding output, or the received input
    std::vector<BlockActivations> blocks;
    void* final_norm = nullptr;  // head: [BT, C]
    float* final_norm_mean = nullptr;
    float* final_norm_rstd = nullptr;
    void* logits = nullptr;  // head: [BT, V], overwritten by its gradient
  };

  // Allocates the buffers a block keeps under mode, and the rest from `shared`.
  BlockActivations allocate_block(RecomputeMode mode, const BlockActivations* shared);
  void block_forward(int local_layer, const void* input, const BlockActivations& acts);
  void block_backward(int local_layer, const void* input, const BlockActivations& acts);
  const void* block_input(const Slot& slot, int local_layer) const;

  const GptLayout& layout_;
  TensorParallel tensor_parallel_;
  std::vector<Slot> slots_;
  // Scratch for recomputation: one block's full set of activations under full
  // recompute, only atty and logsumexp when the stage's deepest mode is selective.
  BlockActivations recompute_scratch_;
  // Gradient scratch, shared by all layers and slots.
  void* residual_gradient_ = nullptr;   // [BT, C], flows backward through the blocks
  void* norm_gradient_ = nullptr;       // [BT, C]
  void* qkv_gradient_ = nullptr;        // [BT, 3C]
  void* atty_gradient_ = nullptr;       // [BT, A]
  void* fch_gradient_ = nullptr;        // [BT, F]
  void* fch_gelu_gradient_ = nullptr;   // [BT, F]
  float* attention_scratch_ = nullptr;  // [B, H, T]: attention_backward's row terms
};

}  // namespace paraplan
