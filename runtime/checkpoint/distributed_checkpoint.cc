// distributed_checkpoint.cc: gather to rank 0 on save, slice on load.
#include "runtime/checkpoint/distributed_checkpoint.h"

#include <vector>

#include "runtime/model/architecture.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/model/model_from_plan.h"

namespace paraplan {

namespace {

// Places a rank's local tensors into the whole-model buffers.
// The last pipeline stage's copy of the tied embedding is the first stage's
// tensor; the checkpoint holds it once.
void place(const ParameterLayout& local, const std::vector<float>& source,
           const ParameterLayout& whole, std::vector<float>& destination) {
  for (const ParameterTensor& tensor : local.tensors()) {
    if (tensor.tied_copy) continue;
    const size_t base = whole.find(tensor.name)->offset;
    for (size_t k = 0; k < tensor.size; ++k)
      destination[base + tensor.global_index(k)] = source[tensor.offset + k];
  }
}

// Takes a rank's local tensors out of the whole-model buffers.
void slice(const ParameterLayout& whole, const std::vector<float>& source,
           const ParameterLayout& local, std::vector<float>& destination) {
  destination.assign(local.num_elements(), 0.0f);
  for (const ParameterTensor& tensor : local.tensors()) {
    const size_t base = whole.find(tensor.name)->offset;
    for (size_t k = 0; k < tensor.size; ++k)
      destination[tensor.offset + k] = source[base + tensor.global_index(k)];
  }
}

}  // namespace

std::string save_distributed_checkpoint(const std::string& dir, const LoadedPlan& plan,
                                        ModelStage& stage, DistributedOptimizer& optimizer,
                                        ProcessGroups& groups, const TrainState& state,
                                        const std::function<void()>& before_publish) {
  const ParameterLayout& layout = stage.layout();
  const size_t n = layout.num_elements();
  std::vector<float> params, first, second;
  // fp32 master weights (under bf16 storage, not the rounded stage copy), so
  // a resumed run continues exactly. Both collective over the ZeRO group.
  optimizer.gather_parameters(params);
  optimizer.gather_moments(first, second);

  std::string written;
  const MeshCoordinates& mesh = groups.mesh;
  if (groups.world_rank != 0) {
    if (mesh.gradient_rank() == 0)  // one replica of each pipeline and tensor rank
      for (const std::vector<float>* buffer : {&params, &first, &second})
        groups.peers->send_receive(buffer->data(), n, 0, nullptr, 0, -1, kernels::DType::kFloat32);
  } else {
    const std::unique_ptr<ParameterLayout> whole_layout = make_whole_model_layout(layout.config());
    const ParameterLayout& whole = *whole_layout;
    std::vector<float> whole_params(whole.num_elements()), whole_first(whole.num_elements()),
        whole_second(whole.num_elements());
    place(layout, params, whole, whole_params);
    place(layout, first, whole, whole_first);
    place(layout, second, whole, whole_second);
    for (int rank = 1; rank < groups.world_size; ++rank) {
      const MeshCoordinates source = mesh_coordinates(rank, mesh.pipeline_size, mesh.data_size,
                                                      mesh.tensor_size, mesh.context_size);
      if (source.gradient_rank() != 0) continue;
      const std::unique_ptr<ParameterLayout> remote =
          rank_layout_from_plan(plan, source.pipeline_rank, source.tensor_rank, mesh.tensor_size);
      std::vector<float> buffer(remote->num_elements());
      for (std::vector<float>* destination : {&whole_params, &whole_first, &whole_second}) {
        groups.peers->send_receive(nullptr, 0, -1, buffer.data(), buffer.size(), rank,
                                   kernels::DType::kFloat32);
        place(*remote, buffer, whole, *destination);
      }
    }
    written = save_checkpoint(dir, whole, whole_params.data(), whole_first.data(),
                              whole_second.data(), state, before_publish);
  }
  // Nobody goes on (or exits) before the checkpoint is complete.
  groups.world->barrier();
  return written;
}

namespace {

// Loads the checkpoint's parameters, and its moments when with_moments, and
// gives this rank's slices to the optimizer.
TrainState load_slices(const std::string& path, ModelStage& stage, DistributedOptimizer& optimizer,
                       bool with_moments) {
  const ParameterLayout& layout = stage.layout();
  const std::unique_ptr<ParameterLayout> whole_layout = make_whole_model_layout(layout.config());
  const ParameterLayout& whole = *whole_layout;
  // Every rank reads the whole model (and both moments when resuming), then
  // keeps its slice.
  const int64_t whole_arrays = with_moments ? 3 : 1;
  require_host_memory(static_cast<double>(whole.num_elements()) * whole_arrays * sizeof(float),
                      path + ": the whole model's weights" +
                          std::string(with_moments ? " and AdamW moments" : "") + " (" +
                          std::to_string(whole.num_elements()) + " parameters)",
                      "resume on machines with more memory");
  std::vector<float> whole_params(whole.num_elements()), whole_first, whole_second;
  if (with_moments) {
    whole_first.resize(whole.num_elements());
    whole_second.resize(whole.num_elements());
  }
  const TrainState state =
      load_checkpoint(path, whole, whole_params.data(), with_moments ? whole_first.data() : nullptr,
                      with_moments ? whole_second.data() : nullptr);
  std::vector<float> local;
  slice(whole, whole_params, layout, local);
  optimizer.load_parameters(local.data());
  if (with_moments) {
    std::vector<float> local_second;
    slice(whole, whole_first, layout, local);
    slice(whole, whole_second, layout, local_second);
    optimizer.load_moments(local.data(), local_second.data());
  }
  return state;
}

}  // namespace

TrainState load_distributed_checkpoint(const std::string& path, ModelStage& stage,
                                       DistributedOptimizer& optimizer) {
  return load_slices(path, stage, optimizer, true);
}

void load_distributed_weights(const std::string& path, ModelStage& stage,
                              DistributedOptimizer& optimizer) {
  load_slices(path, stage, optimizer, false);
}

}  // namespace paraplan
