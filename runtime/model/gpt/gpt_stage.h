// gpt_stage.h: one pipeline stage of a GPT-2 model (learned positions,
// pre-LayerNorm blocks, tied embeddings), written once against kernels/ops.h.
//
// The stage owns one contiguous parameter buffer and one gradient buffer laid
// out by GptLayout, and activation storage for `num_slots` micro-batches in
// flight (a 1F1B stage keeps several; the executor maps micro-batch -> slot).
// Attention is fused (kernels/ops.h): no [B, H, T, T] tensor exists, only the
// per-row logsumexp [B, H, T] that its backward reads beside qkv and the
// attention output. Per layer, the recompute mode decides what a slot keeps
// for backward:
//   none      everything the backward pass reads, logsumexp included;
//   selective all but the attention output atty [BT, A] and logsumexp: backward
//             recomputes both with one attention_forward from the saved qkv,
//             into shared scratch;
//   full      only the block input; the whole block is recomputed in backward.
// Recomputation runs the same deterministic kernels on the same inputs, so the
// gradients are bitwise those of no recomputation.
//
// Tensor parallelism (Megatron) when the layout has tensor_size > 1: QKV and
// MLP-up are column-parallel, attention-out and MLP-down row-parallel; the
// "f" operator (identity forward, all-reduce of the input gradient backward)
// sits before each column-parallel pair and the "g" operator (all-reduce
// forward, identity backward) after each row-parallel one. The embedding and
// the head are vocab-parallel, with the three-step cross-entropy. Row-parallel
// biases are added once (by tensor rank 0) before the all-reduce; every rank
// computes their gradient, so replicated parameters stay identical.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/ops.h"
#include "plan_generated.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/gpt/gpt_layout.h"
#include "runtime/model/memory_tracker.h"

namespace paraplan {

using RecomputeMode = schema::RecomputeMode;

class GptStage {
 public:
  // recompute has one entry per layer of the stage. tensor_group is the
  // tensor-parallel group (null when the layout's tensor_size is 1).
  // buffer_elements >= layout.num_elements() sizes the parameter and gradient
  // buffers (ZeRO-1 pads them to a multiple of its group size); 0 = exact.
  GptStage(const GptLayout& layout, kernels::Ops& ops, MemoryTracker& memory, int micro_batch_size,
           int num_slots, std::vector<RecomputeMode> recompute,
           Communicator* tensor_group = nullptr, size_t buffer_elements = 0);
  ~GptStage();
  GptStage(const GptStage&) = delete;
  GptStage& operator=(const GptStage&) = delete;

  const GptLayout& layout() const { return layout_; }
  int micro_batch_size() const { return batch_; }
  int num_slots() const { return num_slots_; }

  // The storage dtype of parameters, gradients and activations (the ops').
  kernels::DType dtype() const { return dtype_; }
  // Parameter and gradient buffers: buffer_elements() of dtype(), backend memory.
  void* parameters() { return parameters_; }
  void* gradients() { return gradients_; }
  // Sets the first `count` parameters from fp32 host values (rounded to
  // dtype()), and reads them back widened: for initialization, checkpoints
  // and tests.
  void load_parameters(const float* host, size_t count);
  void read_parameters(float* host, size_t count);
  void read_gradients(float* host, size_t count);

  // Where a micro-batch's tokens and targets go ([B, T] each, backend memory);
  // the first stage reads tokens, the last stage reads targets.
  int32_t* tokens(int slot) { return slots_[slot].tokens; }
  int32_t* targets(int slot) { return slots_[slot].targets; }
  // Where a stage without the embedding receives its input [B, T, C].
  // These activations and their gradients are storage tensors (dtype()).
  void* input(int slot) { return slots_[slot].input; }
  // A stage without the head: its output [B, T, C] after forward(slot).
  const void* output(int slot) const;
  // A stage without the head: where the gradient of its output is received
  // before backward(). Shared by all slots (one backward at a time).
  void* output_gradient() { return residual_gradient_; }
  // A stage without the embedding: the gradient of its input after backward().
  const void* input_gradient() const { return residual_gradient_; }

  // Forward of the micro-batch in slot. On the last stage this also computes
  // the per-token losses and, when training, the logits' gradient scaled by
  // loss_scale (the fused softmax + cross-entropy), ready for backward().
  void forward(int slot, float loss_scale, bool training = true);
  // Backward of the micro-batch in slot, accumulating into gradients().
  // gradients_final_from, when set, is told as backward passes each part of
  // the stage that no gradient at buffer offset >= its argument will be
  // written again by this backward (the data-parallel reduction starts those
  // buckets early; see distributed_optimizer.h).
  void backward(int slot, const std::function<void(size_t)>& gradients_final_from = {});

