// chunked_stage.cc: a rank's model chunks over one parameter and one gradient
// buffer.
#include "runtime/model/chunked_stage.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

#include "runtime/model/architecture.h"

namespace paraplan {
namespace {

// The rank's part of the model as one StageSpec: the first chunk's first
// layer, all the chunks' layers, the embedding of the first chunk and the
// head of the last (the layers are not contiguous: nothing reads them as if).
StageSpec combined_spec(const std::vector<std::unique_ptr<ParameterLayout>>& chunks) {
  if (chunks.empty()) throw std::invalid_argument("chunked layout: no chunks");
  StageSpec spec = chunks.front()->stage();
  spec.num_layers = 0;
  for (const auto& chunk : chunks) spec.num_layers += chunk->stage().num_layers;
  spec.has_head = chunks.back()->stage().has_head;
  return spec;
}

// A pipeline message: a micro-batch's [B*T, C] (T / cp of each sequence with
// context parallelism), or this rank's 1/t of its rows with sequence
// parallelism (as every chunk's DecoderStage).
size_t activation_elements_of(const ChunkedLayout& layout, const ModelStageOptions& options) {
  size_t rows = static_cast<size_t>(options.micro_batch_size) *
                stage_sequence_length(layout, options) /
                static_cast<size_t>(std::max(options.context.size, 1));
  const int t = options.tensor_group != nullptr ? options.tensor_group->size() : 1;
  if (options.sequence_parallel && t > 1) rows /= static_cast<size_t>(t);
  return rows * layout.config().d_model;
}

// The rank's stage's options: its buffers and every chunk's recompute modes;
// its own single slot of tokens is unused (the chunks have theirs).
ModelStageOptions rank_options(const ModelStageOptions& options,
                               const std::vector<ModelStageOptions>& chunks) {
  // Decoding is a whole model's, on one stage.
  if (options.sequence_length != 0 || options.key_value_cache != nullptr)
    throw std::invalid_argument("chunked stage: no key/value cache or shorter sequences");
  ModelStageOptions rank = options;
  rank.num_slots = 1;
  rank.recompute.clear();
  for (const ModelStageOptions& chunk : chunks)
    rank.recompute.insert(rank.recompute.end(), chunk.recompute.begin(), chunk.recompute.end());
  return rank;
}

}  // namespace

ChunkedLayout::ChunkedLayout(std::vector<std::unique_ptr<ParameterLayout>> chunks)
    : ParameterLayout(chunks.at(0)->config(), combined_spec(chunks), chunks[0]->tensor_rank(),
                      chunks[0]->tensor_size()),
      chunks_(std::move(chunks)) {
  // A name twice only as a tied embedding and the head's copy of it (ZB-V's
  // first rank holds both); the optimizer sums their gradients.
  std::set<std::string> names;
  for (const auto& chunk : chunks_) {
    for (const ParameterTensor& tensor : chunk->tensors())
      if (!names.insert(tensor.name).second && !tensor.tied_copy)
        throw std::invalid_argument("chunked layout: two model chunks of one rank hold " +
                                    tensor.name);
    offsets_.push_back(append(*chunk));
  }
}

ChunkedStage::ChunkedStage(const ChunkedLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
                           const ModelStageOptions& options,
                           const std::vector<ModelStageOptions>& chunks)
    : ModelStage(layout, ops, memory, rank_options(options, chunks),
                 activation_elements_of(layout, options)),
      chunked_layout_(layout) {
  if (static_cast<int>(chunks.size()) != layout.num_chunks())
    throw std::invalid_argument("chunked stage: one set of options per chunk");
  for (int c = 0; c < layout.num_chunks(); ++c) {
    ModelStageOptions chunk = chunks[c];
    chunk.micro_batch_size = options.micro_batch_size;
    chunk.tensor_group = options.tensor_group;
    chunk.sequence_parallel = options.sequence_parallel;
    chunk.context = options.context;
    chunk.context_ring = options.context_ring;
    chunk.document_separator = options.document_separator;
    chunk.buffer_elements = 0;
    chunk.parameters = options.parameters_elsewhere
                           ? nullptr
                           : kernels::element_at(parameters(), layout.chunk_offset(c), dtype());
    chunk.parameters_elsewhere = options.parameters_elsewhere;
    chunk.gradients = options.gradients_elsewhere
                          ? nullptr
                          : kernels::element_at(gradients(), layout.chunk_offset(c), dtype());
    chunk.gradients_elsewhere = options.gradients_elsewhere;
    chunk.layers_per_zero_unit = options.layers_per_zero_unit;
    chunks_.push_back(make_model_stage(layout.chunk(c), ops, memory, chunk));
  }
}

std::vector<GradientUnit> ChunkedStage::gradient_units() const {
  std::vector<GradientUnit> units;
  for (size_t c = 0; c < chunks_.size(); ++c)
    for (GradientUnit unit : chunks_[c]->gradient_units()) {
      unit.begin += chunk_offset(static_cast<int>(c));
      units.push_back(unit);
    }
  return units;
}

void ChunkedStage::use_gradient_storage(GradientStorage* storage, size_t base) {
  ModelStage::use_gradient_storage(storage, base);
  for (size_t c = 0; c < chunks_.size(); ++c)
    chunks_[c]->use_gradient_storage(storage, base + chunk_offset(static_cast<int>(c)));
}

void ChunkedStage::use_parameter_storage(ParameterStorage* storage, size_t base) {
  ModelStage::use_parameter_storage(storage, base);
  for (size_t c = 0; c < chunks_.size(); ++c)
    chunks_[c]->use_parameter_storage(storage, base + chunk_offset(static_cast<int>(c)));
}

namespace {
[[noreturn]] void per_chunk_only(const char* what) {
  throw std::logic_error(std::string("chunked stage: ") + what +
                         " is per model chunk: call it on chunk(c)");
}
}  // namespace

void* ChunkedStage::input(int) {
  per_chunk_only("input");
}
const void* ChunkedStage::output(int) const {
  per_chunk_only("output");
}
void* ChunkedStage::output_gradient(int) {
  per_chunk_only("output_gradient");
}
const void* ChunkedStage::input_gradient() const {
  per_chunk_only("input_gradient");
}
void ChunkedStage::backward(int, const std::function<void(size_t)>&) {
  per_chunk_only("backward");
}
void ChunkedStage::backward_input(int) {
  per_chunk_only("backward_input");
}
void ChunkedStage::backward_weight(int, const std::function<void(size_t)>&) {
  per_chunk_only("backward_weight");
}
void ChunkedStage::run_forward(int, float, bool) {
  per_chunk_only("forward");
}

}  // namespace paraplan
