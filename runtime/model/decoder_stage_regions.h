// decoder_stage_regions.h: DecoderStageRegions, the base of DecoderStage
// (decoder_stage.h) that holds what entering and leaving the tensor-parallel
// regions needs, with or without sequence parallelism: the rows of each
// region, the TensorParallel mappings, the gradient scratch shared by all
// layers and slots, and the helpers a block goes through:
// column_parallel_input / column_parallel_input_gradient before a
// column-parallel linear, row_parallel_output / reduce_row_parallel_output /
// row_parallel_output_gradient after a row-parallel one,
// norm_weight_gradients for a norm's weight gradient, and the vocab-parallel
// embedding. Without sequence parallelism they are Megatron's f and g; with
// it the sequence-parallel gather and reduce-scatter, the norm and residual
// regions holding this rank's local_rows() = B*T/t token shard.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <stdexcept>

#include "kernels/dtype.h"
#include "runtime/model/decoder_layout.h"
#include "runtime/model/model_stage.h"
#include "runtime/model/tensor_parallel.h"

namespace paraplan {

class DecoderStageRegions : public ModelStage {
 protected:
  DecoderStageRegions(const DecoderLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
                      const ModelStageOptions& options)
      : ModelStage(layout, ops, memory, options,
                   local_rows(layout, options) * layout.config().d_model),
        decoder_layout_(layout),
        tensor_parallel_(options.tensor_group, ops, memory,
                         layout.stage().has_head
                             ? static_cast<size_t>(options.micro_batch_size) *
                                   stage_sequence_length(layout, options) / options.context.size
                             : 0,
                         options.sequence_parallel),
        local_rows_(local_rows(layout, options)) {}

  // The tensor group's collectives are the only ones a decoder's compute
  // calls (the context ring's and the ZeRO storages' are ModelStage's to see).
  bool computes_collectives() const override { return tensor_parallel_.size() > 1; }

  // A gradient offset for a tensor that is not there (a bias-free linear or norm).
  static constexpr size_t kNoBias = static_cast<size_t>(-1);

  // B * T (T / cp with context parallelism), the rows of the tensors between
  // a column- and a row-parallel linear.
  int rows() const { return batch_ * sequence_length(); }
  // The rows of the norm and residual regions: B * T, or this rank's B*T / t
  // with sequence parallelism (T / cp for T with context parallelism).
  int local_rows() const { return static_cast<int>(local_rows_); }
  static size_t local_rows(const DecoderLayout& layout, const ModelStageOptions& options) {
    const size_t rows = static_cast<size_t>(options.micro_batch_size) *
                        stage_sequence_length(layout, options) / std::max(options.context.size, 1);
    const int t = layout.tensor_size();
    if (!options.sequence_parallel || t == 1) return rows;
    if (rows % t != 0)
      throw std::invalid_argument(
          "model stage: sequence parallelism needs micro_batch_size x seq_len divisible by the "
          "tensor-parallel size");
    return rows / t;
  }

