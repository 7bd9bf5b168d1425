// chunked_stage.h: a pipeline rank holding several model chunks (the virtual
// stages of an interleaved schedule, plan.fbs): one contiguous parameter and
// one gradient buffer for the rank (llm.c's scheme), laid out chunk after
// chunk, and a stage per chunk over its range of them.
//
// The optimizer, ZeRO-1, gradient buckets, checkpoints and replay see the
// rank's ChunkedStage and ChunkedLayout as they see a one-chunk stage: named
// ranges of one buffer (the chunks' tensors, offsets shifted). The executor
// runs each instruction on chunk(c); the ChunkedStage itself runs nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/model/model_stage.h"
#include "runtime/model/parameter_layout.h"

namespace paraplan {

class ChunkedLayout final : public ParameterLayout {
 public:
  // The chunks' layouts in chunk order (one tensor-parallel rank, one model).
  // Throws std::invalid_argument when two chunks hold a tensor of the same
  // name (a tied embedding whose head is on the same rank: the planner puts
  // several chunks on a rank only with two or more pipeline ranks).
  explicit ChunkedLayout(std::vector<std::unique_ptr<ParameterLayout>> chunks);

  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  const ParameterLayout& chunk(int c) const { return *chunks_[c]; }
  // Where chunk c's parameters start in the rank's buffer.
  size_t chunk_offset(int c) const { return offsets_[c]; }

 private:
  std::vector<std::unique_ptr<ParameterLayout>> chunks_;
  std::vector<size_t> offsets_;
};

class ChunkedStage final : public ModelStage {
 public:
  // options: the rank's (micro-batch size, tensor group, buffer_elements);
  // chunks[c]: chunk c's slots, recompute modes and received gradients (the
  // rest is the rank's; its buffers are ranges of the rank's).
  ChunkedStage(const ChunkedLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
               const ModelStageOptions& options, const std::vector<ModelStageOptions>& chunks);

  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  ModelStage& chunk(int c) override { return *chunks_[c]; }
  size_t chunk_offset(int c) const override { return chunked_layout_.chunk_offset(c); }

  // Each chunk's units at its offset; each chunk addresses its range.
  std::vector<GradientUnit> gradient_units() const override;
  void use_gradient_storage(GradientStorage* storage, size_t base = 0) override;
  void use_parameter_storage(ParameterStorage* storage, size_t base = 0) override;

  // Per chunk only (chunk(c)): these throw std::logic_error.
  void* input(int slot) override;
  const void* output(int slot) const override;
  void* output_gradient(int slot) override;
  const void* input_gradient() const override;
  void backward(int slot, const std::function<void(size_t)>& gradients_final_from) override;
  void backward_input(int slot) override;
  void backward_weight(int slot, const std::function<void(size_t)>& gradients_final_from) override;
  // The last chunk's (the head's, when this rank holds it).
  const void* logits(int slot) const override { return chunks_.back()->logits(slot); }

 protected:
  void run_forward(int slot, float loss_scale, bool training) override;

 private:
  const ChunkedLayout& chunked_layout_;
  std::vector<std::unique_ptr<ModelStage>> chunks_;
};

}  // namespace paraplan
