// gpt_stage.cc: forward and backward of a GPT-2 pipeline stage over the op set.
//
// Shapes: B micro-batch size, T sequence length, C d_model, and this rank's
// tensor-parallel shares: A = C/t attention width, H heads, F ffn, V vocab. The gradient
// scratch of a block (fch_gradient_, atty_gradient_, qkv_gradient_, norm_gradient_) starts a new
// gradient at each use, so the op that produces it overwrites it (GradientWrite::kOverwrite:
// nothing is zeroed); residual_gradient_ carries d(residual stream) backward in place: each
// residual branch's norm backward adds its input gradient into it (llm.c's scheme), and the weight
// gradients accumulate over micro-batches.
#include "runtime/model/gpt/gpt_stage.h"

namespace paraplan {

GptBlockActivations GptStage::allocate_block(RecomputeMode mode, const Acts* shared) {
  const size_t BT = static_cast<size_t>(rows()), local = local_rows();
  const size_t C = layout_.config().d_model, A = layout_.local_attention_width(),
               F = layout_.local_ffn();
  Acts acts;
  // Under full recompute a slot keeps only the block output (the next block's
  // input); everything else comes from the shared recompute scratch.
  const bool keep = mode != RecomputeMode::Full;
  own(acts, &Acts::ln1, local * C, keep, shared);
  own(acts, &Acts::ln1_mean, local, keep, shared);
  own(acts, &Acts::ln1_rstd, local, keep, shared);
  own(acts, &Acts::qkv, BT * 3 * A, keep, shared);
  own(acts, &Acts::residual2, local * C, keep, shared);
  own(acts, &Acts::ln2, local * C, keep, shared);
  own(acts, &Acts::ln2_mean, local, keep, shared);
  own(acts, &Acts::ln2_rstd, local, keep, shared);
  own(acts, &Acts::fch, BT * F, keep, shared);
  own(acts, &Acts::fch_gelu, BT * F, keep, shared);
  // The attention output and logsumexp ([B, H, T]) are kept only without
  // recomputation; selective recompute rebuilds them from qkv.
  const bool keep_attention = mode == RecomputeMode::None;
  own(acts, &Acts::atty, BT * A, keep_attention, shared);
  own(acts, &Acts::logsumexp, BT * layout_.local_heads(), keep_attention, shared);
  own_output(acts, shared);
  return acts;
}

GptBlockActivations GptStage::allocate_attention_scratch() {
  const size_t BT = static_cast<size_t>(rows());
  Acts acts;
  acts.atty = allocate_storage(BT * layout_.local_attention_width(), MemoryCategory::kActivations);
  acts.logsumexp = allocate_floats(BT * layout_.local_heads(), MemoryCategory::kActivations);
  return acts;
}

GptStage::GptStage(const GptLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
                   const ModelStageOptions& options)
    : DecoderStage(layout, ops, memory, options), layout_(layout) {
  allocate_slots(/*final_norm_mean=*/true);
  const size_t BT = static_cast<size_t>(rows());
  const size_t A = layout.local_attention_width(), F = layout.local_ffn();
  qkv_gradient_ = allocate_storage(BT * 3 * A, MemoryCategory::kWorkspace);
  atty_gradient_ = allocate_storage(BT * A, MemoryCategory::kWorkspace);
  fch_gradient_ = allocate_storage(BT * F, MemoryCategory::kWorkspace);
  attention_scratch_ = allocate_floats(BT * layout.local_heads(), MemoryCategory::kWorkspace);
  make_context_attention(layout.local_heads(), layout.local_heads(), layout.config().head_dim());
}

void GptStage::attention_core_forward(const Acts& a) {
  attention_forward(a.atty, a.logsumexp, a.qkv, layout_.local_heads(), layout_.local_heads(),
                    layout_.config().head_dim());
}

void GptStage::block_forward(int local_layer, const void* input, const Acts& a) {
  const TransformerConfig& config = layout_.config();
  const BlockOffsets& w = layout_.block(local_layer);
  const int BT = rows(), C = config.d_model, F = layout_.local_ffn(),
            A = layout_.local_attention_width(), local = local_rows();
  // Row-parallel biases: added by one tensor rank, before g's all-reduce.
  const bool adds_row_bias = tensor_parallel_.adds_row_parallel_bias();
  ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, input, param(w.ln1_weight),
                         param(w.ln1_bias), local, C, config.norm_epsilon);
  // f (identity forward, or the sequence gather) | column-parallel QKV | attention |
  // row-parallel projection | g (or the sequence reduce-scatter)
  ops_.linear_forward(a.qkv, column_parallel_input(a.ln1), param(w.qkv_weight), param(w.qkv_bias),
                      BT, C, 3 * A);
  attention_core_forward(a);
  row_parallel_residual(a.residual2, a.atty, param(w.attn_proj_weight),
                        adds_row_bias ? param(w.attn_proj_bias) : nullptr, input, A);
  ops_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(w.ln2_weight),
                         param(w.ln2_bias), local, C, config.norm_epsilon);
  // f | column-parallel up | GELU | row-parallel down | g
  ops_.linear_gelu_forward(a.fch, a.fch_gelu, column_parallel_input(a.ln2), param(w.mlp_up_weight),
                           param(w.mlp_up_bias), BT, C, F);
  row_parallel_residual(a.output, a.fch_gelu, param(w.mlp_down_weight),
                        adds_row_bias ? param(w.mlp_down_bias) : nullptr, a.residual2, F);
}

