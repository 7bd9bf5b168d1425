// llama_stage.cc: forward and backward of a Llama pipeline stage over the op
// set.
//
// Shapes: B micro-batch size, T sequence length, C d_model, D head_dim, and
// this rank's tensor-parallel shares: H query heads, Hkv KV heads, Q = (H +
// 2 Hkv) D the qkv width, A = H D the attention width, F ffn, V vocab.
// The block's gradient scratch starts a new gradient at each use, so the op
// that produces it overwrites it (GradientWrite::kOverwrite: nothing is
// zeroed), and residual_gradient_ carries d(residual stream) backward in
// place, each norm backward adding into it (llm.c's scheme, as gpt_stage.cc).
#include "runtime/model/llama/llama_stage.h"

#include "runtime/model/llama/rotary.h"

namespace paraplan {

LlamaBlockActivations LlamaStage::allocate_block(RecomputeMode mode, const Acts* shared) {
  const size_t BT = static_cast<size_t>(rows()), local = local_rows();
  const size_t C = layout_.config().d_model, Q = layout_.local_qkv_width(),
               A = layout_.local_attention_width(), F = layout_.local_ffn();
  Acts acts;
  // Full recompute keeps only the block output; the rest is the shared scratch.
  const bool keep = mode != RecomputeMode::Full;
  own(acts, &Acts::attention_norm, local * C, keep, shared);
  own(acts, &Acts::attention_rstd, local, keep, shared);
  own(acts, &Acts::qkv, BT * Q, keep, shared);
  own(acts, &Acts::residual, local * C, keep, shared);
  own(acts, &Acts::mlp_norm, local * C, keep, shared);
  own(acts, &Acts::mlp_rstd, local, keep, shared);
  own(acts, &Acts::gate_up, BT * 2 * F, keep, shared);
  own(acts, &Acts::hidden, BT * F, keep, shared);
  // The attention output and logsumexp only without recomputation: selective
  // recompute rebuilds them from qkv.
  const bool keep_attention = mode == RecomputeMode::None;
  own(acts, &Acts::attention, BT * A, keep_attention, shared);
  own(acts, &Acts::logsumexp, BT * layout_.local_heads(), keep_attention, shared);
  own_output(acts, shared);
  return acts;
}

LlamaBlockActivations LlamaStage::allocate_attention_scratch() {
  const size_t BT = static_cast<size_t>(rows());
  Acts acts;
  acts.attention =
      allocate_storage(BT * layout_.local_attention_width(), MemoryCategory::kActivations);
  acts.logsumexp = allocate_floats(BT * layout_.local_heads(), MemoryCategory::kActivations);
  return acts;
}

LlamaStage::LlamaStage(const LlamaLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
                       const ModelStageOptions& options)
    : DecoderStage(layout, ops, memory, options), layout_(layout) {
  const llama::RotaryTables tables = llama::rotary_tables(layout.config());
  rotary_cos_ = allocate_floats(tables.cos.size(), MemoryCategory::kWorkspace);
  rotary_sin_ = allocate_floats(tables.sin.size(), MemoryCategory::kWorkspace);
  ops_.copy_from_host(rotary_cos_, tables.cos.data(), tables.cos.size() * sizeof(float));
  ops_.copy_from_host(rotary_sin_, tables.sin.data(), tables.sin.size() * sizeof(float));
  allocate_slots(/*final_norm_mean=*/false);
  const size_t BT = static_cast<size_t>(rows());
  const size_t Q = layout.local_qkv_width(), A = layout.local_attention_width(),
               F = layout.local_ffn();
  qkv_gradient_ = allocate_storage(BT * Q, MemoryCategory::kWorkspace);
  attention_gradient_ = allocate_storage(BT * A, MemoryCategory::kWorkspace);
  gate_up_gradient_ = allocate_storage(BT * 2 * F, MemoryCategory::kWorkspace);
  hidden_gradient_ = allocate_storage(BT * F, MemoryCategory::kWorkspace);
  attention_scratch_ = allocate_floats(BT * layout.local_heads(), MemoryCategory::kWorkspace);
  make_context_attention(layout.local_heads(), layout.local_kv_heads(), layout.head_dim());
}

void LlamaStage::attention_core_forward(const Acts& a) {
  attention_forward(a.attention, a.logsumexp, a.qkv, layout_.local_heads(),
                    layout_.local_kv_heads(), layout_.head_dim());
}

void LlamaStage::block_forward(int local_layer, const void* input, const Acts& a) {
  const TransformerConfig& config = layout_.config();
  const LlamaBlockOffsets& w = layout_.block(local_layer);
  const int BT = rows(), C = config.d_model, Q = layout_.local_qkv_width(),
            A = layout_.local_attention_width(), F = layout_.local_ffn(), local = local_rows();
  ops_.rmsnorm_forward(a.attention_norm, a.attention_rstd, input, param(w.attention_norm), local, C,
                       config.norm_epsilon);
  // f (identity forward, or the sequence gather) | column-parallel q, k, v | rotary |
  // attention | row-parallel o | g (or the sequence reduce-scatter)
  ops_.linear_forward(a.qkv, column_parallel_input(a.attention_norm), param(w.qkv),
                      qkv_bias(w) == kNoBias ? nullptr : param(qkv_bias(w)), BT, C, Q);
  rotate(a.qkv, /*backward=*/false);
  attention_core_forward(a);
  row_parallel_residual(a.residual, a.attention, param(w.attention_out), nullptr, input, A);
  ops_.rmsnorm_forward(a.mlp_norm, a.mlp_rstd, a.residual, param(w.mlp_norm), local, C,
                       config.norm_epsilon);
  // f | column-parallel gate and up | SwiGLU | row-parallel down | g
  ops_.linear_forward(a.gate_up, column_parallel_input(a.mlp_norm), param(w.gate_up), nullptr, BT,
                      C, 2 * F);
  ops_.swiglu_forward(a.hidden, a.gate_up, BT, F);
  row_parallel_residual(a.output, a.hidden, param(w.down), nullptr, a.residual, F);
}

void LlamaStage::block_backward(int local_layer, const void* input, const Acts& a) {
  const TransformerConfig& config = layout_.config();
  const LlamaBlockOffsets& w = layout_.block(local_layer);
  const int BT = rows(), C = config.d_model, Q = layout_.local_qkv_width(),
            A = layout_.local_attention_width(), F = layout_.local_ffn(), local = local_rows();
  void* dresidual = residual_gradient_;  // d(block output) on entry, d(input) on exit

  // MLP branch: output = residual + down(swiglu(gate_up(norm(residual)))).
  // The joins and the order of the weight gradients as in GptStage: each
  // branch's norm backward adds into dresidual, which the row-parallel
  // layer's weight gradients read; the column-parallel layer's are queued
  // after it, beside the next branch.
  linear_backward(hidden_gradient_, w.down, kNoBias, row_parallel_output_gradient(), a.hidden,
                  param(w.down), BT, F, C, kOverwrite);
  ops_.swiglu_backward(gate_up_gradient_, a.gate_up, hidden_gradient_, BT, F, kOverwrite);
  linear_input_gradient(norm_gradient_, gate_up_gradient_, param(w.gate_up), BT, C, 2 * F,
                        kOverwrite);
  // Each rank held a partial input gradient.
  const void* mlp_norm_gradient = column_parallel_input_gradient();
  ops_.join_weight_gradients();
  norm_weight_gradients(w.mlp_norm, kNoBias, [&](void* dweight, void*) {
    ops_.rmsnorm_backward(dresidual, dweight, mlp_norm_gradient, a.residual, param(w.mlp_norm),
                          a.mlp_rstd, local, C);
  });
  linear_weight_gradients(w.gate_up, kNoBias, gate_up_gradient_, column_parallel_input(a.mlp_norm),
                          BT, C, 2 * F);

  // Attention branch: residual = input + o(attention(rope(qkv(norm(input))))).
  linear_backward(attention_gradient_, w.attention_out, kNoBias, row_parallel_output_gradient(),
                  a.attention, param(w.attention_out), BT, A, C, kOverwrite);
  attention_backward(qkv_gradient_, attention_scratch_, attention_gradient_, a.qkv, a.attention,
                     a.logsumexp, layout_.local_heads(), layout_.local_kv_heads(),
                     layout_.head_dim());
  // d(rotated q, k) -> d(q, k), in place.
  rotate(qkv_gradient_, /*backward=*/true);
  linear_input_gradient(norm_gradient_, qkv_gradient_, param(w.qkv), BT, C, Q, kOverwrite);
  const void* attention_norm_gradient = column_parallel_input_gradient();
  ops_.join_weight_gradients();
  norm_weight_gradients(w.attention_norm, kNoBias, [&](void* dweight, void*) {
    ops_.rmsnorm_backward(dresidual, dweight, attention_norm_gradient, input,
                          param(w.attention_norm), a.attention_rstd, local, C);
  });
  linear_weight_gradients(w.qkv, qkv_bias(w), qkv_gradient_,
                          column_parallel_input(a.attention_norm), BT, C, Q);
}

void LlamaStage::rotate(void* qkv, bool backward) {
  // Each token at its true position in the sequence (context parallelism:
  // this rank's runs of it).
  const int T = sequence_length(), H = layout_.local_heads(), Hkv = layout_.local_kv_heads(),
            D = layout_.head_dim();
  const size_t row_width = static_cast<size_t>(layout_.local_qkv_width()), half = D / 2;
  for_position_runs([&](int b, const PositionRun& run) {
    void* rows = kernels::element_at(
        qkv, (b < 0 ? 0 : static_cast<size_t>(b) * T + run.local_offset) * row_width, dtype_);
    const float* cos = rotary_cos_ + static_cast<size_t>(run.position) * half;
    const float* sin = rotary_sin_ + static_cast<size_t>(run.position) * half;
    const int batch = b < 0 ? batch_ : 1;
    if (backward)
      ops_.rope_backward(rows, cos, sin, batch, run.length, H, Hkv, D);
    else
      ops_.rope_forward(rows, cos, sin, batch, run.length, H, Hkv, D);
  });
}

void LlamaStage::embedding_forward(int slot, void* out) {
  vocab_parallel_embedding(slot, out, layout_.token_embedding());
}

void LlamaStage::embedding_backward(int slot, const void* input_gradient) {
  // Each rank scatters into its own vocabulary rows: no collective but, with
  // sequence parallelism, the gather of the input gradient's shards.
  ops_.token_embedding_backward(
      grad(layout_.token_embedding()), row_parallel_output_gradient(input_gradient), tokens(slot),
      rows(), layout_.vocab_start(), layout_.local_vocab(), layout_.config().d_model);
}

void LlamaStage::final_norm_forward(Slot& slot, const void* x) {
  ops_.rmsnorm_forward(slot.final_norm, slot.final_norm_rstd, x, param(layout_.final_norm_weight()),
                       local_rows(), layout_.config().d_model, layout_.config().norm_epsilon);
}

void LlamaStage::final_norm_backward(Slot& slot, const void* x, const void* norm_gradient) {
  norm_weight_gradients(layout_.final_norm_weight(), kNoBias, [&](void* dweight, void*) {
    ops_.rmsnorm_backward(residual_gradient_, dweight, norm_gradient, x,
                          param(layout_.final_norm_weight()), slot.final_norm_rstd, local_rows(),
                          layout_.config().d_model);
  });
}

}  // namespace paraplan
