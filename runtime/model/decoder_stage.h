// decoder_stage.h: what the stages of decoder-only language models share
// (gpt/gpt_stage.h, llama/llama_stage.h), written once: per micro-batch slot
// the stage input, each block's activations as the block's recompute mode
// keeps them, the final norm's output and statistics and the logits; forward
// (embedding, blocks, final norm, the vocab-parallel head and cross-entropy)
// and backward (head, blocks in reverse with recomputation, embedding) with
// the data-parallel reduction told which gradients are final.
//
// An architecture derives DecoderStage<Activations> with its block's
// activation struct (which has a `void* output`, the block output) and
// supplies: allocate_block (a block's buffers: all of them when `shared` is
// null, else those `mode` keeps, the rest taken from `shared`, the recompute
// scratch), allocate_attention_scratch (what selective recompute rebuilds),
// attention_core_forward (that rebuilding), block_forward, block_backward,
// embedding_forward and embedding_backward, final_norm_forward and
// final_norm_backward. Its constructor calls allocate_slots() once its own
// members are ready.
//
// Recompute modes per layer: none keeps everything; selective drops the
// attention core's output (rebuilt by attention_core_forward into shared
// scratch); full keeps only the block output and reruns block_forward into the
// shared scratch. Recomputation runs the same deterministic kernels on the
// same inputs, so the gradients are bitwise those of no recomputation.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "runtime/model/decoder_layout.h"
#include "runtime/model/model_stage.h"
#include "runtime/model/tensor_parallel.h"

namespace paraplan {

template <typename Activations>
class DecoderStage : public ModelStage {
 public:
  void* input(int slot) override { return slots_[slot].input; }
  const void* output(int slot) const override {
    const Slot& s = slots_[slot];
    return s.blocks.empty() ? s.input : s.blocks.back().output;
  }
  void* output_gradient() override { return residual_gradient_; }
  const void* input_gradient() const override { return residual_gradient_; }
  const void* logits(int slot) const override { return slots_[slot].logits; }

  void run_forward(int slot_index, float loss_scale, bool training) override {
    const StageSpec& stage = decoder_layout_.stage();
    Slot& slot = slots_[slot_index];
    if (stage.has_embedding) embedding_forward(slot_index, slot.input);
    // Forward writes every buffer; under recompute some of them are shared
    // scratch that backward refills, so no state is lost by overwriting it.
    for (int layer = 0; layer < stage.num_layers; ++layer)
      block_forward(layer, block_input(slot, layer), slot.blocks[layer]);
    if (stage.has_head) {
      const int BT = rows(), C = decoder_layout_.config().d_model,
                V = decoder_layout_.local_vocab();
      final_norm_forward(slot, output(slot_index));
      // f (identity forward) | the vocab-parallel head | vocab-parallel cross-entropy
      ops_.linear_forward(slot.logits, slot.final_norm, param(decoder_layout_.head_weight()),
                          nullptr, BT, C, V);
      tensor_parallel_.vocab_parallel_cross_entropy(
          losses(slot_index), training ? slot.logits : nullptr, slot.logits, targets(slot_index),
          BT, V, decoder_layout_.vocab_start(), loss_scale);
    }
  }

  void backward(int slot_index,
                const std::function<void(size_t)>& gradients_final_from = {}) override {
    const StageSpec& stage = decoder_layout_.stage();
    Slot& slot = slots_[slot_index];
    if (stage.has_head) {
      const int BT = rows(), C = decoder_layout_.config().d_model,
                V = decoder_layout_.local_vocab();
      const size_t BTC = static_cast<size_t>(BT) * C;
      // slot.logits holds d(loss)/d(logits) from the fused forward.
      zero(norm_gradient_, BTC);
      ops_.linear_backward(norm_gradient_, grad(decoder_layout_.head_weight()), nullptr,
                           slot.logits, slot.final_norm, param(decoder_layout_.head_weight()), BT,
                           C, V);
      tensor_parallel_.f_backward(norm_gradient_, BTC);
      zero(residual_gradient_, BTC);
      final_norm_backward(slot, output(slot_index));
      // A tied head on a stage with the embedding is the embedding (offset 0).
      if (gradients_final_from) gradients_final_from(decoder_layout_.final_norm_weight());
    }
    // Otherwise residual_gradient_ already holds the received output gradient.
    for (int layer = stage.num_layers - 1; layer >= 0; --layer) {
      const void* input = block_input(slot, layer);
      Activations acts = slot.blocks[layer];
      if (recompute_[layer] == RecomputeMode::Selective) {
        // The attention core's output from the saved inputs (shared scratch):
        // bitwise what the forward computed.
        attention_core_forward(acts);
      } else if (recompute_[layer] == RecomputeMode::Full) {
        // Everything but the block output lives in the shared scratch; the
        // recomputed output is bitwise the saved one, so it may overwrite it.
        void* saved_output = acts.output;
        acts = recompute_scratch_;
        acts.output = saved_output;
        block_forward(layer, input, acts);
      }
      block_backward(layer, input, acts);
      if (gradients_final_from) gradients_final_from(decoder_layout_.block_start(layer));
    }
    if (stage.has_embedding) embedding_backward(slot_index);
    if (gradients_final_from) gradients_final_from(0);
  }