void GptStage::block_backward(int local_layer, const void* input, const Acts& a) {
  const TransformerConfig& config = layout_.config();
  const BlockOffsets& w = layout_.block(local_layer);
  const int BT = rows(), C = config.d_model, F = layout_.local_ffn(),
            A = layout_.local_attention_width(), local = local_rows();
  void* dresidual = residual_gradient_;  // d(block output) on entry, d(input) on exit

  // MLP branch: output = residual2 + down(gelu(up(ln2(residual2)))).
  // The down-projection's input gradient goes through GELU at once (one
  // pass, no tensor for the GELU output's gradient). Both halves read the
  // output gradient, gathered once with sequence parallelism (the planner
  // counts one gather).
  const void* mlp_output_gradient = row_parallel_output_gradient();
  linear_weight_gradients(w.mlp_down_weight, w.mlp_down_bias, mlp_output_gradient, a.fch_gelu, BT,
                          F, C);
  ops_.linear_backward_gelu(fch_gradient_, mlp_output_gradient, param(w.mlp_down_weight), a.fch, BT,
                            F, C);
  linear_input_gradient(norm_gradient_, fch_gradient_, param(w.mlp_up_weight), BT, C, F,
                        kOverwrite);
  // Each rank held a partial input gradient.
  const void* ln2_gradient = column_parallel_input_gradient();
  // ln2's backward adds into dresidual, which the down projection's weight
  // gradients read: they finish first. The up projection's are queued after
  // it, so they run beside the attention branch's input gradients.
  ops_.join_weight_gradients();
  norm_weight_gradients(w.ln2_weight, w.ln2_bias, [&](void* dweight, void* dbias) {
    ops_.layernorm_backward(dresidual, dweight, dbias, ln2_gradient, a.residual2,
                            param(w.ln2_weight), a.ln2_mean, a.ln2_rstd, local, C);
  });
  linear_weight_gradients(w.mlp_up_weight, w.mlp_up_bias, fch_gradient_,
                          column_parallel_input(a.ln2), BT, C, F);

  // Attention branch: residual2 = input + proj(attention(qkv(ln1(input)))).
  const void* attention_output_gradient = row_parallel_output_gradient();
  linear_backward(atty_gradient_, w.attn_proj_weight, w.attn_proj_bias, attention_output_gradient,
                  a.atty, param(w.attn_proj_weight), BT, A, C, kOverwrite);
  attention_backward(qkv_gradient_, attention_scratch_, atty_gradient_, a.qkv, a.atty, a.logsumexp,
                     layout_.local_heads(), layout_.local_heads(), config.head_dim());
  linear_input_gradient(norm_gradient_, qkv_gradient_, param(w.qkv_weight), BT, C, 3 * A,
                        kOverwrite);
  const void* ln1_gradient = column_parallel_input_gradient();
  // As for ln2: the projection's weight gradients read dresidual.
  ops_.join_weight_gradients();
  norm_weight_gradients(w.ln1_weight, w.ln1_bias, [&](void* dweight, void* dbias) {
    ops_.layernorm_backward(dresidual, dweight, dbias, ln1_gradient, input, param(w.ln1_weight),
                            a.ln1_mean, a.ln1_rstd, local, C);
  });
  linear_weight_gradients(w.qkv_weight, w.qkv_bias, qkv_gradient_, column_parallel_input(a.ln1), BT,
                          C, 3 * A);
}

void GptStage::embedding_forward(int slot, void* out) {
  const int C = layout_.config().d_model, T = sequence_length();
  vocab_parallel_embedding(slot, out, layout_.token_embedding(), [&](void* embedded) {
    // The learned positions of the tokens this rank holds.
    for_position_runs([&](int b, const PositionRun& run) {
      const size_t row = b < 0 ? 0 : static_cast<size_t>(b) * T + run.local_offset;
      ops_.position_embedding_forward(
          kernels::element_at(embedded, row * C, dtype_),
          kernels::element_at(param(layout_.position_embedding()),
                              static_cast<size_t>(run.position) * C, dtype_),
          b < 0 ? batch_ : 1, run.length, C);
    });
  });
}

void GptStage::embedding_backward(int slot, const void* input_gradient) {
  // The vocab-parallel embedding's backward needs no collective (each rank
  // scatters into its own rows) beyond, with sequence parallelism, the
  // gather of the input gradient's shards.
  const TransformerConfig& config = layout_.config();
  const void* output_gradient = row_parallel_output_gradient(input_gradient);
  ops_.token_embedding_backward(grad(layout_.token_embedding()), output_gradient, tokens(slot),
                                rows(), layout_.vocab_start(), layout_.local_vocab(),
                                config.d_model);
  const int C = config.d_model, T = sequence_length();
  for_position_runs([&](int b, const PositionRun& run) {
    const size_t row = b < 0 ? 0 : static_cast<size_t>(b) * T + run.local_offset;
    ops_.position_embedding_backward(
        kernels::element_at(grad(layout_.position_embedding()),
                            static_cast<size_t>(run.position) * C, dtype_),
        kernels::element_at(output_gradient, row * C, dtype_), b < 0 ? batch_ : 1, run.length, C);
  });
}

void GptStage::final_norm_forward(Slot& slot, const void* x) {
  ops_.layernorm_forward(slot.final_norm, slot.final_norm_mean, slot.final_norm_rstd, x,
                         param(layout_.final_norm_weight()), param(layout_.final_norm_bias()),
                         local_rows(), layout_.config().d_model, layout_.config().norm_epsilon);
}

void GptStage::final_norm_backward(Slot& slot, const void* x, const void* norm_gradient) {
  norm_weight_gradients(
      layout_.final_norm_weight(), layout_.final_norm_bias(), [&](void* dweight, void* dbias) {
        ops_.layernorm_backward(residual_gradient_, dweight, dbias, norm_gradient, x,
                                param(layout_.final_norm_weight()), slot.final_norm_mean,
                                slot.final_norm_rstd, local_rows(), layout_.config().d_model);
      });
}

}  // namespace paraplan
