// model_stage.h: one pipeline stage of a model, of any architecture: the one
// interface the executor (pipeline/), the optimizer (parallel/), checkpoints,
// replay, profile and sampling use. An architecture is a ParameterLayout and
// a ModelStage of its own (gpt/), made by architecture.h; nothing outside
// model/ names one.
//
// The stage owns one contiguous parameter buffer and one gradient buffer laid
// out by its layout, and activation storage for `num_slots` micro-batches in
// flight (a 1F1B stage keeps several; the executor maps micro-batch -> slot).
// Per layer, the recompute mode decides what a slot keeps for backward
// (none, selective: the attention core recomputed, full: the block
// recomputed); recomputation runs the same deterministic kernels on the same
// inputs, so the gradients are bitwise those of no recomputation.
//
// Storage tensors (parameters, gradients, activations, logits) are void*, of
// dtype() (the ops' storage dtype); statistics and losses are fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/context_attention.h"
#include "runtime/model/context_shard.h"
#include "runtime/model/gradient_storage.h"
#include "runtime/model/key_value_cache.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/model/model_config.h"
#include "runtime/model/parameter_layout.h"

namespace paraplan {

struct ModelStageOptions {
  int micro_batch_size = 1;
  int num_slots = 1;
  std::vector<RecomputeMode> recompute;  // one per layer of the stage
  // The tensor-parallel group (null when the layout's tensor_size is 1).
  Communicator* tensor_group = nullptr;
  // Megatron's sequence parallelism over the tensor group (tensor_size > 1;
  // ignored otherwise): the norm and residual regions and the pipeline
  // transfers hold B*T / tensor_size of the micro-batch's tokens
  // (tensor_parallel.h).
  bool sequence_parallel = false;
  // >= layout.num_elements() sizes the parameter and gradient buffers
  // (ZeRO-1 pads them to a multiple of its group size); 0 = exact.
  size_t buffer_elements = 0;
  // A stage without the head: receive each slot's output gradient into a
  // buffer of its own (schedules that receive a gradient while another waits
  // for its backward, or while an input gradient waits to be sent:
  // interleaved 1F1B), at one activation per slot; else into the buffer the
  // input gradient is computed in, one at a time.
  bool output_gradient_per_slot = false;
  // A chunk of a rank holding several (chunked_stage.h): its parameters and
  // gradients live in the rank's buffers at these addresses (its range);
  // null: the stage allocates its own.
  void* parameters = nullptr;
  void* gradients = nullptr;
  // No gradient buffer: the gradients live in a GradientStorage installed
  // before the first backward (ZeRO-2); gradients() is null.
  bool gradients_elsewhere = false;
  // No parameter buffer: the parameters live in a ParameterStorage
  // installed before the first forward (ZeRO-3); parameters() is null.
  bool parameters_elsewhere = false;
  // ZeRO-2 and 3's units (plan.fbs, Zero.layers_per_unit): the stage's
  // layers in groups of this many, each gathered, released and
  // reduce-scattered as one, so a group is reported used and final once.
  int layers_per_zero_unit = 1;
  // Context parallelism (context_shard.h): this rank's place in its
  // context-parallel group (seq_len is taken from the layout), and the ring
  // its attention passes key/value blocks around (context_attention.h).
  ContextShard context = {};
  ContextRing context_ring = {};
  // Document masking (plan.fbs, Data.document_separator): >= 0, attention
  // stays within the documents this token ends.
  int32_t document_separator = -1;
  // Decoding (key_value_cache.h): sequences of this many tokens (0: the
  // layout's seq_len), each at first_position() of a text whose keys and
  // values the cache holds. Micro-batch 1, one rank, forwards only.
  int sequence_length = 0;
  KeyValueCache* key_value_cache = nullptr;
};

// The tokens of each sequence a stage built with these options holds, before
// context parallelism divides them.
int stage_sequence_length(const ParameterLayout& layout, const ModelStageOptions& options);

class ModelStage {
 public:
  virtual ~ModelStage();
  ModelStage(const ModelStage&) = delete;
  ModelStage& operator=(const ModelStage&) = delete;

  const ParameterLayout& layout() const { return layout_; }
  bool has_embedding() const { return layout_.stage().has_embedding; }
  bool has_head() const { return layout_.stage().has_head; }
  int micro_batch_size() const { return batch_; }
  int num_slots() const { return num_slots_; }
  kernels::DType dtype() const { return dtype_; }

