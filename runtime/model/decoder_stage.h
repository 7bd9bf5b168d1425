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
// Weight gradients beside the backward (kernels/ops.h
// linear_weight_gradients; on CUDA a second stream): outside backward_input
// each linear layer's dW and bias gradient is queued, and joined before an
// op rewrites what it reads or reads what it writes: before each branch's
// norm backward (the residual gradient), before sequence_full_ is rewritten,
// before a recomputation, before the reduction hears gradients are final,
// and at the end of each backward (weight_gradient_overlap_test.cc holds the
// queued ones as late as that allows).
//
// Recompute modes per layer: none keeps everything; selective drops the
// attention core's output (rebuilt by attention_core_forward into shared
// scratch); full keeps only the block output and reruns block_forward into the
// shared scratch. Recomputation runs the same deterministic kernels on the
// same inputs, so the gradients are bitwise those of no recomputation.
//
// Sequence parallelism (tensor_parallel.h) changes only which rows a tensor
// holds: the stage input, the norms' outputs and statistics, the residual
// stream and its gradient, and the pipeline transfers hold the rank's
// local_rows() = B*T/t token shard; what sits between a column-parallel and
// a row-parallel linear (qkv, attention, MLP hidden) and the logits hold all
// B*T rows. The blocks go through column_parallel_input /
// column_parallel_input_gradient and row_parallel_output /
// reduce_row_parallel_output / row_parallel_output_gradient, which are f and
// g without it and the sequence-parallel gather and reduce-scatter with it;
// a norm's weight gradient goes through norm_weight_gradients, which sums the
// ranks' partial gradients over the group with it (these helpers, the rows
// and the gradient scratch: the base DecoderStageRegions,
// decoder_stage_regions.h).
//
// Context parallelism (context_shard.h) changes which tokens a rank holds:
// T / cp of every sequence (rows() = B * T / cp), at the positions
// position_runs() gives; attention goes through attention_forward /
// attention_backward, which run the ring (context_attention.h), as they do
// for document masking.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/model/decoder_layout.h"
#include "runtime/model/decoder_stage_regions.h"
#include "runtime/model/model_stage.h"
#include "runtime/model/tensor_parallel.h"

namespace paraplan {

template <typename Activations>
class DecoderStage : public DecoderStageRegions {
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
    current_slot_ = slot_index;
    if (stage.has_embedding) {
      embedding_forward(slot_index, slot.input);
      parameters_used(0);
    }
    // Forward writes every buffer; under recompute some of them are shared
    // scratch that backward refills, so no state is lost by overwriting it.
    for (int layer = 0; layer < stage.num_layers; ++layer) {
      current_layer_ = layer;
      block_forward(layer, block_input(slot, layer), slot.blocks[layer]);
      if (ends_zero_unit_forward(layer, stage.num_layers))
        parameters_used(decoder_layout_.block_start(zero_unit_first_layer(layer)));
    }
    if (stage.has_head) {
      const int BT = rows(), C = decoder_layout_.config().d_model,
                V = decoder_layout_.local_vocab();
      final_norm_forward(slot, output(slot_index));
      // f (identity forward; with sequence parallelism, the gather of the
      // norm's shards) | the vocab-parallel head | vocab-parallel cross-entropy
      ops_.linear_forward(slot.logits, column_parallel_input(slot.final_norm),
                          param(decoder_layout_.head_weight()), nullptr, BT, C, V);
      tensor_parallel_.vocab_parallel_cross_entropy(
          losses(slot_index), training ? slot.logits : nullptr, slot.logits, targets(slot_index),
          BT, V, decoder_layout_.vocab_start(), loss_scale, loss_accumulator());
      parameters_used(decoder_layout_.final_norm_weight());
    }
  }

  // The embedding (from 0), each group of layers_per_zero_unit blocks, and
  // the final norm with the head: what run_backward reports final, one by
  // one. A tied head on the embedding's stage writes the embedding's
  // gradient first.
  std::vector<GradientUnit> gradient_units() const override {
    const StageSpec& stage = decoder_layout_.stage();
    std::vector<GradientUnit> units{GradientUnit{}};
    for (int layer = 0; layer < stage.num_layers; ++layer)
      if (zero_unit_first_layer(layer) == layer &&
          decoder_layout_.block_start(layer) > units.back().begin)
        units.push_back({decoder_layout_.block_start(layer), false});
    if (stage.has_head && decoder_layout_.final_norm_weight() > units.back().begin)
      units.push_back({decoder_layout_.final_norm_weight(), false});
    if (stage.has_head && stage.has_embedding &&
        decoder_layout_.head_weight() < decoder_layout_.final_norm_weight())
      units.front().written_early = true;  // the head's weight is the embedding
    return units;
  }

