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

void* GptStage::allocate_storage(size_t count, MemoryCategory category) {
  void* pointer = memory_.allocate(ops_.storage_bytes(count), category);
  allocations_.push_back(pointer);
  return pointer;
}

float* GptStage::allocate_floats(size_t count, MemoryCategory category) {
  void* pointer = memory_.allocate(count * sizeof(float), category);
  allocations_.push_back(pointer);
  return static_cast<float*>(pointer);
}

void GptStage::load_parameters(const float* host, size_t count) {
  if (count > buffer_elements_)
    throw std::invalid_argument("GptStage::load_parameters: more values than parameters");
  std::vector<char> converted(ops_.storage_bytes(count));
  kernels::host_from_float(converted.data(), host, dtype_, count);
  ops_.copy_from_host(parameters_, converted.data(), converted.size());
}

namespace {
void read_widened(kernels::Ops& ops, const void* source, float* host, size_t count) {
  std::vector<char> raw(ops.storage_bytes(count));
  ops.copy_to_host(raw.data(), source, raw.size());
  kernels::host_to_float(host, raw.data(), ops.storage_dtype(), count);
}
}  // namespace

void GptStage::read_parameters(float* host, size_t count) {
  read_widened(ops_, parameters_, host, std::min(count, buffer_elements_));
}

void GptStage::read_gradients(float* host, size_t count) {
  read_widened(ops_, gradients_, host, std::min(count, buffer_elements_));
}

GptStage::BlockActivations GptStage::allocate_block(RecomputeMode mode,
                                                    const BlockActivations* shared) {
  const GptConfig& config = layout_.config();
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
                   int micro_batch_size, int num_slots, std::vector<RecomputeMode> recompute,
                   Communicator* tensor_group, size_t buffer_elements)
    : layout_(layout),
      ops_(ops),
      dtype_(ops.storage_dtype()),
      memory_(memory),
      tensor_group_(tensor_group),
      batch_(micro_batch_size),
      num_slots_(num_slots),
      buffer_elements_(std::max(buffer_elements, layout.num_elements())),
      recompute_(std::move(recompute)) {
  if (layout.tensor_size() > 1 &&
      (tensor_group == nullptr || tensor_group->size() != layout.tensor_size()))
    throw std::invalid_argument("GptStage: a tensor-parallel layout needs its tensor group");
  const GptConfig& config = layout.config();
  const StageSpec& stage = layout.stage();
  if (static_cast<int>(recompute_.size()) != stage.num_layers)
    throw std::invalid_argument("GptStage: one recompute mode per layer is required");
  if (micro_batch_size < 1 || num_slots < 1)
    throw std::invalid_argument("GptStage: micro_batch_size and num_slots must be positive");
  const size_t BT = static_cast<size_t>(batch_) * config.seq_len;
  const size_t C = config.d_model, A = layout.local_attention_width(), F = layout.local_ffn(),
               V = layout.local_vocab();
  const size_t attention_rows = BT * layout.local_heads();  // [B, H, T]

  parameters_ = allocate_storage(buffer_elements_, MemoryCategory::kWeights);
  gradients_ = allocate_storage(buffer_elements_, MemoryCategory::kGradients);
  zero(parameters_, buffer_elements_);
  zero(gradients_, buffer_elements_);

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

  slots_.resize(num_slots);
  for (Slot& slot : slots_) {
    const size_t token_bytes = BT * sizeof(int32_t);
    slot.tokens =
        static_cast<int32_t*>(memory_.allocate(token_bytes, MemoryCategory::kActivations));
    slot.targets =
        static_cast<int32_t*>(memory_.allocate(token_bytes, MemoryCategory::kActivations));
    allocations_.push_back(slot.tokens);
    allocations_.push_back(slot.targets);
    slot.input = allocate_storage(BT * C, MemoryCategory::kActivations);
    for (RecomputeMode mode : recompute_)
      slot.blocks.push_back(allocate_block(mode, &recompute_scratch_));
    if (stage.has_head) {
      slot.final_norm = allocate_storage(BT * C, MemoryCategory::kActivations);
      slot.final_norm_mean = allocate_floats(BT, MemoryCategory::kActivations);
      slot.final_norm_rstd = allocate_floats(BT, MemoryCategory::kActivations);
      slot.logits = allocate_storage(BT * V, MemoryCategory::kActivations);
      slot.losses = allocate_floats(BT, MemoryCategory::kActivations);
    }
  }
  residual_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
  norm_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
  qkv_gradient_ = allocate_storage(BT * 3 * A, MemoryCategory::kWorkspace);
  atty_gradient_ = allocate_storage(BT * A, MemoryCategory::kWorkspace);
  fch_gradient_ = allocate_storage(BT * F, MemoryCategory::kWorkspace);
  fch_gelu_gradient_ = allocate_storage(BT * F, MemoryCategory::kWorkspace);
  attention_scratch_ = allocate_floats(attention_rows, MemoryCategory::kWorkspace);
  if (stage.has_head && layout.tensor_size() > 1) {
    row_max_ = allocate_floats(BT, MemoryCategory::kWorkspace);
    row_exp_sum_ = allocate_floats(BT, MemoryCategory::kWorkspace);
    row_target_logit_ = allocate_floats(BT, MemoryCategory::kWorkspace);
  }
}

