// distributed_checkpoint.cc: every rank reads its slices of a checkpoint
// (distributed_checkpoint.h); saving is distributed_checkpoint_save.cc.
#include "runtime/checkpoint/distributed_checkpoint.h"

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/model/memory_tracker.h"

namespace paraplan {

namespace {

// Reads local elements [first, first + count) of this rank's slice of a
// tensor stored in paraplan's orientation straight from the file, a
// contiguous run at a time: only what the rank keeps crosses the filesystem.
void read_slice_elements(const TensorFileSet& files, const ParameterTensor& tensor,
                         const std::string& name, size_t first, size_t count, float* out) {
  const size_t run = tensor.contiguous_run();
  for (size_t k = first; k < first + count;) {
    const size_t end = std::min(first + count, (k / run + 1) * run);
    files.read_range(name, tensor.global_shape, tensor.global_index(k), end - k, out + (k - first));
    k = end;
  }
}

// Gives the optimizer the parts it keeps (held_ranges) of this rank's slice
// of every tensor of `layout` (under `prefix`) from `files`, a tensor at a
// time, as `array`: a ZeRO rank reads its own part of the moments (and under
// ZeRO-3 of the weights), not the slice dp times over. A Conv1D weight,
// stored transposed, is read whole first and its parts taken.
void load_slices(const TensorFileSet& files, const ParameterLayout& layout,
                 const std::string& prefix, DistributedOptimizer& optimizer,
                 DistributedOptimizer::StateArray array) {
  std::vector<float> own, whole, scratch;
  for (const ParameterTensor& tensor : layout.tensors()) {
    const auto held = optimizer.held_ranges(array, tensor.offset, tensor.offset + tensor.size);
    if (held.empty()) continue;
    own.resize(tensor.size);
    if (tensor.hf_transposed) {
      whole.resize(tensor.global_size());
      read_whole_tensor(files, tensor, prefix, whole.data(), scratch);
      for (size_t k = 0; k < tensor.size; ++k) own[k] = whole[tensor.global_index(k)];
    }
    const std::string name = stored_tensor_name(files, tensor, prefix);
    for (const auto& [begin, end] : held) {
      float* part = own.data() + (begin - tensor.offset);
      if (!tensor.hf_transposed)
        read_slice_elements(files, tensor, name, begin - tensor.offset, end - begin, part);
      optimizer.load_range(array, begin, end, part);
    }
  }
}

TrainState load_checkpoint_slices(const std::string& path, ModelStage& stage,
                                  DistributedOptimizer& optimizer, bool with_moments) {
  const ParameterLayout& layout = stage.layout();
  const std::string step_dir = resolve_checkpoint(path);
  check_checkpoint_config(step_dir, layout.config());
  const TrainState state = read_step_train_state(step_dir, with_moments);
  // Beside one tensor's slice, at most one whole Conv1D weight and its
  // transposing copy.
  require_host_memory(largest_tensor_bytes(layout, true) * 2,
                      path + ": the largest tensor, whole, to take this rank's slice of it",
                      "resume on machines with more memory");
  using Array = DistributedOptimizer::StateArray;
  load_slices(open_model_tensors(step_dir), layout, "", optimizer, Array::kParameters);
  if (with_moments) {
    const TensorFileSet moments = open_optimizer_tensors(step_dir);
    load_slices(moments, layout, "exp_avg.", optimizer, Array::kFirstMoment);
    load_slices(moments, layout, "exp_avg_sq.", optimizer, Array::kSecondMoment);
  }
  return state;
}

}  // namespace

TrainState load_distributed_checkpoint(const std::string& path, ModelStage& stage,
                                       DistributedOptimizer& optimizer) {
  return load_checkpoint_slices(path, stage, optimizer, true);
}

void load_distributed_weights(const std::string& path, ModelStage& stage,
                              DistributedOptimizer& optimizer) {
  load_checkpoint_slices(path, stage, optimizer, false);
}

}  // namespace paraplan