  void backward(int slot_index,
                const std::function<void(size_t)>& gradients_final_from = {}) override {
    run_backward(slot_index, gradients_final_from);
  }

  void backward_input(int slot_index) override {
    refuse_backward_with_cache();
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
        // No input gradient: the write mode does not apply.
        ops_.linear_backward(nullptr, grad(step.dweight),
                             step.dbias == kNoBias ? nullptr : grad(step.dbias), step.dout,
                             step.inp, nullptr, step.rows, step.in_features, step.out_features,
                             kernels::GradientWrite::kAccumulate);
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
  // backward() as it always was, or, inside backward_input, with the weight
  // gradients recorded for backward_weight instead of computed.
  void run_backward(int slot_index, const std::function<void(size_t)>& gradients_final_from) {
    refuse_backward_with_cache();
    const StageSpec& stage = decoder_layout_.stage();
    Slot& slot = slots_[slot_index];
    current_slot_ = slot_index;
    recomputed_layer_ = false;
    if (stage.has_head) {
      const int BT = rows(), C = decoder_layout_.config().d_model,
                V = decoder_layout_.local_vocab();
      // slot.logits holds d(loss)/d(logits) from the fused forward; it and
      // the final norm's output stay in the slot until backward_weight.
      // norm_gradient_ starts a new gradient (overwritten); the final norm's
      // backward adds into residual_gradient_, zeroed first, as the norms
      // accumulate their input gradient.
      const void* final_norm = column_parallel_input(slot.final_norm);
      linear_backward(norm_gradient_, decoder_layout_.head_weight(), kNoBias, slot.logits,
                      final_norm, param(decoder_layout_.head_weight()), BT, C, V, kOverwrite,
                      /*dout_kept=*/true);
      const void* final_norm_gradient = column_parallel_input_gradient();
      zero(residual_gradient_, local_rows_ * C);
      final_norm_backward(slot, output(slot_index), final_norm_gradient);
      parameters_used(decoder_layout_.final_norm_weight());
      // A tied head on a stage with the embedding is the embedding (offset 0).
      gradients_final(decoder_layout_.final_norm_weight(), gradients_final_from);
    }
    // Otherwise residual_gradient_ holds the received output gradient, or
    // the slot's own buffer does: copied, as backward works in place.
    if (!stage.has_head && output_gradient_per_slot_)
      ops_.copy(residual_gradient_, slot.output_gradient,
                ops_.storage_bytes(local_rows_ * decoder_layout_.config().d_model));
    for (int layer = stage.num_layers - 1; layer >= 0; --layer) {
      const void* input = block_input(slot, layer);
      Activations acts = slot.blocks[layer];
      // Recomputation rewrites the shared scratch that the later block's
      // queued weight gradients read.
      if (recompute_[layer] != RecomputeMode::None) ops_.join_weight_gradients();
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
      if (zero_unit_first_layer(layer) == layer) {
        parameters_used(decoder_layout_.block_start(layer));
        gradients_final(decoder_layout_.block_start(layer), gradients_final_from);
      }
    }
    recomputed_layer_ = false;
    // Everything this backward queued is done before the stage's buffers
    // are handed on: the input gradient sent, the next micro-batch's
    // backward rewriting the scratch, the embedding's gradient (a tied
    // head's) added to.
    ops_.join_weight_gradients();
    if (stage.has_embedding) {
      if (deferring_ != nullptr) {
        // residual_gradient_ is also the gradient sent to no one here, but
        // later backwards overwrite it: backward_weight reads a copy.
        DeferredStep step;
        step.kind = DeferredStep::kEmbedding;
        step.dout = keep_copy(residual_gradient_, local_rows_ * decoder_layout_.config().d_model);
        deferring_->steps.push_back(step);
      } else {
        embedding_backward(slot_index, residual_gradient_);
      }
    }
    gradients_final(0, gradients_final_from);
  }

  // Rows: BT = B*T, local = local_rows() (BT, or BT/t with sequence parallelism).
  struct Slot {
    void* input = nullptr;  // [local, C]: the embedding output, or the received input
    std::vector<Activations> blocks;
    void* final_norm = nullptr;        // head: [local, C]
    float* final_norm_mean = nullptr;  // head: [local], when the final norm has a mean
    float* final_norm_rstd = nullptr;  // head: [local]
    void* logits = nullptr;            // head: [BT, V], overwritten by its gradient
    void* output_gradient = nullptr;   // no head: [local, C] received from the next stage
  };

  DecoderStage(const DecoderLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
               const ModelStageOptions& options)
      : DecoderStageRegions(layout, ops, memory, options),
        output_gradient_per_slot_(options.output_gradient_per_slot),
        context_ring_(options.context_ring) {}

  // A linear layer's backward (kernels/ops.h) in two halves, so a block can
  // place each where it overlaps best. The input gradient: dinp now, written
  // as dinp_write says.
  void linear_input_gradient(void* dinp, const void* dout, const void* weight, int rows,
                             int in_features, int out_features, kernels::GradientWrite dinp_write) {
    if (dinp == nullptr) return;
    ops_.linear_backward(dinp, nullptr, nullptr, dout, nullptr, weight, rows, in_features,
                         out_features, dinp_write);
  }
  // The weight and bias gradients (accumulated): queued beside the ops that
  // follow (ops.h linear_weight_gradients: the caller joins before anything
  // writes dout or inp), or inside backward_input recorded for
  // backward_weight, with copies of what later backwards overwrite: dout
  // (gradient scratch, unless dout_kept: the slot's own) and, in a
  // recomputed block or gathered by sequence parallelism, inp (shared
  // scratch). What a recorded step reads otherwise lives in the slot until
  // backward_weight.
  // dweight, dbias: the gradients' offsets (kNoBias: none), resolved by
  // grad() when the op is queued: a deferred one in backward_weight, as the
  // storage of a unit may move once it was released (ZeRO-2).
  void linear_weight_gradients(size_t dweight, size_t dbias, const void* dout, const void* inp,
                               int rows, int in_features, int out_features,
                               bool dout_kept = false) {
    if (deferring_ == nullptr) {
      ops_.linear_weight_gradients(grad(dweight), dbias == kNoBias ? nullptr : grad(dbias), dout,
                                   inp, rows, in_features, out_features);
      return;
    }
    DeferredStep step;
    step.kind = DeferredStep::kLinear;
    step.dweight = dweight;
    step.dbias = dbias;
    step.dout = dout_kept ? dout : keep_copy(dout, static_cast<size_t>(rows) * out_features);
    // The gathered input of a column-parallel linear (sequence parallelism)
    // lives in shared scratch too.
    const bool shared_input = recomputed_layer_ || (inp != nullptr && inp == sequence_full_);
    step.inp = shared_input ? keep_copy(inp, static_cast<size_t>(rows) * in_features) : inp;
    step.rows = rows;
    step.in_features = in_features;
    step.out_features = out_features;
    deferring_->steps.push_back(step);
  }
  // Both halves: the weight gradients first, so they wait for nothing the
  // input gradient's GEMM adds.
  void linear_backward(void* dinp, size_t dweight, size_t dbias, const void* dout, const void* inp,
                       const void* weight, int rows, int in_features, int out_features,
                       kernels::GradientWrite dinp_write, bool dout_kept = false) {
    linear_weight_gradients(dweight, dbias, dout, inp, rows, in_features, out_features, dout_kept);
    linear_input_gradient(dinp, dout, weight, rows, in_features, out_features, dinp_write);
  }

  // A backward op's input gradient that starts a new gradient (every block's
  // gradient scratch and norm_gradient_): written, not added to, so nothing
  // is zeroed first.
  static constexpr kernels::GradientWrite kOverwrite = kernels::GradientWrite::kOverwrite;

  // The recompute scratch, every slot's buffers (with the final norm's mean
  // when final_norm_mean) and the residual and norm gradients.
  void allocate_slots(bool final_norm_mean) {
    const size_t BT = static_cast<size_t>(rows()), C = decoder_layout_.config().d_model,
                 V = decoder_layout_.local_vocab(), local = local_rows_;
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
      slot.input = allocate_storage(local * C, MemoryCategory::kActivations);
      for (RecomputeMode mode : recompute_)
        slot.blocks.push_back(allocate_block(mode, &recompute_scratch_));
      if (!decoder_layout_.stage().has_head && output_gradient_per_slot_)
        slot.output_gradient = allocate_storage(local * C, MemoryCategory::kActivations);
      if (decoder_layout_.stage().has_head) {
        slot.final_norm = allocate_storage(local * C, MemoryCategory::kActivations);
        if (final_norm_mean)
          slot.final_norm_mean = allocate_floats(local, MemoryCategory::kActivations);
        slot.final_norm_rstd = allocate_floats(local, MemoryCategory::kActivations);
        slot.logits = allocate_storage(BT * V, MemoryCategory::kActivations);
      }
    }
    residual_gradient_ = allocate_storage(local * C, MemoryCategory::kWorkspace);
    norm_gradient_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
    if (tensor_parallel_.sequence_parallel()) {
      sequence_full_ = allocate_storage(BT * C, MemoryCategory::kWorkspace);
      norm_shard_gradient_ = allocate_storage(local * C, MemoryCategory::kWorkspace);
      norm_weight_gradient_ = allocate_storage(2 * C, MemoryCategory::kWorkspace);
    }
  }