void GptStage::tensor_all_reduce(void* data, size_t count) {
  if (layout_.tensor_size() > 1) tensor_group_->all_reduce(data, count, dtype_, ReduceOp::kSum);
}

GptStage::~GptStage() {
  for (void* pointer : allocations_) memory_.release(pointer);
}

const void* GptStage::block_input(const Slot& slot, int local_layer) const {
  return local_layer == 0 ? slot.input : slot.blocks[local_layer - 1].output;
}

const void* GptStage::output(int slot) const {
  const Slot& s = slots_[slot];
  return s.blocks.empty() ? s.input : s.blocks.back().output;
}

void GptStage::block_forward(int local_layer, const void* input, const BlockActivations& a) {
  const GptConfig& config = layout_.config();
  const BlockOffsets& w = layout_.block(local_layer);
  const int BT = batch_ * config.seq_len, C = config.d_model, F = layout_.local_ffn(),
            A = layout_.local_attention_width();
  const size_t BTC = static_cast<size_t>(BT) * C;
  // Row-parallel biases: added by one tensor rank, before the all-reduce.
  const bool adds_row_bias = layout_.tensor_rank() == 0;
  ops_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, input, param(w.ln1_weight),
                         param(w.ln1_bias), BT, C, config.layernorm_epsilon);
  ops_.linear_forward(a.qkv, a.ln1, param(w.qkv_weight), param(w.qkv_bias), BT, C, 3 * A);
  ops_.attention_forward(a.atty, a.logsumexp, a.qkv, batch_, config.seq_len, layout_.local_heads(),
                         config.head_dim());
  // residual2 holds the projection first, then input + projection.
  ops_.linear_forward(a.residual2, a.atty, param(w.attn_proj_weight),
                      adds_row_bias ? param(w.attn_proj_bias) : nullptr, BT, A, C);
  tensor_all_reduce(a.residual2, BTC);
  ops_.residual_forward(a.residual2, a.residual2, input, BTC);
  ops_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(w.ln2_weight),
                         param(w.ln2_bias), BT, C, config.layernorm_epsilon);
  ops_.linear_forward(a.fch, a.ln2, param(w.mlp_up_weight), param(w.mlp_up_bias), BT, C, F);
  ops_.gelu_forward(a.fch_gelu, a.fch, static_cast<size_t>(BT) * F);
  ops_.linear_forward(a.output, a.fch_gelu, param(w.mlp_down_weight),
                      adds_row_bias ? param(w.mlp_down_bias) : nullptr, BT, F, C);
  tensor_all_reduce(a.output, BTC);
  ops_.residual_forward(a.output, a.output, a.residual2, BTC);
}

void GptStage::block_backward(int local_layer, const void* input, const BlockActivations& a) {
  const GptConfig& config = layout_.config();
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
  tensor_all_reduce(norm_gradient_, BTC);  // f: each rank held a partial input gradient
  ops_.layernorm_backward(dresidual, grad(w.ln2_weight), grad(w.ln2_bias), norm_gradient_,
                          a.residual2, param(w.ln2_weight), a.ln2_mean, a.ln2_rstd, BT, C);

  // Attention branch: residual2 = input + proj(attention(qkv(ln1(input)))).
  zero(atty_gradient_, BTA);
  ops_.linear_backward(atty_gradient_, grad(w.attn_proj_weight), grad(w.attn_proj_bias), dresidual,
                       a.atty, param(w.attn_proj_weight), BT, A, C);
  zero(qkv_gradient_, BTA * 3);
  ops_.attention_backward(qkv_gradient_, attention_scratch_, atty_gradient_, a.qkv, a.atty,
                          a.logsumexp, batch_, config.seq_len, layout_.local_heads(),
                          config.head_dim());
  zero(norm_gradient_, BTC);
  ops_.linear_backward(norm_gradient_, grad(w.qkv_weight), grad(w.qkv_bias), qkv_gradient_, a.ln1,
                       param(w.qkv_weight), BT, C, 3 * A);
  tensor_all_reduce(norm_gradient_, BTC);
  ops_.layernorm_backward(dresidual, grad(w.ln1_weight), grad(w.ln1_bias), norm_gradient_, input,
                          param(w.ln1_weight), a.ln1_mean, a.ln1_rstd, BT, C);
}