  // Last stage: sum of the slot's per-token losses (copied to the host).
  double loss_sum(int slot);
  // Elements of the parameter and gradient buffers (>= layout().num_elements()).
  size_t buffer_elements() const { return buffer_elements_; }
  // Last stage after forward(slot, _, false): the logits [B, T, V].
  const void* logits(int slot) const { return slots_[slot].logits; }

 private:
  // The activations of one transformer block for one micro-batch: storage
  // tensors (void*, dtype()) and fp32 statistics (float*).
  struct BlockActivations {
    void* ln1 = nullptr;  // [BT, C]
    float* ln1_mean = nullptr;
    float* ln1_rstd = nullptr;   // [BT]
    void* qkv = nullptr;         // [BT, 3A]
    float* logsumexp = nullptr;  // [B, H, T] of the attention scores' rows
    void* atty = nullptr;        // [BT, A] attention output before the projection
    void* residual2 = nullptr;   // [BT, C] input + attention branch
    void* ln2 = nullptr;
    float* ln2_mean = nullptr;
    float* ln2_rstd = nullptr;
    void* fch = nullptr;       // [BT, F] MLP up-projection
    void* fch_gelu = nullptr;  // [BT, F]
    void* output = nullptr;    // [BT, C] the block output (next block's input)
  };
  struct Slot {
    int32_t* tokens = nullptr;
    int32_t* targets = nullptr;
    void* input = nullptr;  // [BT, C]: the embedding output, or the received input
    std::vector<BlockActivations> blocks;
    void* final_norm = nullptr;  // head: [BT, C]
    float* final_norm_mean = nullptr;
    float* final_norm_rstd = nullptr;
    void* logits = nullptr;   // head: [BT, V], overwritten by its gradient
    float* losses = nullptr;  // head: [BT]
  };

  // Backend memory for count elements of dtype() (storage) or fp32.
  void* allocate_storage(size_t count, MemoryCategory category);
  float* allocate_floats(size_t count, MemoryCategory category);
  void zero(void* storage, size_t count) { ops_.zero_bytes(storage, ops_.storage_bytes(count)); }
  // Parameter and gradient tensors at a layout offset.
  const void* param(size_t offset) const {
    return kernels::element_at(parameters_, offset, dtype_);
  }
  void* grad(size_t offset) { return kernels::element_at(gradients_, offset, dtype_); }
  // Allocates the buffers a block keeps under mode, and the rest from `shared`.
  BlockActivations allocate_block(RecomputeMode mode, const BlockActivations* shared);
  void block_forward(int local_layer, const void* input, const BlockActivations& acts);
  void block_backward(int local_layer, const void* input, const BlockActivations& acts);
  const void* block_input(const Slot& slot, int local_layer) const;
  // Megatron's all-reduce over the tensor group (g forward, f backward).
  void tensor_all_reduce(void* data, size_t count);
  void head_loss(Slot& slot, bool training, float loss_scale);

  const GptLayout& layout_;
  kernels::Ops& ops_;
  kernels::DType dtype_;
  MemoryTracker& memory_;
  Communicator* tensor_group_;
  int batch_, num_slots_;
  size_t buffer_elements_;
  std::vector<RecomputeMode> recompute_;
  std::vector<void*> allocations_;

  void* parameters_ = nullptr;
  void* gradients_ = nullptr;
  std::vector<Slot> slots_;
  // Scratch for recomputation: one block's full set of activations under full
  // recompute, only atty and logsumexp when the stage's deepest mode is selective.
  BlockActivations recompute_scratch_;
  // Gradient scratch, shared by all layers and slots.
  void* residual_gradient_ = nullptr;   // [BT, C], flows backward through the blocks
  void* norm_gradient_ = nullptr;       // [BT, C]
  void* qkv_gradient_ = nullptr;        // [BT, 3C]
  void* atty_gradient_ = nullptr;       // [BT, A]
  void* fch_gradient_ = nullptr;        // [BT, F]
  void* fch_gelu_gradient_ = nullptr;   // [BT, F]
  float* attention_scratch_ = nullptr;  // [B, H, T]: attention_backward's row terms
  // Vocab-parallel cross-entropy statistics per row [BT].
  float* row_max_ = nullptr;
  float* row_exp_sum_ = nullptr;
  float* row_target_logit_ = nullptr;
};

}  // namespace paraplan