  // ---- attention and positions, with or without context parallelism ----------------------
  // The architecture's constructor: the ring's buffers for this tensor
  // rank's heads, when the plan has context parallelism or document masking.
  void make_context_attention(int heads, int kv_heads, int head_dim) {
    if (key_value_cache_ != nullptr &&
        !key_value_cache_->fits(decoder_layout_.stage().num_layers, heads, kv_heads, head_dim))
      throw std::invalid_argument("model stage: the key/value cache is of another model's shape");
    if (context_.size == 1 && document_separator_ < 0) return;
    context_attention_ = std::make_unique<ContextAttention>(context_, context_ring_, ops_, memory_,
                                                            batch_, heads, kv_heads, head_dim);
  }
  // Attention of the micro-batch in flight (kernels/ops.h's layouts).
  void attention_forward(void* out, float* logsumexp, const void* qkv, int heads, int kv_heads,
                         int head_dim) {
    if (key_value_cache_ != nullptr) {
      key_value_cache_->attend(current_layer_, first_position_, sequence_length(), out, logsumexp,
                               qkv);
      return;
    }
    if (context_attention_) {
      context_attention_->forward(out, logsumexp, qkv, documents(current_slot_));
      return;
    }
    ops_.attention_forward(out, logsumexp, qkv, batch_, sequence_length(), heads, kv_heads,
                           head_dim);
  }
  // dqkv overwritten (scratch: B * H * T floats for the one-rank kernel).
  void attention_backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                          const void* out, const float* logsumexp, int heads, int kv_heads,
                          int head_dim) {
    if (context_attention_) {
      context_attention_->backward(dqkv, dout, qkv, out, logsumexp, documents(current_slot_));
      return;
    }
    ops_.attention_backward(dqkv, scratch, dout, qkv, out, logsumexp, batch_, sequence_length(),
                            heads, kv_heads, head_dim, kOverwrite);
  }
  // Calls apply(b, run) for each sequence b of the micro-batch and each run
  // of its tokens' positions (context_shard.h), or once with b = -1 and the
  // whole sequence when the rank holds it all (one call for the batch).
  template <typename Apply>
  void for_position_runs(Apply apply) const {
    if (context_.size == 1) {
      apply(-1, PositionRun{0, first_position_, context_.seq_len});
      return;
    }
    for (int b = 0; b < batch_; ++b)
      for (const PositionRun& run : context_.runs()) apply(b, run);
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
  // The block output [local, C], which every slot keeps (the next block's
  // input); the scratch has none (full recompute writes into the slot's).
  void own_output(Activations& acts, const Activations* shared) {
    acts.output = shared == nullptr
                      ? nullptr
                      : allocate_storage(local_rows_ * d_model(), MemoryCategory::kActivations);
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
  // Writes the stage input [local, C] from tokens(slot).
  virtual void embedding_forward(int slot, void* out) = 0;
  // Adds the stage input's gradient [BT, C] (residual_gradient_, or its copy
  // kept for backward_weight) to the embedding's gradients.
  virtual void embedding_backward(int slot, const void* input_gradient) = 0;
  // slot.final_norm (and its statistics) from the last block's output x, and
  // its backward: residual_gradient_ += from norm_gradient, the gradient of
  // slot.final_norm ([local, C] rows each).
  virtual void final_norm_forward(Slot& slot, const void* x) = 0;
  virtual void final_norm_backward(Slot& slot, const void* x, const void* norm_gradient) = 0;

  const bool output_gradient_per_slot_;
  std::vector<Slot> slots_;
  Activations recompute_scratch_;
  ContextRing context_ring_;
  std::unique_ptr<ContextAttention> context_attention_;
  int current_slot_ = 0;   // the micro-batch a forward or backward works on
  int current_layer_ = 0;  // the layer a forward runs (a key/value cache's)

 private:
  // What backward_weight does for a slot, recorded by backward_input in
  // backward's order: a linear layer's weight (and bias) gradient, the
  // embedding's, or the point from which gradients are final.
  struct DeferredStep {
    enum Kind { kLinear, kEmbedding, kFinalFrom } kind = kFinalFrom;
    size_t dweight = 0, dbias = kNoBias;  // gradient offsets
    const void* dout = nullptr;           // kEmbedding: the stage input's gradient
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
      ops_.join_weight_gradients();  // the reduction reads them
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