  // ---- the tensor-parallel regions, with or without sequence parallelism ----------------
  // The input [BT, C] of a column-parallel linear from a norm's output
  // [local, C]: that output (f is the identity), or every rank's shard
  // gathered into sequence_full_.
  const void* column_parallel_input(const void* norm_output) {
    if (!tensor_parallel_.sequence_parallel()) return norm_output;
    tensor_parallel_.gather_from_sequence_parallel_region(norm_output, sequence_full_for_writing(),
                                                          local_rows_ * d_model());
    return sequence_full_;
  }
  // Backward: norm_gradient_ [BT, C] holds this rank's partial gradient of
  // that input; returns the norm output's gradient [local, C]: norm_gradient_
  // all-reduced (f's backward), or this rank's shard of the sum.
  const void* column_parallel_input_gradient() {
    if (!tensor_parallel_.sequence_parallel()) {
      tensor_parallel_.f_backward(norm_gradient_, static_cast<size_t>(rows()) * d_model());
      return norm_gradient_;
    }
    tensor_parallel_.gather_from_sequence_parallel_region_backward(
        norm_gradient_, norm_shard_gradient_, local_rows_ * d_model());
    return norm_shard_gradient_;
  }
  // Where a row-parallel linear (or the vocab-parallel embedding) writes its
  // partial output [BT, C] for `out` [local, C]: out itself, summed in place
  // by g, or sequence_full_, reduce-scattered into out.
  void* row_parallel_output(void* out) {
    return tensor_parallel_.sequence_parallel() ? sequence_full_for_writing() : out;
  }
  void reduce_row_parallel_output(void* out) {
    if (!tensor_parallel_.sequence_parallel()) {
      tensor_parallel_.g_forward(out, static_cast<size_t>(rows()) * d_model());
      return;
    }
    tensor_parallel_.reduce_scatter_to_sequence_parallel_region(sequence_full_, out,
                                                                local_rows_ * d_model());
  }
  // A row-parallel linear whose output joins the residual stream: out =
  // residual + inp @ weight^T (+ bias), [local, C]. Without tensor
  // parallelism one op (the CUDA backend adds the residual in the GEMM);
  // with it the partial products are summed (g, or its reduce-scatter)
  // before the residual is added.
  void row_parallel_residual(void* out, const void* inp, const void* weight, const void* bias,
                             const void* residual, int in_features) {
    const int C = static_cast<int>(d_model());
    if (tensor_parallel_.size() == 1) {
      ops_.linear_residual_forward(out, inp, weight, bias, residual, rows(), in_features, C);
      return;
    }
    ops_.linear_forward(row_parallel_output(out), inp, weight, bias, rows(), in_features, C);
    reduce_row_parallel_output(out);
    ops_.residual_forward(out, out, residual, local_rows_ * C);
  }
  // Backward: the gradient [BT, C] of that output from residual_gradient_
  // [local, C]: residual_gradient_ itself (g's backward is the identity), or
  // every rank's shard gathered into sequence_full_.
  const void* row_parallel_output_gradient() {
    return row_parallel_output_gradient(residual_gradient_);
  }
  // The same for another [local, C] gradient (the embedding's, kept for
  // backward_weight).
  const void* row_parallel_output_gradient(const void* gradient) {
    if (!tensor_parallel_.sequence_parallel()) return gradient;
    tensor_parallel_.reduce_scatter_to_sequence_parallel_region_backward(
        gradient, sequence_full_for_writing(), local_rows_ * d_model());
    return sequence_full_;
  }
  // Runs a norm's backward, backward(d_weight, d_bias), accumulating the
  // weight gradient at weight_offset (and the bias's at bias_offset, or
  // kNoBias). With sequence parallelism each rank's gradient covers only its
  // tokens: computed into scratch, summed over the group, then added.
  template <typename Backward>
  void norm_weight_gradients(size_t weight_offset, size_t bias_offset, Backward backward) {
    const bool has_bias = bias_offset != kNoBias;
    if (!tensor_parallel_.sequence_parallel()) {
      backward(grad(weight_offset), has_bias ? grad(bias_offset) : nullptr);
      return;
    }
    const size_t C = d_model();
    zero(norm_weight_gradient_, has_bias ? 2 * C : C);
    void* bias_gradient = kernels::element_at(norm_weight_gradient_, C, dtype_);
    backward(norm_weight_gradient_, has_bias ? bias_gradient : nullptr);
    tensor_parallel_.all_reduce_sequence_parallel_gradients(norm_weight_gradient_,
                                                            has_bias ? 2 * C : C);
    ops_.residual_forward(grad(weight_offset), grad(weight_offset), norm_weight_gradient_, C);
    if (has_bias) ops_.residual_forward(grad(bias_offset), grad(bias_offset), bias_gradient, C);
  }
  size_t d_model() const { return decoder_layout_.config().d_model; }
  // The vocab-parallel embedding of tokens(slot) into the stage input out
  // [local, C]: each rank looks up its vocabulary rows (zeros elsewhere),
  // summed over the group (all-reduce, or with sequence parallelism a
  // reduce-scatter into the token shard). add_positions(x [BT, C]), when
  // set, adds what every token gets (GPT-2's positions): after the sum, or
  // with sequence parallelism before it by tensor rank 0 only (like a
  // row-parallel bias), which gives bitwise the same sum.
  void vocab_parallel_embedding(int slot, void* out, size_t table_offset,
                                const std::function<void(void*)>& add_positions = {}) {
    const int C = static_cast<int>(d_model());
    if (!tensor_parallel_.sequence_parallel()) {
      tensor_parallel_.vocab_parallel_embedding_forward(out, tokens(slot), param(table_offset),
                                                        rows(), decoder_layout_.vocab_start(),
                                                        decoder_layout_.local_vocab(), C);
      if (add_positions) add_positions(out);
      return;
    }
    ops_.token_embedding_forward(sequence_full_for_writing(), tokens(slot), param(table_offset),
                                 rows(), decoder_layout_.vocab_start(),
                                 decoder_layout_.local_vocab(), C);
    if (add_positions && tensor_parallel_.adds_row_parallel_bias()) add_positions(sequence_full_);
    reduce_row_parallel_output(out);
  }

  // sequence_full_, about to be overwritten: weight gradients queued beside
  // the backward (kernels/ops.h linear_weight_gradients) may still read what
  // it holds (a gathered gradient or norm output), so they are joined first.
  void* sequence_full_for_writing() {
    ops_.join_weight_gradients();
    return sequence_full_;
  }

  const DecoderLayout& decoder_layout_;
  TensorParallel tensor_parallel_;
  size_t local_rows_;
  // Gradient scratch shared by all layers and slots: d(residual stream)
  // [local, C], flowing backward through the blocks, and the partial gradient
  // of a column-parallel linear's input [BT, C].
  void* residual_gradient_ = nullptr;
  void* norm_gradient_ = nullptr;
  // Sequence parallelism only (workspace): the gathered input of a
  // column-parallel linear, the partial output of a row-parallel one, or a
  // gathered gradient [BT, C]; a norm's output gradient shard [local, C]; a
  // norm's weight and bias gradients before their sum over the group [2C].
  void* sequence_full_ = nullptr;
  void* norm_shard_gradient_ = nullptr;
  void* norm_weight_gradient_ = nullptr;
};

}  // namespace paraplan