void GptStage::head_loss(Slot& slot, bool training, float loss_scale) {
  const int BT = batch_ * layout_.config().seq_len, V = layout_.local_vocab();
  void* dlogits = training ? slot.logits : nullptr;
  if (layout_.tensor_size() == 1) {
    ops_.softmax_cross_entropy(slot.losses, dlogits, slot.logits, slot.targets, BT, V, loss_scale);
    return;
  }
  // Vocab-parallel: combine each shard's row statistics across the group.
  ops_.cross_entropy_shard_stats(row_max_, row_target_logit_, slot.logits, slot.targets, BT, V,
                                 layout_.vocab_start());
  tensor_group_->all_reduce(row_max_, BT, ReduceOp::kMax);
  ops_.cross_entropy_shard_exp_sums(row_exp_sum_, slot.logits, row_max_, BT, V);
  tensor_group_->all_reduce(row_exp_sum_, BT, ReduceOp::kSum);
  tensor_group_->all_reduce(row_target_logit_, BT, ReduceOp::kSum);
  ops_.cross_entropy_shard_finish(slot.losses, dlogits, slot.logits, slot.targets, row_max_,
                                  row_exp_sum_, row_target_logit_, BT, V, layout_.vocab_start(),
                                  loss_scale);
}

void GptStage::forward(int slot_index, float loss_scale, bool training) {
  const GptConfig& config = layout_.config();
  const StageSpec& stage = layout_.stage();
  Slot& slot = slots_[slot_index];
  const int BT = batch_ * config.seq_len, C = config.d_model, V = layout_.local_vocab();

  if (stage.has_embedding) {
    ops_.token_embedding_forward(slot.input, slot.tokens, param(layout_.token_embedding()), BT,
                                 layout_.vocab_start(), V, C);
    tensor_all_reduce(slot.input, static_cast<size_t>(BT) * C);  // vocab-parallel lookup
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
                           param(layout_.final_norm_bias()), BT, C, config.layernorm_epsilon);
    ops_.linear_forward(slot.logits, slot.final_norm, param(layout_.head_weight()), nullptr, BT, C,
                        V);
    head_loss(slot, training, loss_scale);
  }
}

void GptStage::backward(int slot_index, const std::function<void(size_t)>& gradients_final_from) {
  const GptConfig& config = layout_.config();
  const StageSpec& stage = layout_.stage();
  Slot& slot = slots_[slot_index];
  const int BT = batch_ * config.seq_len, C = config.d_model, V = layout_.local_vocab();

  if (stage.has_head) {
    // slot.logits holds d(loss)/d(logits) from the fused forward.
    zero(norm_gradient_, static_cast<size_t>(BT) * C);
    ops_.linear_backward(norm_gradient_, grad(layout_.head_weight()), nullptr, slot.logits,
                         slot.final_norm, param(layout_.head_weight()), BT, C, V);
    tensor_all_reduce(norm_gradient_, static_cast<size_t>(BT) * C);
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
                               layout_.local_heads(), config.head_dim());
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
    ops_.token_embedding_backward(grad(layout_.token_embedding()), residual_gradient_, slot.tokens,
                                  BT, layout_.vocab_start(), V, C);
    ops_.position_embedding_backward(grad(layout_.position_embedding()), residual_gradient_, batch_,
                                     config.seq_len, C);
  }
  if (gradients_final_from) gradients_final_from(0);
}

double GptStage::loss_sum(int slot_index) {
  const int BT = batch_ * layout_.config().seq_len;
  std::vector<float> losses(BT);
  ops_.copy_to_host(losses.data(), slots_[slot_index].losses, BT * sizeof(float));
  double sum = 0;
  for (float loss : losses) sum += loss;
  return sum;
}

}  // namespace paraplan
