// gpt_stage.cc: forward and backward of a GPT-2 pipeline stage over the op set.
//
// Shapes: B micro-batch size, T sequence length, C d_model, and this rank's
// tensor-parallel shares: A = C/t attention width, H heads, F ffn, V vocab. Backward ops
// accumulate, so gradient scratch is zeroed before each use and residual_gradient_ carries
// d(residual stream) backward in place: each residual branch adds its input gradient into it
// (llm.c's scheme).
#include "runtime/model/gpt/gpt_stage.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace paraplan {

GptStage::BlockActivations GptStage::allocate_block(RecomputeMode mode,
                                                    const BlockActivations* shared) {
  const TransformerConfig& config = layout_.config();
  const size_t BT = static_cast<size_t>(batch_) * config.seq_len;
  const size_t C = config.d_model, A = layout_.local_attention_width(), F = layout_.local_ffn();
  const size_t attention_rows = BT * layout_.local_heads();  // logsumexp [B, H, T]
  BlockActivations acts;
  // Under full recompute a slot keeps only the block output (the next block's
  // input); everything else comes from the shared recompute scratch.
  const bool keep_all = mode != RecomputeMode::Full;
  auto own = [&](size_t count, void* BlockActivations::*field) {
    acts.*field = keep_all || shared == nullptr
                      ? allocate_storage(count, MemoryCategory::kActivations)
                      : shared->*field;
  };
  auto own_floats = [&](size_t count, float* BlockActivations::*field) {
    acts.*field = keep_all || shared == nullptr
                      ? allocate_floats(count, MemoryCategory::kActivations)
                      : shared->*field;
  };
  own(BT * C, &BlockActivations::ln1);
  own_floats(BT, &BlockActivations::ln1_mean);
  own_floats(BT, &BlockActivations::ln1_rstd);
  own(BT * 3 * A, &BlockActivations::qkv);
  own(BT * C, &BlockActivations::residual2);
  own(BT * C, &BlockActivations::ln2);
  own_floats(BT, &BlockActivations::ln2_mean);
  own_floats(BT, &BlockActivations::ln2_rstd);
  own(BT * F, &BlockActivations::fch);
  own(BT * F, &BlockActivations::fch_gelu);
  // The attention output and logsumexp are kept only without recomputation;
  // selective recompute rebuilds them from qkv.
  const bool keep_attention = mode == RecomputeMode::None || shared == nullptr;
  acts.atty =
      keep_attention ? allocate_storage(BT * A, MemoryCategory::kActivations) : shared->atty;
  acts.logsumexp = keep_attention ? allocate_floats(attention_rows, MemoryCategory::kActivations)
                                  : shared->logsumexp;
  // The block output is always kept: it is the next block's input.
  acts.output =
      shared == nullptr ? nullptr : allocate_storage(BT * C, MemoryCategory::kActivations);
  return acts;
}

