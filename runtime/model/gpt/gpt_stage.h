// gpt_stage.h: one pipeline stage of a GPT-2 model (learned positions,
// pre-LayerNorm blocks, GELU MLP, tied embeddings by default), written once
// against kernels/ops.h; a DecoderStage (decoder_stage.h: the slots, the
// loops over the blocks, recomputation, the head) with GPT-2's block.
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
// replicated parameters stay identical. With sequence parallelism the
// LayerNorms and residual adds run on the rank's token shard (ln1, ln2,
// residual2, output and their statistics hold local_rows(), decoder_stage.h).
#pragma once

#include "runtime/model/decoder_stage.h"
#include "runtime/model/gpt/gpt_layout.h"

namespace paraplan {

// The activations of one GPT-2 block for one micro-batch: storage tensors
// (void*, the stage's dtype) and fp32 statistics (float*).
struct GptBlockActivations {
  // local = local_rows(): BT, or BT/t with sequence parallelism.
  void* ln1 = nullptr;  // [local, C]
  float* ln1_mean = nullptr;
  float* ln1_rstd = nullptr;   // [local]
  void* qkv = nullptr;         // [BT, 3A]
  float* logsumexp = nullptr;  // [B, H, T] of the attention scores' rows
  void* atty = nullptr;        // [BT, A] attention output before the projection
  void* residual2 = nullptr;   // [local, C] input + attention branch
  void* ln2 = nullptr;
  float* ln2_mean = nullptr;
  float* ln2_rstd = nullptr;
  void* fch = nullptr;       // [BT, F] MLP up-projection
  void* fch_gelu = nullptr;  // [BT, F]
  void* output = nullptr;    // [local, C] the block output (next block's input)
};

class GptStage final : public DecoderStage<GptBlockActivations> {
 public:
  GptStage(const GptLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
           const ModelStageOptions& options);

 private:
  using Acts = GptBlockActivations;
  Acts allocate_block(RecomputeMode mode, const Acts* shared) override;
  Acts allocate_attention_scratch() override;
  void attention_core_forward(const Acts& acts) override;
  void block_forward(int local_layer, const void* input, const Acts& acts) override;
  void block_backward(int local_layer, const void* input, const Acts& acts) override;
  void embedding_forward(int slot, void* out) override;
  void embedding_backward(int slot, const void* input_gradient) override;
  void final_norm_forward(Slot& slot, const void* x) override;
  void final_norm_backward(Slot& slot, const void* x, const void* norm_gradient) override;

  const GptLayout& layout_;
  // Gradient scratch, shared by all layers and slots (beside the residual
  // and norm gradients of DecoderStage).
  void* qkv_gradient_ = nullptr;        // [BT, 3C]
  void* atty_gradient_ = nullptr;       // [BT, A]
  void* fch_gradient_ = nullptr;        // [BT, F]
  float* attention_scratch_ = nullptr;  // [B, H, T]: attention_backward's row terms
};

}  // namespace paraplan
