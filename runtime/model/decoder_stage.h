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
// Split backward (backward_input, backward_weight): the input gradients, the
// tensor-parallel all-reduces and the norms' weight and bias gradients (one
// kernel computes them with the input gradient) in B; the linear layers'
// weight and bias gradients, and the embedding's, recorded in backward's
// order and run by W, so every gradient is accumulated in the order backward
// accumulates it (bitwise backward when the Ws run in micro-batch order).
//
// Recompute modes per layer: none keeps everything; selective drops the
// attention core's output (rebuilt by attention_core_forward into shared
// scratch); full keeps only the block output and reruns block_forward into the
// shared scratch. Recomputation runs the same deterministic kernels on the
// same inputs, so the gradients are bitwise those of no recomputation.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
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
  void* output_gradient(int slot) override {
    return output_gradient_per_slot_ ? slots_[slot].output_gradient : residual_gradient_;
  }
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
    run_backward(slot_index, gradients_final_from);
  }

  void backward_input(int slot_index) override {
    DeferredWeights& deferred = deferred_[slot_index];
    if (deferred.pending)
      throw std::logic_error("backward_input of slot " + std::to_string(slot_index) +
                             " before the backward_weight of its previous micro-batch");
    deferred.steps.clear();
    deferred.next_buffer = 0;
    // Copies from the pool: as many sets as micro-batches wait for their W
    // at once, not one per slot.
    if (!kept_pool_.empty()) {
      deferred.buffers = std::move(kept_pool_.back());
      kept_pool_.pop_back();
    }
    deferring_ = &deferred;
    run_backward(slot_index, {});
    deferring_ = nullptr;
    deferred.pending = true;
  }

  void backward_weight(int slot_index,
                       const std::function<void(size_t)>& gradients_final_from = {}) override {
    DeferredWeights& deferred = deferred_[slot_index];
    if (!deferred.pending)
      throw std::logic_error("backward_weight of slot " + std::to_string(slot_index) +
                             " without its backward_input");
    for (const DeferredStep& step : deferred.steps) {
      if (step.kind == DeferredStep::kLinear) {
        ops_.linear_backward(nullptr, step.dweight, step.dbias, step.dout, step.inp, nullptr,
                             step.rows, step.in_features, step.out_features);
      } else if (step.kind == DeferredStep::kEmbedding) {
        embedding_backward(slot_index, step.dout);
      } else if (gradients_final_from) {
        gradients_final_from(step.final_from);
      }
    }
    deferred.pending = false;
    kept_pool_.push_back(std::move(deferred.buffers));
    deferred.buffers.clear();
  }

 protected:
  struct Slot {
    void* input = nullptr;  // [BT, C]: the embedding output, or the received input
    std::vector<Activations> blocks;
    void* final_norm = nullptr;        // head: [BT, C]
    float* final_norm_mean = nullptr;  // head: [BT], when the final norm has a mean
    float* final_norm_rstd = nullptr;  // head: [BT]
    void* logits = nullptr;            // head: [BT, V], overwritten by its gradient
    void* output_gradient = nullptr;   // no head: [BT, C] received from the next stage
  };

  DecoderStage(const DecoderLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
               const ModelStageOptions& options)
      : ModelStage(layout, ops, memory, options,
                   static_cast<size_t>(options.micro_batch_size) * layout.config().seq_len *
                       layout.config().d_model),
        decoder_layout_(layout),
        output_gradient_per_slot_(options.output_gradient_per_slot),
        tensor_parallel_(options.tensor_group, ops, memory,
                         layout.stage().has_head ? static_cast<size_t>(options.micro_batch_size) *
                                                       layout.config().seq_len
                                                 : 0) {}

  // backward() as it always was, or, inside backward_input, with the weight
  // gradients recorded for backward_weight instead of computed.
  void run_backward(int slot_index, const std::function<void(size_t)>& gradients_final_from) {
    const StageSpec& stage = decoder_layout_.stage();
    Slot& slot = slots_[slot_index];
    recomputed_layer_ = false;
    if (stage.has_head) {
      const int BT = rows(), C = decoder_layout_.config().d_model,
                V = decoder_layout_.local_vocab();
      const size_t BTC = static_cast<size_t>(BT) * C;
      // slot.logits holds d(loss)/d(logits) from the fused forward; it and
      // the final norm's output stay in the slot until backward_weight.
      zero(norm_gradient_, BTC);
      linear_backward(norm_gradient_, grad(decoder_layout_.head_weight()), nullptr, slot.logits,
                      slot.final_norm, param(decoder_layout_.head_weight()), BT, C, V,
                      /*dout_kept=*/true);
      tensor_parallel_.f_backward(norm_gradient_, BTC);
      zero(residual_gradient_, BTC);
      final_norm_backward(slot, output(slot_index));
      // A tied head on a stage with the embedding is the embedding (offset 0).
      gradients_final(decoder_layout_.final_norm_weight(), gradients_final_from);
    }
    // Otherwise residual_gradient_ holds the received output gradient, or
    // the slot's own buffer does: copied, as backward works in place.
    if (!stage.has_head && output_gradient_per_slot_)
      ops_.copy(residual_gradient_, slot.output_gradient,
                ops_.storage_bytes(static_cast<size_t>(rows()) * decoder_layout_.config().d_model));
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
      recomputed_layer_ = recompute_[layer] != RecomputeMode::None;
      block_backward(layer, input, acts);
      gradients_final(decoder_layout_.block_start(layer), gradients_final_from);
    }
    recomputed_layer_ = false;
    if (stage.has_embedding) {
      if (deferring_ != nullptr) {
        // residual_gradient_ is also the gradient sent to no one here, but
        // later backwards overwrite it: backward_weight reads a copy.
        DeferredStep step;
        step.kind = DeferredStep::kEmbedding;
        step.dout = keep_copy(residual_gradient_,
                              static_cast<size_t>(rows()) * decoder_layout_.config().d_model);
        deferring_->steps.push_back(step);
      } else {
        embedding_backward(slot_index, residual_gradient_);
      }
    }
    gradients_final(0, gradients_final_from);
  }

  // A linear layer's backward (kernels/ops.h): dinp now; dweight and dbias
  // now, or inside backward_input recorded for backward_weight, with copies
  // of what later backwards overwrite: dout (gradient scratch, unless
  // dout_kept: the slot's own) and, in a recomputed block, inp (the shared
  // recompute scratch). What a recorded step reads otherwise lives in the
  // slot until backward_weight.
  void linear_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                       const void* weight, int rows, int in_features, int out_features,
                       bool dout_kept = false) {
    if (deferring_ == nullptr) {
      ops_.linear_backward(dinp, dweight, dbias, dout, inp, weight, rows, in_features,
                           out_features);
      return;
    }
    ops_.linear_backward(dinp, nullptr, nullptr, dout, inp, weight, rows, in_features,
                         out_features);
    DeferredStep step;
    step.kind = DeferredStep::kLinear;
    step.dweight = dweight;
    step.dbias = dbias;
    step.dout = dout_kept ? dout : keep_copy(dout, static_cast<size_t>(rows) * out_features);
    step.inp = recomputed_layer_ ? keep_copy(inp, static_cast<size_t>(rows) * in_features) : inp;
    step.rows = rows;
    step.in_features = in_features;
    step.out_features = out_features;
    deferring_->steps.push_back(step);
  }

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
    deferred_.resize(num_slots_);
    for (Slot& slot : slots_) {
      slot.input = allocate_storage(BT * C, MemoryCategory::kActivations);
      for (RecomputeMode mode : recompute_)
        slot.blocks.push_back(allocate_block(mode, &recompute_scratch_));
      if (!decoder_layout_.stage().has_head && output_gradient_per_slot_)
        slot.output_gradient = allocate_storage(BT * C, MemoryCategory::kActivations);
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
  // Adds the stage input's gradient [BT, C] (residual_gradient_, or its copy
  // kept for backward_weight) to the embedding's gradients.
  virtual void embedding_backward(int slot, const void* input_gradient) = 0;
  // slot.final_norm (and its statistics) from the last block's output x, and
  // its backward: residual_gradient_ += from norm_gradient_.
  virtual void final_norm_forward(Slot& slot, const void* x) = 0;
  virtual void final_norm_backward(Slot& slot, const void* x) = 0;

  const DecoderLayout& decoder_layout_;
  const bool output_gradient_per_slot_;
  TensorParallel tensor_parallel_;
  std::vector<Slot> slots_;
  Activations recompute_scratch_;
  // Gradient scratch shared by all layers and slots: d(residual stream),
  // flowing backward through the blocks, and a norm's input gradient [BT, C].
  void* residual_gradient_ = nullptr;
  void* norm_gradient_ = nullptr;

 private:
  // What backward_weight does for a slot, recorded by backward_input in
  // backward's order: a linear layer's weight (and bias) gradient, the
  // embedding's, or the point from which gradients are final.
  struct DeferredStep {
    enum Kind { kLinear, kEmbedding, kFinalFrom } kind = kFinalFrom;
    void* dweight = nullptr;
    void* dbias = nullptr;
    const void* dout = nullptr;  // kEmbedding: the stage input's gradient
    const void* inp = nullptr;
    int rows = 0, in_features = 0, out_features = 0;
    size_t final_from = 0;
  };
  struct DeferredWeights {
    bool pending = false;  // backward_input done, backward_weight not yet
    std::vector<DeferredStep> steps;
    // Copies kept for the steps: a set from the stage's pool (allocated
    // when the pool is empty, given back by backward_weight; every set has
    // the same sequence of sizes).
    std::vector<std::pair<void*, size_t>> buffers;
    size_t next_buffer = 0;
  };

  void gradients_final(size_t from, const std::function<void(size_t)>& gradients_final_from) {
    if (deferring_ != nullptr) {
      DeferredStep step;
      step.final_from = from;
      deferring_->steps.push_back(step);
    } else if (gradients_final_from) {
      gradients_final_from(from);
    }
  }

  const void* keep_copy(const void* source, size_t count) {
    std::vector<std::pair<void*, size_t>>& buffers = deferring_->buffers;
    const size_t index = deferring_->next_buffer++;
    if (index == buffers.size())
      buffers.emplace_back(allocate_storage(count, MemoryCategory::kActivations), count);
    if (buffers[index].second != count)
      throw std::logic_error("backward_input: the kept tensors changed size between micro-batches");
    ops_.copy(buffers[index].first, source, ops_.storage_bytes(count));
    return buffers[index].first;
  }

  std::vector<DeferredWeights> deferred_;  // per slot
  std::vector<std::vector<std::pair<void*, size_t>>> kept_pool_;
  DeferredWeights* deferring_ = nullptr;  // inside backward_input: the slot's
  bool recomputed_layer_ = false;         // the block in backward is recomputed
};

}  // namespace paraplan