GptStage::GptStage(const GptLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
                   const ModelStageOptions& options)
    : ModelStage(layout, ops, memory, options,
                 static_cast<size_t>(options.micro_batch_size) * layout.config().seq_len *
                     layout.config().d_model),
      layout_(layout),
      tensor_parallel_(options.tensor_group, ops, memory,
                       layout.stage().has_head
                           ? static_cast<size_t>(options.micro_batch_size) * layout.config().seq_len
                           : 0) {
  const TransformerConfig& config = layout.config();
  const StageSpec& stage = layout.stage();
  const size_t BT = static_cast<size_t>(batch_) * config.seq_len;
  const size_t C = config.d_model, A = layout.local_attention_width(), F = layout.local_ffn(),
               V = layout.local_vocab();
  const size_t attention_rows = BT * layout.local_heads();  // [B, H, T]

  // Recompute scratch: only as much as the stage's modes need.
  bool any_full = false, any_selective = false;
  for (RecomputeMode mode : recompute_) {
    any_full |= mode == RecomputeMode::Full;
    any_selective |= mode == RecomputeMode::Selective;
  }
  if (any_full) {
    recompute_scratch_ = allocate_block(RecomputeMode::None, nullptr);
  } else if (any_selective) {
    // Activations, like the full scratch: the planner counts both as the
    // recompute working set.
    recompute_scratch_.atty = allocate_storage(BT * A, MemoryCategory::kActivations);
    recompute_scratch_.logsumexp = allocate_floats(attention_rows, MemoryCategory::kActivations);
  }

  slots_.resize(num_slots_);
  for (Slot& slot : slots_) {
    slot.input = allocate_storage(BT * C, MemoryCategory::kActivations);
    for (RecomputeMode mode : recompute_)
      slot.blocks.push_back(allocate_block(mode, &recompute_scratch_));
    if (stage.has_head) {
      slot.final_norm = allocate_storage(BT * C, MemoryCategory::kActivations);
      slot.final_norm_mean = allocate_floats(BT, MemoryCategory::kActivations);
      slot.final_norm_rstd = allocate_floats(BT, MemoryCategory::kActivations);
      slot.logits = allocate_storage(BT * V, MemoryCategory::kActivations);
    }
  }
  residual_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
  norm_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
  qkv_gradient_ = allocate_storage(BT * 3 * A, MemoryCategory::kWorkspace);
  atty_gradient_ = allocate_storage(BT * A, MemoryCategory::kWorkspace);
  fch_gradient_ = allocate_storage(BT * F, MemoryCategory::kWorkspace);
  fch_gelu_gradient_ = allocate_storage(BT * F, MemoryCategory::kWorkspace);
  attention_scratch_ = allocate_floats(attention_rows, MemoryCategory::kWorkspace);
}

const void* GptStage::block_input(const Slot& slot, int local_layer) const {
  return local_layer == 0 ? slot.input : slot.blocks[local_layer - 1].output;
}

const void* GptStage::output(int slot) const {
  const Slot& s = slots_[slot];
  return s.blocks.empty() ? s.input : s.blocks.back().output;
}

void GptStage::block_forward(int local_layer, const void* input, const BlockActivations& a) {
  const TransformerConfig& config = layout_.config();
  const BlockOffsets& w = layout_.block(local_layer);
  const int BT = batch_ * config.seq_len, C = config.d_model, F = layout_.local_ffn(),
            A = layout_.local_attention_width();
  const size_t BTC = static_cast<size_t>(BT) * C;
  // Row-parallel biases: added by one tensor rank, before g's all-reduce.
  const bool adds_row_bias = tensor_parallel_.adds_row_parallel_bias();
  ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, input, param(w.ln1_weight),
                         param(w.ln1_bias), BT, C, config.norm_epsilon);
  // f (identity forward) | column-parallel QKV | attention | row-parallel projection | g
  ops_.linear_forward(a.qkv, a.ln1, param(w.qkv_weight), param(w.qkv_bias), BT, C, 3 * A);
  ops_.attention_forward(a.atty, a.logsumexp, a.qkv, batch_, config.seq_len, layout_.local_heads(),
                         layout_.local_heads(), config.head_dim());
  // residual2 holds the projection first, then input + projection.
  ops_.linear_forward(a.residual2, a.atty, param(w.attn_proj_weight),
                      adds_row_bias ? param(w.attn_proj_bias) : nullptr, BT, A, C);
  tensor_parallel_.g_forward(a.residual2, BTC);
  ops_.residual_forward(a.residual2, a.residual2, input, BTC);
  ops_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(w.ln2_weight),
                         param(w.ln2_bias), BT, C, config.norm_epsilon);
  // f (identity forward) | column-parallel up | GELU | row-parallel down | g
  ops_.linear_forward(a.fch, a.ln2, param(w.mlp_up_weight), param(w.mlp_up_bias), BT, C, F);
  ops_.gelu_forward(a.fch_gelu, a.fch, static_cast<size_t>(BT) * F);
  ops_.linear_forward(a.output, a.fch_gelu, param(w.mlp_down_weight),
                      adds_row_bias ? param(w.mlp_down_bias) : nullptr, BT, F, C);
  tensor_parallel_.g_forward(a.output, BTC);
  ops_.residual_forward(a.output, a.output, a.residual2, BTC);
}