  // Parameter and gradient buffers: buffer_elements() of dtype(), backend
  // memory (gradients: null with options.gradients_elsewhere).
  void* parameters() { return parameters_; }
  void* gradients() { return gradients_; }
  // Where gradients go from now on (ZeRO-2): this stage's offset o is the
  // storage's base + o. A chunked stage passes each chunk its range.
  virtual void use_gradient_storage(GradientStorage* storage, size_t base = 0) {
    gradient_storage_ = storage;
    gradient_base_ = base;
  }
  // Where parameters come from from now on (ZeRO-3), as use_gradient_storage.
  virtual void use_parameter_storage(ParameterStorage* storage, size_t base = 0) {
    parameter_storage_ = storage;
    parameter_base_ = base;
  }
  // The units backward finishes the gradients in, in buffer order, the
  // first at 0 (offsets into this stage's buffer): the whole buffer as one,
  // unless the architecture says better.
  virtual std::vector<GradientUnit> gradient_units() const { return {GradientUnit{}}; }
  size_t buffer_elements() const { return buffer_elements_; }
  // Sets `count` parameters from buffer element `first` on from fp32 host
  // values (rounded to dtype()), and reads the first `count` back widened:
  // for initialization, checkpoints and tests.
  void load_parameters(const float* host, size_t count, size_t first = 0);
  void read_parameters(float* host, size_t count);
  void read_gradients(float* host, size_t count);

  // Whether a slot's forward and backward queue the same device work on the
  // same buffers every time, and nothing else, so the ops may record one and
  // replay it (kernels/ops.h run_recorded): no collective inside (tensor or
  // context parallelism), no storage that moves (ZeRO-2 and 3), no
  // per-micro-batch documents table, no key/value cache (positions move).
  bool compute_replays() const {
    return context_.size == 1 && document_separator_ < 0 && gradient_storage_ == nullptr &&
           parameter_storage_ == nullptr && key_value_cache_ == nullptr && !computes_collectives();
  }

  // Tokens of each sequence this rank holds: seq_len, or seq_len / cp with
  // context parallelism (context_shard.h).
  int sequence_length() const { return context_.local_length(); }
  const ContextShard& context() const { return context_; }
  // Decoding: the position in the text of the sequence's first token (0
  // otherwise); its tokens lie at [position, position + sequence_length()).
  void set_first_position(int position);
  int first_position() const { return first_position_; }
  // Puts a micro-batch of whole sequences (host [B, seq_len] tokens and
  // targets) into a slot: this rank's tokens of them, and with document
  // masking their documents. Queued (the host arrays are free on return).
  void load_micro_batch(int slot, const int32_t* tokens, const int32_t* targets);
  // A slot's tokens and targets ([B, sequence_length()] each, backend
  // memory); the first stage reads tokens, the last stage reads targets.
  int32_t* tokens(int slot) { return slot_tokens_[slot].tokens; }
  int32_t* targets(int slot) { return slot_tokens_[slot].targets; }
  // With document masking, a slot's document numbers [B, seq_len] of the
  // whole sequences (backend memory); null without.
  const int32_t* documents(int slot) const { return slot_tokens_[slot].documents; }
  // Elements of dtype() one pipeline transfer moves: an activation [B, T, C]
  // or its gradient (with sequence parallelism, this rank's [B*T/t, C] shard).
  size_t activation_elements() const { return activation_elements_; }
  // Where a stage without the embedding receives its input [B, T, C] (with
  // sequence parallelism, in this and the next three: the rank's token shard).
  virtual void* input(int slot) = 0;
  // A stage without the head: its output [B, T, C] after forward(slot).
  virtual const void* output(int slot) const = 0;
  // A stage without the head: where the gradient of the slot's output is
  // received before backward(slot): the slot's own buffer, or with
  // output_gradient_per_slot false one buffer for all slots (the input
  // gradient's: receive only after the last input gradient was sent).
  virtual void* output_gradient(int slot) = 0;
  // A stage without the embedding: the gradient of its input after backward()
  // (or backward_input()), until the next backward.
  virtual const void* input_gradient() const = 0;

  // Forward of the micro-batch in slot. On the last stage this also computes
  // the per-token losses, adds their sum to the stage's loss accumulator (on
  // the device: nothing waits), and, when training, the logits' gradient
  // scaled by loss_scale (the fused softmax + cross-entropy), ready for
  // backward().
  void forward(int slot, float loss_scale, bool training = true);
  // Backward of the micro-batch in slot, accumulating into gradients().
  // gradients_final_from, when set, is told as backward passes each part of
  // the stage that no gradient at buffer offset >= its argument will be
  // written again by this backward (the data-parallel reduction starts those
  // buckets early; parallel/distributed_optimizer.h). Layouts put the
  // embeddings first and the head last, so the offsets fall.
  virtual void backward(int slot, const std::function<void(size_t)>& gradients_final_from = {}) = 0;
  // The same backward split in two, for schedules that defer the weight
  // gradients (zero-bubble): backward_input(slot) computes everything the
  // previous stage needs (input_gradient(), the norms' parameter gradients,
  // the tensor-parallel all-reduces) and keeps what the weight gradients
  // read; backward_weight(slot) later accumulates the linear layers' weight
  // and bias gradients and the embedding's, in backward's order, and tells
  // gradients_final_from as backward would. backward_input then
  // backward_weight is bitwise backward; other slots' backward_inputs may run
  // in between (the slot's activations must not be reused before its
  // backward_weight).
  virtual void backward_input(int slot) = 0;
  virtual void backward_weight(int slot,
                               const std::function<void(size_t)>& gradients_final_from = {}) = 0;

