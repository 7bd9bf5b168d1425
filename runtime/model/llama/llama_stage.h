// llama_stage.h: one pipeline stage of a Llama-family model (token embedding
// without positions, pre-RMSNorm blocks with rotary grouped-query attention
// and a SwiGLU MLP, no biases, an untied head by default), written once
// against kernels/ops.h; a ModelStage (model_stage.h).
//
// A block: x -> RMSNorm -> [q | k | v] (one GEMM) -> rotary embedding on q and
// k (in place, Hugging Face's rotate-half convention, from the tables of
// rotary.h) -> fused attention with grouped KV heads -> o_proj -> + x ->
// RMSNorm -> [gate | up] (one GEMM) -> silu(gate) * up -> down_proj -> + .
// Per layer, the recompute mode decides what a slot keeps for backward, as
// for GPT-2 (gpt_stage.h): none keeps everything; selective drops the
// attention output and logsumexp, which backward rebuilds from the saved
// (rotated) qkv with one attention_forward; full keeps only the block output.
//
// Tensor parallelism (Megatron) when the layout has tensor_size > 1: the
// q/k/v and gate/up GEMMs are column-parallel (each rank its query and KV
// heads, its share of the hidden units), o_proj and down_proj row-parallel,
// with the f and g mappings of tensor_parallel.h around them; the embedding
// and the head are vocab-parallel. No biases, so nothing is added once.
#pragma once

#include <functional>
#include <vector>

#include "runtime/model/llama/llama_layout.h"
#include "runtime/model/model_stage.h"
#include "runtime/model/tensor_parallel.h"

namespace paraplan {

class LlamaStage final : public ModelStage {
 public:
  LlamaStage(const LlamaLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
             const ModelStageOptions& options);

  void* input(int slot) override { return slots_[slot].input; }
  const void* output(int slot) const override;
  void* output_gradient() override { return residual_gradient_; }
  const void* input_gradient() const override { return residual_gradient_; }
  void forward(int slot, float loss_scale, bool training = true) override;
  void backward(int slot, const std::function<void(size_t)>& gradients_final_from = {}) override;
  const void* logits(int slot) const override { return slots_[slot].logits; }

 private:
  // The activations of one block for one micro-batch: storage tensors (void*,
  // dtype()) and fp32 statistics (float*).
  struct BlockActivations {
    void* attention_norm = nullptr;   // [BT, C]
    float* attention_rstd = nullptr;  // [BT]
    void* qkv = nullptr;              // [BT, (H + 2 Hkv) D], q and k rotated
    float* logsumexp = nullptr;       // [B, H, T]
    void* attention = nullptr;        // [BT, H D] attention output before o_proj
    void* residual = nullptr;         // [BT, C] input + attention branch
    void* mlp_norm = nullptr;         // [BT, C]
    float* mlp_rstd = nullptr;        // [BT]
    void* gate_up = nullptr;          // [BT, 2F]
    void* hidden = nullptr;           // [BT, F] silu(gate) * up
    void* output = nullptr;           // [BT, C] the block output
  };
  struct Slot {
    void* input = nullptr;  // [BT, C]: the embedding output, or the received input
    std::vector<BlockActivations> blocks;
    void* final_norm = nullptr;  // head: [BT, C]
    float* final_rstd = nullptr;
    void* logits = nullptr;  // head: [BT, V], overwritten by its gradient
  };

  BlockActivations allocate_block(RecomputeMode mode, const BlockActivations* shared);
  void block_forward(int local_layer, const void* input, const BlockActivations& acts);
  void attention_core_forward(const BlockActivations& acts);
  void block_backward(int local_layer, const void* input, const BlockActivations& acts);
  const void* block_input(const Slot& slot, int local_layer) const;

  const LlamaLayout& layout_;
  TensorParallel tensor_parallel_;
  std::vector<Slot> slots_;
  // The rotary tables [T, D/2] (fp32, backend memory).
  float* rotary_cos_ = nullptr;
  float* rotary_sin_ = nullptr;
  // Recompute scratch: a whole block under full recompute, the attention
  // output and logsumexp under selective.
  BlockActivations recompute_scratch_;
  // Gradient scratch, shared by all layers and slots.
  void* residual_gradient_ = nullptr;   // [BT, C]
  void* norm_gradient_ = nullptr;       // [BT, C]
  void* qkv_gradient_ = nullptr;        // [BT, (H + 2 Hkv) D]
  void* attention_gradient_ = nullptr;  // [BT, H D]
  void* gate_up_gradient_ = nullptr;    // [BT, 2F]
  void* hidden_gradient_ = nullptr;     // [BT, F]
  float* attention_scratch_ = nullptr;  // [B, H, T]
};

}  // namespace paraplan