void GptStage::block_backward(int local_layer, const void* input, const BlockActivations& a) {
  const TransformerConfig& config = layout_.config();
  const BlockOffsets& w = layout_.block(local_layer);
  const int BT = batch_ * config.seq_len, C = config.d_model, F = layout_.local_ffn(),
            A = layout_.local_attention_width();
  const size_t BTC = static_cast<size_t>(BT) * C, BTF = static_cast<size_t>(BT) * F,
               BTA = static_cast<size_t>(BT) * A;
  void* dresidual = residual_gradient_;  // d(block output) on entry, d(input) on exit

  // MLP branch: output = residual2 + down(gelu(up(ln2(residual2)))).
  zero(fch_gelu_gradient_, BTF);
  ops_.linear_backward(fch_gelu_gradient_, grad(w.mlp_down_weight), grad(w.mlp_down_bias),
                       dresidual, a.fch_gelu, param(w.mlp_down_weight), BT, F, C);
  zero(fch_gradient_, BTF);
  ops_.gelu_backward(fch_gradient_, a.fch, fch_gelu_gradient_, BTF);
  zero(norm_gradient_, BTC);
  ops_.linear_backward(norm_gradient_, grad(w.mlp_up_weight), grad(w.mlp_up_bias), fch_gradient_,
                       a.ln2, param(w.mlp_up_weight), BT, C, F);
  tensor_parallel_.f_backward(norm_gradient_, BTC);  // each rank held a partial input gradient
  ops_.layernorm_backward(dresidual, grad(w.ln2_weight), grad(w.ln2_bias), norm_gradient_,
                          a.residual2, param(w.ln2_weight), a.ln2_mean, a.ln2_rstd, BT, C);

  // Attention branch: residual2 = input + proj(attention(qkv(ln1(input)))).
  zero(atty_gradient_, BTA);
  ops_.linear_backward(atty_gradient_, grad(w.attn_proj_weight), grad(w.attn_proj_bias), dresidual,
                       a.atty, param(w.attn_proj_weight), BT, A, C);
  zero(qkv_gradient_, BTA * 3);
  ops_.attention_backward(qkv_gradient_, attention_scratch_, atty_gradient_, a.qkv, a.atty,
                          a.logsumexp, batch_, config.seq_len, layout_.local_heads(),
                          layout_.local_heads(), config.head_dim());
  zero(norm_gradient_, BTC);
  ops_.linear_backward(norm_gradient_, grad(w.qkv_weight), grad(w.qkv_bias), qkv_gradient_, a.ln1,
                       param(w.qkv_weight), BT, C, 3 * A);
  tensor_parallel_.f_backward(norm_gradient_, BTC);
  ops_.layernorm_backward(dresidual, grad(w.ln1_weight), grad(w.ln1_bias), norm_gradient_, input,
                          param(w.ln1_weight), a.ln1_mean, a.ln1_rstd, BT, C);
}