  // A rank holding several model chunks (virtual stages of an interleaved
  // schedule, chunked_stage.h): each chunk is a stage of its own whose
  // parameters and gradients are the range of this stage's buffers from
  // chunk_offset(c); the executor runs each instruction on its chunk. One
  // chunk, the stage itself, otherwise.
  virtual int num_chunks() const { return 1; }
  virtual ModelStage& chunk(int /*c*/) { return *this; }
  virtual size_t chunk_offset(int /*c*/) const { return 0; }

  // Last stage: the sum of the per-token losses of every forward since the
  // last call (in double, micro-batch by micro-batch in forward order), read
  // back once (one host synchronization), and the accumulator reset. 0 on
  // other stages, without synchronizing.
  double take_loss_sum();
  // Last stage after forward(slot, ...), until the slot's next forward: its
  // per-token losses [B, sequence_length()] (this rank's tokens,
  // context_shard.h), fp32 in backend memory.
  const float* token_losses(int slot) const;
  // Last stage after forward(slot, _, false): the logits [B, T, V/t] of
  // this rank's vocabulary shard.
  virtual const void* logits(int slot) const = 0;

 protected:
  // The architecture's forward; its loss op adds the slot's losses to
  // loss_accumulator() (Ops::softmax_cross_entropy's loss_sum).
  virtual void run_forward(int slot, float loss_scale, bool training) = 0;
  // Last stage: the one double of backend memory the losses are summed into.
  double* loss_accumulator() { return loss_accumulator_; }

  // Allocates the parameter and gradient buffers (zeroed), each slot's tokens
  // and targets, and on the last stage each slot's per-token losses.
  ModelStage(const ParameterLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
             const ModelStageOptions& options, size_t activation_elements);

  // Whether forward or backward calls a collective (the safe answer unless
  // an architecture knows better).
  virtual bool computes_collectives() const { return true; }

  // Backend memory for count elements of dtype() (storage) or fp32, released
  // with the stage.
  void* allocate_storage(size_t count, MemoryCategory category);
  float* allocate_floats(size_t count, MemoryCategory category);
  // A stage with a key/value cache decodes: training and backward throw.
  void refuse_backward_with_cache() const;
  void zero(void* storage, size_t count) { ops_.zero_bytes(storage, ops_.storage_bytes(count)); }
  // Parameter and gradient tensors at a layout offset.
  const void* param(size_t offset) const {
    return parameter_storage_ != nullptr ? parameter_storage_->parameter(parameter_base_ + offset)
                                         : kernels::element_at(parameters_, offset, dtype_);
  }
  // A forward or backward has queued its last read of the unit beginning at
  // offset (gradient_units): ZeRO-3 may free its gathered parameters.
  void parameters_used(size_t unit_begin) {
    if (parameter_storage_ != nullptr) parameter_storage_->unit_used(parameter_base_ + unit_begin);
  }
  // ZeRO units of several layers (layers_per_zero_unit): the unit's first
  // layer, and whether a forward's read of `layer` is the unit's last (a
  // backward's is at the first layer, walking down).
  int zero_unit_first_layer(int layer) const { return layer - layer % layers_per_zero_unit_; }
  bool ends_zero_unit_forward(int layer, int num_layers) const {
    return (layer + 1) % layers_per_zero_unit_ == 0 || layer + 1 == num_layers;
  }
  void* grad(size_t offset) {
    return gradient_storage_ != nullptr ? gradient_storage_->gradient(gradient_base_ + offset)
                                        : kernels::element_at(gradients_, offset, dtype_);
  }
  // The slot's per-token losses [B * T] (last stage).
  float* losses(int slot) { return slot_tokens_[slot].losses; }

  kernels::Ops& ops_;
  MemoryTracker& memory_;
  kernels::DType dtype_;
  int batch_, num_slots_;
  std::vector<RecomputeMode> recompute_;
  ContextShard context_;
  int32_t document_separator_;
  int layers_per_zero_unit_;
  KeyValueCache* key_value_cache_;
  int first_position_ = 0;

 private:
  struct SlotTokens {
    int32_t* tokens = nullptr;
    int32_t* targets = nullptr;
    float* losses = nullptr;
    int32_t* documents = nullptr;
  };
  const ParameterLayout& layout_;
  size_t buffer_elements_;
  size_t activation_elements_;
  std::vector<void*> allocations_;
  void* parameters_ = nullptr;
  void* gradients_ = nullptr;
  GradientStorage* gradient_storage_ = nullptr;
  size_t gradient_base_ = 0;
  ParameterStorage* parameter_storage_ = nullptr;
  size_t parameter_base_ = 0;
  std::vector<SlotTokens> slot_tokens_;
  std::vector<int32_t> host_local_, host_documents_;  // load_micro_batch's
  double* loss_accumulator_ = nullptr;                // last stage: one double of backend memory
};

}  // namespace paraplan
