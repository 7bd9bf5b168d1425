// llama_stage.cc: forward and backward of a Llama pipeline stage over the op
// set.
//
// Shapes: B micro-batch size, T sequence length, C d_model, D head_dim, and
// this rank's tensor-parallel shares: H query heads, Hkv KV heads, Q = (H +
// 2 Hkv) D the qkv width, A = H D the attention width, F ffn, V vocab.
// Backward ops accumulate, so gradient scratch is zeroed before each use, and
// residual_gradient_ carries d(residual stream) backward in place (llm.c's
// scheme, as gpt_stage.cc).
#include "runtime/model/llama/llama_stage.h"

#include "runtime/model/llama/rotary.h"

namespace paraplan {

LlamaStage::BlockActivations LlamaStage::allocate_block(RecomputeMode mode,
                                                        const BlockActivations* shared) {
  const size_t BT = static_cast<size_t>(batch_) * layout_.config().seq_len;
  const size_t C = layout_.config().d_model, Q = layout_.local_qkv_width(),
               A = layout_.local_attention_width(), F = layout_.local_ffn();
  BlockActivations acts;
  // Full recompute keeps only the block output; the rest is the shared scratch.
  const bool own_all = mode != RecomputeMode::Full || shared == nullptr;
  const auto storage = [&](size_t count, void* BlockActivations::*field) {
    acts.*field = own_all ? allocate_storage(count, MemoryCategory::kActivations) : shared->*field;
  };
  const auto floats = [&](size_t count, float* BlockActivations::*field) {
    acts.*field = own_all ? allocate_floats(count, MemoryCategory::kActivations) : shared->*field;
  };
  storage(BT * C, &BlockActivations::attention_norm);
  floats(BT, &BlockActivations::attention_rstd);
  storage(BT * Q, &BlockActivations::qkv);
  storage(BT * C, &BlockActivations::residual);
  storage(BT * C, &BlockActivations::mlp_norm);
  floats(BT, &BlockActivations::mlp_rstd);
  storage(BT * 2 * F, &BlockActivations::gate_up);
  storage(BT * F, &BlockActivations::hidden);
  // The attention output and logsumexp only without recomputation: selective
  // recompute rebuilds them from qkv.
  const bool keep_attention = mode == RecomputeMode::None || shared == nullptr;
  acts.attention =
      keep_attention ? allocate_storage(BT * A, MemoryCategory::kActivations) : shared->attention;
  acts.logsumexp = keep_attention
                       ? allocate_floats(BT * layout_.local_heads(), MemoryCategory::kActivations)
                       : shared->logsumexp;
  // The block output is always kept: it is the next block's input.
  acts.output =
      shared == nullptr ? nullptr : allocate_storage(BT * C, MemoryCategory::kActivations);
  return acts;
}

LlamaStage::LlamaStage(const LlamaLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
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
  const size_t BT = static_cast<size_t>(batch_) * config.seq_len;
  const size_t C = config.d_model, Q = layout.local_qkv_width(), A = layout.local_attention_width(),
               F = layout.local_ffn(), V = layout.local_vocab();

  const llama::RotaryTables tables = llama::rotary_tables(config);
  rotary_cos_ = allocate_floats(tables.cos.size(), MemoryCategory::kWorkspace);
  rotary_sin_ = allocate_floats(tables.sin.size(), MemoryCategory::kWorkspace);
  ops_.copy_from_host(rotary_cos_, tables.cos.data(), tables.cos.size() * sizeof(float));
  ops_.copy_from_host(rotary_sin_, tables.sin.data(), tables.sin.size() * sizeof(float));

  bool any_full = false, any_selective = false;
  for (RecomputeMode mode : recompute_) {
    any_full |= mode == RecomputeMode::Full;
    any_selective |= mode == RecomputeMode::Selective;
  }
  if (any_full) {
    recompute_scratch_ = allocate_block(RecomputeMode::None, nullptr);
  } else if (any_selective) {
    recompute_scratch_.attention = allocate_storage(BT * A, MemoryCategory::kActivations);
    recompute_scratch_.logsumexp =
        allocate_floats(BT * layout.local_heads(), MemoryCategory::kActivations);
  }
  slots_.resize(num_slots_);
  for (Slot& slot : slots_) {
    slot.input = allocate_storage(BT * C, MemoryCategory::kActivations);
    for (RecomputeMode mode : recompute_)
      slot.blocks.push_back(allocate_block(mode, &recompute_scratch_));
    if (layout.stage().has_head) {
      slot.final_norm = allocate_storage(BT * C, MemoryCategory::kActivations);
      slot.final_rstd = allocate_floats(BT, MemoryCategory::kActivations);
      slot.logits = allocate_storage(BT * V, MemoryCategory::kActivations);
    }
  }
  residual_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
  norm_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
  qkv_gradient_ = allocate_storage(BT * Q, MemoryCategory::kWorkspace);
  attention_gradient_ = allocate_storage(BT * A, MemoryCategory::kWorkspace);
  gate_up_gradient_ = allocate_storage(BT * 2 * F, MemoryCategory::kWorkspace);
  hidden_gradient_ = allocate_storage(BT * F, MemoryCategory::kWorkspace);
  attention_scratch_ = allocate_floats(BT * layout.local_heads(), MemoryCategory::kWorkspace);
}

const void* LlamaStage::block_input(const Slot& slot, int local_layer) const {
  return local_layer == 0 ? slot.input : slot.blocks[local_layer - 1].output;
}

const void* LlamaStage::output(int slot) const {
  const Slot& s = slots_[slot];
  return s.blocks.empty() ? s.input : s.blocks.back().output;
}

void LlamaStage::attention_core_forward(const BlockActivations& a) {
  ops_.attention_forward(a.attention, a.logsumexp, a.qkv, batch_, layout_.config().seq_len,
                         layout_.local_heads(), layout_.local_kv_heads(), layout_.head_dim());
}

void LlamaStage::block_forward(int local_layer, const void* input, const BlockActivations& a) {
  const TransformerConfig& config = layout_.config();
  const LlamaBlockOffsets& w = layout_.block(local_layer);
  const int BT = batch_ * config.seq_len, C = config.d_model, Q = layout_.local_qkv_width(),
            A = layout_.local_attention_width(), F = layout_.local_ffn();
  const size_t BTC = static_cast<size_t>(BT) * C;
  ops_.rmsnorm_forward(a.attention_norm, a.attention_rstd, input, param(w.attention_norm), BT, C,
                       config.norm_epsilon);
  // f (identity forward) | column-parallel q, k, v | rotary | attention | row-parallel o | g
  ops_.linear_forward(a.qkv, a.attention_norm, param(w.qkv), nullptr, BT, C, Q);
  ops_.rope_forward(a.qkv, rotary_cos_, rotary_sin_, batch_, config.seq_len, layout_.local_heads(),
                    layout_.local_kv_heads(), layout_.head_dim());
  attention_core_forward(a);
  ops_.linear_forward(a.residual, a.attention, param(w.attention_out), nullptr, BT, A, C);
  tensor_parallel_.g_forward(a.residual, BTC);
  ops_.residual_forward(a.residual, a.residual, input, BTC);
  ops_.rmsnorm_forward(a.mlp_norm, a.mlp_rstd, a.residual, param(w.mlp_norm), BT, C,
                       config.norm_epsilon);
  // f | column-parallel gate and up | SwiGLU | row-parallel down | g
  ops_.linear_forward(a.gate_up, a.mlp_norm, param(w.gate_up), nullptr, BT, C, 2 * F);
  ops_.swiglu_forward(a.hidden, a.gate_up, BT, F);
  ops_.linear_forward(a.output, a.hidden, param(w.down), nullptr, BT, F, C);
  tensor_parallel_.g_forward(a.output, BTC);
  ops_.residual_forward(a.output, a.output, a.residual, BTC);
}

void LlamaStage::block_backward(int local_layer, const void* input, const BlockActivations& a) {
  const TransformerConfig& config = layout_.config();
  const LlamaBlockOffsets& w = layout_.block(local_layer);
  const int BT = batch_ * config.seq_len, C = config.d_model, Q = layout_.local_qkv_width(),
            A = layout_.local_attention_width(), F = layout_.local_ffn();
  const size_t BTC = static_cast<size_t>(BT) * C;
  void* dresidual = residual_gradient_;  // d(block output) on entry, d(input) on exit

  // MLP branch: output = residual + down(swiglu(gate_up(norm(residual)))).
  zero(hidden_gradient_, static_cast<size_t>(BT) * F);
  ops_.linear_backward(hidden_gradient_, grad(w.down), nullptr, dresidual, a.hidden, param(w.down),
                       BT, F, C);
  zero(gate_up_gradient_, static_cast<size_t>(BT) * 2 * F);
  ops_.swiglu_backward(gate_up_gradient_, a.gate_up, hidden_gradient_, BT, F);
  zero(norm_gradient_, BTC);
  ops_.linear_backward(norm_gradient_, grad(w.gate_up), nullptr, gate_up_gradient_, a.mlp_norm,
                       param(w.gate_up), BT, C, 2 * F);
  tensor_parallel_.f_backward(norm_gradient_, BTC);  // each rank held a partial input gradient
  ops_.rmsnorm_backward(dresidual, grad(w.mlp_norm), norm_gradient_, a.residual, param(w.mlp_norm),
                        a.mlp_rstd, BT, C);

  // Attention branch: residual = input + o(attention(rope(qkv(norm(input))))).
  zero(attention_gradient_, static_cast<size_t>(BT) * A);
  ops_.linear_backward(attention_gradient_, grad(w.attention_out), nullptr, dresidual, a.attention,
                       param(w.attention_out), BT, A, C);
  zero(qkv_gradient_, static_cast<size_t>(BT) * Q);
  ops_.attention_backward(qkv_gradient_, attention_scratch_, attention_gradient_, a.qkv,
                          a.attention, a.logsumexp, batch_, config.seq_len, layout_.local_heads(),
                          layout_.local_kv_heads(), layout_.head_dim());
  // d(rotated q, k) -> d(q, k), in place.
  ops_.rope_backward(qkv_gradient_, rotary_cos_, rotary_sin_, batch_, config.seq_len,
                     layout_.local_heads(), layout_.local_kv_heads(), layout_.head_dim());
  zero(norm_gradient_, BTC);
  ops_.linear_backward(norm_gradient_, grad(w.qkv), nullptr, qkv_gradient_, a.attention_norm,
                       param(w.qkv), BT, C, Q);
  tensor_parallel_.f_backward(norm_gradient_, BTC);
  ops_.rmsnorm_backward(dresidual, grad(w.attention_norm), norm_gradient_, input,
                        param(w.attention_norm), a.attention_rstd, BT, C);
}

void LlamaStage::forward(int slot_index, float loss_scale, bool training) {
  const TransformerConfig& config = layout_.config();
  const StageSpec& stage = layout_.stage();
  Slot& slot = slots_[slot_index];
  const int BT = batch_ * config.seq_len, C = config.d_model, V = layout_.local_vocab();
  if (stage.has_embedding)
    tensor_parallel_.vocab_parallel_embedding_forward(slot.input, tokens(slot_index),
                                                      param(layout_.token_embedding()), BT,
                                                      layout_.vocab_start(), V, C);
  // Under recompute some buffers are shared scratch that backward refills.
  for (int layer = 0; layer < stage.num_layers; ++layer)
    block_forward(layer, block_input(slot, layer), slot.blocks[layer]);
  if (stage.has_head) {
    ops_.rmsnorm_forward(slot.final_norm, slot.final_rstd, output(slot_index),
                         param(layout_.final_norm_weight()), BT, C, config.norm_epsilon);
    // f | the vocab-parallel head | vocab-parallel cross-entropy
    ops_.linear_forward(slot.logits, slot.final_norm, param(layout_.head_weight()), nullptr, BT, C,
                        V);
    tensor_parallel_.vocab_parallel_cross_entropy(
        losses(slot_index), training ? slot.logits : nullptr, slot.logits, targets(slot_index), BT,
        V, layout_.vocab_start(), loss_scale);
  }
}

void LlamaStage::backward(int slot_index, const std::function<void(size_t)>& gradients_final_from) {
  const TransformerConfig& config = layout_.config();
  const StageSpec& stage = layout_.stage();
  Slot& slot = slots_[slot_index];
  const int BT = batch_ * config.seq_len, C = config.d_model, V = layout_.local_vocab();
  const size_t BTC = static_cast<size_t>(BT) * C;
  if (stage.has_head) {
    // slot.logits holds d(loss)/d(logits) from the fused forward.
    zero(norm_gradient_, BTC);
    ops_.linear_backward(norm_gradient_, grad(layout_.head_weight()), nullptr, slot.logits,
                         slot.final_norm, param(layout_.head_weight()), BT, C, V);
    tensor_parallel_.f_backward(norm_gradient_, BTC);
    zero(residual_gradient_, BTC);
    ops_.rmsnorm_backward(residual_gradient_, grad(layout_.final_norm_weight()), norm_gradient_,
                          output(slot_index), param(layout_.final_norm_weight()), slot.final_rstd,
                          BT, C);
    // A tied head on a stage with the embedding is the embedding (offset 0).
    if (gradients_final_from) gradients_final_from(layout_.final_norm_weight());
  }
  // Otherwise residual_gradient_ already holds the received output gradient.
  for (int layer = stage.num_layers - 1; layer >= 0; --layer) {
    const void* input = block_input(slot, layer);
    BlockActivations acts = slot.blocks[layer];
    if (recompute_[layer] == RecomputeMode::Selective) {
      // The attention output and logsumexp (shared scratch) from the saved,
      // rotated qkv: bitwise what the forward computed.
      attention_core_forward(acts);
    } else if (recompute_[layer] == RecomputeMode::Full) {
      // Everything but the block output lives in the shared scratch; the
      // recomputed output is bitwise the saved one.
      void* saved_output = acts.output;
      acts = recompute_scratch_;
      acts.output = saved_output;
      block_forward(layer, input, acts);
    }
    block_backward(layer, input, acts);
    if (gradients_final_from) gradients_final_from(layout_.block(layer).attention_norm);
  }
  if (stage.has_embedding) {
    // Each rank scatters into its own vocabulary rows: no collective.
    ops_.token_embedding_backward(grad(layout_.token_embedding()), residual_gradient_,
                                  tokens(slot_index), BT, layout_.vocab_start(), V, C);
  }
  if (gradients_final_from) gradients_final_from(0);
}

}  // namespace paraplan