void GptStage::forward(int slot_index, float loss_scale, bool training) {
  const TransformerConfig& config = layout_.config();
  const StageSpec& stage = layout_.stage();
  Slot& slot = slots_[slot_index];
  const int BT = batch_ * config.seq_len, C = config.d_model, V = layout_.local_vocab();

  if (stage.has_embedding) {
    tensor_parallel_.vocab_parallel_embedding_forward(slot.input, tokens(slot_index),
                                                      param(layout_.token_embedding()), BT,
                                                      layout_.vocab_start(), V, C);
    ops_.position_embedding_forward(slot.input, param(layout_.position_embedding()), batch_,
                                    config.seq_len, C);
  }
  for (int layer = 0; layer < stage.num_layers; ++layer) {
    BlockActivations acts = slot.blocks[layer];
    // Forward writes every buffer; under recompute some of them are shared
    // scratch that backward refills, so no state is lost by overwriting it.
    block_forward(layer, block_input(slot, layer), acts);
  }
  if (stage.has_head) {
    ops_.layernorm_forward(slot.final_norm, slot.final_norm_mean, slot.final_norm_rstd,
                           output(slot_index), param(layout_.final_norm_weight()),
                           param(layout_.final_norm_bias()), BT, C, config.norm_epsilon);
    // f (identity forward) | the vocab-parallel head | vocab-parallel cross-entropy
    ops_.linear_forward(slot.logits, slot.final_norm, param(layout_.head_weight()), nullptr, BT, C,
                        V);
    tensor_parallel_.vocab_parallel_cross_entropy(
        losses(slot_index), training ? slot.logits : nullptr, slot.logits, targets(slot_index), BT,
        V, layout_.vocab_start(), loss_scale);
  }
}

void GptStage::backward(int slot_index, const std::function<void(size_t)>& gradients_final_from) {
  const TransformerConfig& config = layout_.config();
  const StageSpec& stage = layout_.stage();
  Slot& slot = slots_[slot_index];
  const int BT = batch_ * config.seq_len, C = config.d_model, V = layout_.local_vocab();

  if (stage.has_head) {
    // slot.logits holds d(loss)/d(logits) from the fused forward.
    zero(norm_gradient_, static_cast<size_t>(BT) * C);
    ops_.linear_backward(norm_gradient_, grad(layout_.head_weight()), nullptr, slot.logits,
                         slot.final_norm, param(layout_.head_weight()), BT, C, V);
    tensor_parallel_.f_backward(norm_gradient_, static_cast<size_t>(BT) * C);
    zero(residual_gradient_, static_cast<size_t>(BT) * C);
    ops_.layernorm_backward(residual_gradient_, grad(layout_.final_norm_weight()),
                            grad(layout_.final_norm_bias()), norm_gradient_, output(slot_index),
                            param(layout_.final_norm_weight()), slot.final_norm_mean,
                            slot.final_norm_rstd, BT, C);
    // The tied head on a stage with the embedding is the embedding (offset 0).
    if (gradients_final_from) gradients_final_from(layout_.final_norm_weight());
  }
  // Otherwise residual_gradient_ already holds the received output gradient.
  for (int layer = stage.num_layers - 1; layer >= 0; --layer) {
    const void* input = block_input(slot, layer);
    BlockActivations acts = slot.blocks[layer];
    switch (recompute_[layer]) {
      case RecomputeMode::None:
        break;
      case RecomputeMode::Selective:
        // Rebuild the attention output and logsumexp (shared scratch) from the
        // saved qkv: bitwise what the forward computed.
        ops_.attention_forward(acts.atty, acts.logsumexp, acts.qkv, batch_, config.seq_len,
                               layout_.local_heads(), layout_.local_heads(), config.head_dim());
        break;
      case RecomputeMode::Full: {
        // Everything but the block output lives in the shared scratch; the
        // recomputed output is bitwise the saved one, so it may overwrite it.
        void* saved_output = acts.output;
        acts = recompute_scratch_;
        acts.output = saved_output;
        block_forward(layer, input, acts);
        break;
      }
    }
    block_backward(layer, input, acts);
    if (gradients_final_from) gradients_final_from(layout_.block(layer).ln1_weight);
  }
  if (stage.has_embedding) {
    // The vocab-parallel embedding's backward needs no collective: each rank
    // scatters into its own rows.
    ops_.token_embedding_backward(grad(layout_.token_embedding()), residual_gradient_,
                                  tokens(slot_index), BT, layout_.vocab_start(), V, C);
    ops_.position_embedding_backward(grad(layout_.position_embedding()), residual_gradient_, batch_,
                                     config.seq_len, C);
  }
  if (gradients_final_from) gradients_final_from(0);
}

}  // namespace paraplan