 protected:
  struct Slot {
    void* input = nullptr;  // [BT, C]: the embedding output, or the received input
    std::vector<Activations> blocks;
    void* final_norm = nullptr;        // head: [BT, C]
    float* final_norm_mean = nullptr;  // head: [BT], when the final norm has a mean
    float* final_norm_rstd = nullptr;  // head: [BT]
    void* logits = nullptr;            // head: [BT, V], overwritten by its gradient
  };

  DecoderStage(const DecoderLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
               const ModelStageOptions& options)
      : ModelStage(layout, ops, memory, options,
                   static_cast<size_t>(options.micro_batch_size) * layout.config().seq_len *
                       layout.config().d_model),
        decoder_layout_(layout),
        tensor_parallel_(options.tensor_group, ops, memory,
                         layout.stage().has_head ? static_cast<size_t>(options.micro_batch_size) *
                                                       layout.config().seq_len
                                                 : 0) {}

  // B * T, the rows of every activation.
  int rows() const { return batch_ * decoder_layout_.config().seq_len; }

  // The recompute scratch, every slot's buffers (with the final norm's mean
  // when final_norm_mean) and the residual and norm gradients.
  void allocate_slots(bool final_norm_mean) {
    const size_t BT = static_cast<size_t>(rows()), C = decoder_layout_.config().d_model,
                 V = decoder_layout_.local_vocab();
    bool any_full = false, any_selective = false;
    for (RecomputeMode mode : recompute_) {
      any_full |= mode == RecomputeMode::Full;
      any_selective |= mode == RecomputeMode::Selective;
    }
    // Activations, like the kept ones: the planner counts the scratch as the
    // recompute working set.
    if (any_full) {
      recompute_scratch_ = allocate_block(RecomputeMode::None, nullptr);
    } else if (any_selective) {
      recompute_scratch_ = allocate_attention_scratch();
    }
    slots_.resize(num_slots_);
    for (Slot& slot : slots_) {
      slot.input = allocate_storage(BT * C, MemoryCategory::kActivations);
      for (RecomputeMode mode : recompute_)
        slot.blocks.push_back(allocate_block(mode, &recompute_scratch_));
      if (decoder_layout_.stage().has_head) {
        slot.final_norm = allocate_storage(BT * C, MemoryCategory::kActivations);
        if (final_norm_mean)
          slot.final_norm_mean = allocate_floats(BT, MemoryCategory::kActivations);
        slot.final_norm_rstd = allocate_floats(BT, MemoryCategory::kActivations);
        slot.logits = allocate_storage(BT * V, MemoryCategory::kActivations);
      }
    }
    residual_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
    norm_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
  }

  // For allocate_block: a field of a block's activations, allocated when the
  // block keeps it (`keep`) or when allocating the scratch itself (shared
  // null), else the shared scratch's.
  void own(Activations& acts, void* Activations::*field, size_t count, bool keep,
           const Activations* shared) {
    acts.*field = keep || shared == nullptr ? allocate_storage(count, MemoryCategory::kActivations)
                                            : shared->*field;
  }
  void own(Activations& acts, float* Activations::*field, size_t count, bool keep,
           const Activations* shared) {
    acts.*field = keep || shared == nullptr ? allocate_floats(count, MemoryCategory::kActivations)
                                            : shared->*field;
  }
  // The block output [BT, C], which every slot keeps (the next block's input);
  // the scratch has none (full recompute writes into the slot's).
  void own_output(Activations& acts, const Activations* shared) {
    acts.output =
        shared == nullptr
            ? nullptr
            : allocate_storage(static_cast<size_t>(rows()) * decoder_layout_.config().d_model,
                               MemoryCategory::kActivations);
  }

  const void* block_input(const Slot& slot, int local_layer) const {
    return local_layer == 0 ? slot.input : slot.blocks[local_layer - 1].output;
  }

  // ---- the architecture's part ----------------------------------------------------------
  virtual Activations allocate_block(RecomputeMode mode, const Activations* shared) = 0;
  virtual Activations allocate_attention_scratch() = 0;
  virtual void attention_core_forward(const Activations& acts) = 0;
  virtual void block_forward(int local_layer, const void* input, const Activations& acts) = 0;
  // residual_gradient_ holds d(block output) on entry and d(input) on exit.
  virtual void block_backward(int local_layer, const void* input, const Activations& acts) = 0;
  // Writes the stage input [BT, C] from tokens(slot).
  virtual void embedding_forward(int slot, void* out) = 0;
  // Adds residual_gradient_'s share to the embedding's gradients.
  virtual void embedding_backward(int slot) = 0;
  // slot.final_norm (and its statistics) from the last block's output x, and
  // its backward: residual_gradient_ += from norm_gradient_.
  virtual void final_norm_forward(Slot& slot, const void* x) = 0;
  virtual void final_norm_backward(Slot& slot, const void* x) = 0;

  const DecoderLayout& decoder_layout_;
  TensorParallel tensor_parallel_;
  std::vector<Slot> slots_;
  Activations recompute_scratch_;
  // Gradient scratch shared by all layers and slots: d(residual stream),
  // flowing backward through the blocks, and a norm's input gradient [BT, C].
  void* residual_gradient_ = nullptr;
  void* norm_gradient_ = nullptr;
};

}  // namespace paraplan
