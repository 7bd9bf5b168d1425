// llama_stage.h: one pipeline stage of a Llama-family model (token embedding
// without positions, pre-RMSNorm blocks with rotary grouped-query attention
// and a SwiGLU MLP, no biases but Qwen 2's on q, k and v, an untied head by default), written once
// against kernels/ops.h; a DecoderStage (decoder_stage.h: the slots, the
// loops over the blocks, recomputation, the head) with Llama's block.
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
// and the head are vocab-parallel. The q/k/v biases (Qwen 2) are
// column-parallel too, each rank adding its heads' own; no row-parallel layer
// has a bias, so nothing is added once.
// With sequence parallelism the RMSNorms and residual adds run on the rank's
// token shard (the norms, residual, output and statistics hold local_rows(),
// decoder_stage.h).
#pragma once

#include "runtime/model/decoder_stage.h"
#include "runtime/model/llama/llama_layout.h"

namespace paraplan {

// The activations of one Llama block for one micro-batch: storage tensors
// (void*, the stage's dtype) and fp32 statistics (float*).
struct LlamaBlockActivations {
  // local = local_rows(): BT, or BT/t with sequence parallelism.
  void* attention_norm = nullptr;   // [local, C]
  float* attention_rstd = nullptr;  // [local]
  void* qkv = nullptr;              // [BT, (H + 2 Hkv) D], q and k rotated
  float* logsumexp = nullptr;       // [B, H, T]
  void* attention = nullptr;        // [BT, H D] attention output before o_proj
  void* residual = nullptr;         // [local, C] input + attention branch
  void* mlp_norm = nullptr;         // [local, C]
  float* mlp_rstd = nullptr;        // [local]
  void* gate_up = nullptr;          // [BT, 2F]
  void* hidden = nullptr;           // [BT, F] silu(gate) * up
  void* output = nullptr;           // [local, C] the block output
};

class LlamaStage final : public DecoderStage<LlamaBlockActivations> {
 public:
  LlamaStage(const LlamaLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
             const ModelStageOptions& options);

 private:
  using Acts = LlamaBlockActivations;
  Acts allocate_block(RecomputeMode mode, const Acts* shared) override;
  Acts allocate_attention_scratch() override;
  void attention_core_forward(const Acts& acts) override;
  void block_forward(int local_layer, const void* input, const Acts& acts) override;
  void block_backward(int local_layer, const void* input, const Acts& acts) override;
  void embedding_forward(int slot, void* out) override;
  void embedding_backward(int slot, const void* input_gradient) override;
  void final_norm_forward(Slot& slot, const void* x) override;
  void final_norm_backward(Slot& slot, const void* x, const void* norm_gradient) override;
  // The rotary embedding of qkv's query and key heads in place (forward), or
  // its inverse on their gradient (backward), at the tokens' positions.
  void rotate(void* qkv, bool backward);
  // The q/k/v bias's offset, or kNoBias for a model without one.
  static size_t qkv_bias(const LlamaBlockOffsets& w) {
    return w.qkv_bias == LlamaLayout::kNone ? kNoBias : w.qkv_bias;
  }

  const LlamaLayout& layout_;
  // The rotary tables [T, D/2] (fp32, backend memory).
  float* rotary_cos_ = nullptr;
  float* rotary_sin_ = nullptr;
  // Gradient scratch, shared by all layers and slots (beside the residual
  // and norm gradients of DecoderStage).
  void* qkv_gradient_ = nullptr;        // [BT, (H + 2 Hkv) D]
  void* attention_gradient_ = nullptr;  // [BT, H D]
  void* gate_up_gradient_ = nullptr;    // [BT, 2F]
  void* hidden_gradient_ = nullptr;     // [BT, F]
  float* attention_scratch_ = nullptr;  // [B, H, T]
};

}  // namespace paraplan
