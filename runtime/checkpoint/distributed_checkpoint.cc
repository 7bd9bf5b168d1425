// distributed_checkpoint.cc: every (stage, tensor rank) writes its share of
// whole tensors on save; every rank reads its slices on load.
#include "runtime/checkpoint/distributed_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <stdexcept>
#include <vector>

#include "runtime/model/memory_tracker.h"
#include "runtime/model/model_from_plan.h"

namespace paraplan {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModel = "model";
constexpr const char* kOptimizer = "optimizer";

// The tensors a stage's layout puts in the checkpoint, in layout order, each
// name once: the last stage's copy of the tied embedding is the first
// stage's tensor.
std::vector<const ParameterTensor*> checkpoint_tensors(const ParameterLayout& layout) {
  std::vector<const ParameterTensor*> tensors;
  std::set<std::string> names;
  for (const ParameterTensor& tensor : layout.tensors())
    if (!tensor.tied_copy && names.insert(tensor.name).second) tensors.push_back(&tensor);
  return tensors;
}

// A stage's writers: each tensor rank's state readers (the first ZeRO
// group, or without ZeRO the data group: DistributedOptimizer::read_range),
// so a job with neither tensor nor pipeline parallelism still writes from
// every rank of that group, not one. Writer w is tensor rank w / readers,
// reader (gradient rank) w % readers.
struct StageWriters {
  int tensor_size = 1, readers = 1;
  int count() const { return tensor_size * readers; }
  int tensor_rank(int writer) const { return writer / readers; }
  int reader(int writer) const { return writer % readers; }
};

// The writer of each of a stage's checkpoint tensors: the one with the
// fewest bytes so far, so the stage's writers write about equal shares.
// Every rank of the stage works it out alike (the names and whole shapes do
// not depend on the rank).
std::vector<int> assign_writers(const std::vector<const ParameterTensor*>& tensors,
                                const StageWriters& writers) {
  std::vector<size_t> bytes(static_cast<size_t>(writers.count()), 0);
  std::vector<int> writer;
  for (const ParameterTensor* tensor : tensors) {
    const int least =
        static_cast<int>(std::min_element(bytes.begin(), bytes.end()) - bytes.begin());
    writer.push_back(least);
    bytes[static_cast<size_t>(least)] += tensor->global_size() * sizeof(float);
  }
  return writer;
}

// The job's files: one per writer (pipeline rank, then tensor rank, then
// ZeRO rank) that writes a tensor, numbered in that order; a single file
// (model.safetensors, no index) when there is one.
struct ShardFiles {
  int file_count = 0;
  std::vector<int> number;  // [pipeline_rank * writers + writer]: 1-based, 0: none
  std::map<std::string, std::string> model_map, optimizer_map;
  uint64_t model_bytes = 0;

  std::string name(const std::string& base, int file_number) const {
    return file_count == 1 ? single_file_name(base)
                           : shard_file_name(base, file_number, file_count);
  }
};

ShardFiles shard_files(const LoadedPlan& plan, const MeshCoordinates& mesh,
                       const StageWriters& writers) {
  ShardFiles files;
  files.number.assign(static_cast<size_t>(mesh.pipeline_size * writers.count()), 0);
  std::vector<std::pair<int, const ParameterTensor*>> owners;  // (slot, tensor)
  std::vector<std::unique_ptr<ParameterLayout>> layouts;
  for (int p = 0; p < mesh.pipeline_size; ++p) {
    layouts.push_back(rank_layout_from_plan(plan, p, 0, mesh.tensor_size));
    const std::vector<const ParameterTensor*> tensors = checkpoint_tensors(*layouts.back());
    const std::vector<int> writer = assign_writers(tensors, writers);
    for (size_t i = 0; i < tensors.size(); ++i)
      owners.emplace_back(p * writers.count() + writer[i], tensors[i]);
  }
  for (const auto& [slot, tensor] : owners) files.number[static_cast<size_t>(slot)] = 1;
  for (int& number : files.number)
    if (number != 0) number = ++files.file_count;
  for (const auto& [slot, tensor] : owners) {
    const int number = files.number[static_cast<size_t>(slot)];
    files.model_map[tensor->name] = files.name(kModel, number);
    files.optimizer_map["exp_avg." + tensor->name] = files.name(kOptimizer, number);
    files.optimizer_map["exp_avg_sq." + tensor->name] = files.name(kOptimizer, number);
    files.model_bytes += tensor->global_size() * sizeof(float);
  }
  return files;
}

// Sends rank 0's text (the aside directory's path) to every rank. The
// communicators carry floats, so the bytes travel packed four to a float:
// MPI and NCCL copy them bit for bit.
std::string broadcast_text(Communicator& world, const std::string& text) {
  float length = static_cast<float>(text.size());  // a path: exact below 2^24
  world.broadcast(&length, 1, 0);
  std::vector<float> packed((static_cast<size_t>(length) + 3) / 4, 0.0f);
  if (world.rank() == 0) std::memcpy(packed.data(), text.data(), text.size());
  if (!packed.empty()) world.broadcast(packed.data(), packed.size(), 0);
  return std::string(reinterpret_cast<const char*>(packed.data()), static_cast<size_t>(length));
}

// A stage's state readers as one of them sees them: the tensor ranks'
// layouts, and the world rank of tensor rank t's reader z (gradient rank z:
// the first ZeRO group is the first gradient ranks).
struct StageWriter {
  ProcessGroups& groups;
  StageWriters writers;
  int reader;  // this rank's place among its tensor rank's readers
  std::vector<std::unique_ptr<ParameterLayout>> peer_layouts;  // by tensor rank (own: null)

  int world_rank(int tensor_rank, int reader_rank) const {
    const MeshCoordinates& mesh = groups.mesh;
    return world_rank_of(mesh, mesh.pipeline_rank, reader_rank / mesh.context_size,
                         reader_rank % mesh.context_size, tensor_rank);
  }
};

// Makes `whole` the whole tensor: this rank's slice (`own`) placed by its
// global indices, the same reader's of each other tensor rank received and
// placed by theirs.
void gather_tensor(StageWriter& stage, const ParameterTensor& tensor, const float* own,
                   std::vector<float>& whole, std::vector<float>& received) {
  whole.assign(tensor.global_size(), 0.0f);
  const MeshCoordinates& mesh = stage.groups.mesh;
  for (int rank = 0; rank < mesh.tensor_size; ++rank) {
    const ParameterTensor* part =
        rank == mesh.tensor_rank ? &tensor : stage.peer_layouts[rank]->find(tensor.name);
    const float* values = own;
    if (rank != mesh.tensor_rank) {
      received.resize(part->size);
      stage.groups.peers->send_receive(nullptr, 0, -1, received.data(), part->size,
                                       stage.world_rank(rank, stage.reader),
                                       kernels::DType::kFloat32);
      values = received.data();
    }
    for (size_t k = 0; k < part->size; ++k) whole[part->global_index(k)] = values[k];
  }
}

// One pass over the stage's checkpoint tensors for one array (parameters or
// a moment), a tensor at a time. The ZeRO group of each tensor rank that
// needs the tensor (every one for a sliced tensor, the writer's for a
// replicated one) brings this rank's slice whole to the writer's reader
// (DistributedOptimizer::read_range); there the writer gathers the slices of
// its tensor peers' same reader and appends it to its stream, the others
// send theirs. Every rank that reads_state() runs the same passes in the
// same order, so the transfers pair up.
void write_pass(StageWriter& stage, const std::vector<const ParameterTensor*>& tensors,
                const std::vector<int>& writer, DistributedOptimizer& optimizer,
                DistributedOptimizer::StateArray array, const std::string& prefix,
                SafetensorsStream* stream) {
  std::vector<float> own, whole, received, hugging_face;
  const MeshCoordinates& mesh = stage.groups.mesh;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ParameterTensor& tensor = *tensors[i];
    const int writer_tensor_rank = stage.writers.tensor_rank(writer[i]);
    const int writer_reader = stage.writers.reader(writer[i]);
    const bool sliced = tensor.shard != ShardKind::kReplicated && tensor.tensor_size > 1;
    if (!sliced && writer_tensor_rank != mesh.tensor_rank) continue;
    own.resize(tensor.size);
    optimizer.read_range(array, tensor.offset, tensor.offset + tensor.size, own.data(),
                         writer_reader);
    if (stage.reader != writer_reader) continue;  // its part went to that reader
    if (writer_tensor_rank != mesh.tensor_rank) {
      stage.groups.peers->send_receive(own.data(), tensor.size,
                                       stage.world_rank(writer_tensor_rank, writer_reader), nullptr,
                                       0, -1, kernels::DType::kFloat32);
      continue;
    }
    const float* data = own.data();
    if (sliced) {
      gather_tensor(stage, tensor, own.data(), whole, received);
      data = whole.data();
    }
    stream->append(prefix + tensor.name, hugging_face_data(tensor, data, hugging_face));
  }
}

// This rank's files in the aside directory `draft_path`: its share of the
// stage's tensors (model) and of their moments (optimizer).
void write_stage_share(const std::string& draft_path, const LoadedPlan& plan,
                       const ParameterLayout& layout, ProcessGroups& groups,
                       const StageWriters& writers, const ShardFiles& files,
                       DistributedOptimizer& optimizer) {
  const MeshCoordinates& mesh = groups.mesh;
  StageWriter stage{groups, writers, optimizer.state_reader_rank(), {}};
  for (int rank = 0; rank < mesh.tensor_size; ++rank)
    stage.peer_layouts.push_back(
        rank == mesh.tensor_rank
            ? nullptr
            : rank_layout_from_plan(plan, mesh.pipeline_rank, rank, mesh.tensor_size));
  const std::vector<const ParameterTensor*> tensors = checkpoint_tensors(layout);
  const std::vector<int> writer = assign_writers(tensors, writers);
  const int own_writer = mesh.tensor_rank * writers.readers + stage.reader;

  SafetensorsWriter model, moments;
  model.set_metadata("format", "pt");  // transformers refuses safetensors without it
  moments.set_metadata("format", "pt");
  moments.set_metadata("content", "AdamW moments in model.safetensors layouts");
  for (const char* prefix : {"", "exp_avg.", "exp_avg_sq."})
    for (size_t i = 0; i < tensors.size(); ++i)
      if (writer[i] == own_writer)
        (*prefix ? moments : model)
            .declare(prefix + tensors[i]->name, hugging_face_shape(*tensors[i]));

  const int number =
      files.number[static_cast<size_t>(mesh.pipeline_rank * writers.count() + own_writer)];
  std::unique_ptr<SafetensorsStream> model_stream, optimizer_stream;
  if (number != 0) {
    const fs::path dir(draft_path);
    model_stream = std::make_unique<SafetensorsStream>(
        model.open_stream((dir / files.name(kModel, number)).string()));
    optimizer_stream = std::make_unique<SafetensorsStream>(
        moments.open_stream((dir / files.name(kOptimizer, number)).string()));
  }
  using Array = DistributedOptimizer::StateArray;
  write_pass(stage, tensors, writer, optimizer, Array::kParameters, "", model_stream.get());
  write_pass(stage, tensors, writer, optimizer, Array::kFirstMoment, "exp_avg.",
             optimizer_stream.get());
  write_pass(stage, tensors, writer, optimizer, Array::kSecondMoment, "exp_avg_sq.",
             optimizer_stream.get());
  if (model_stream) {
    model_stream->commit();
    optimizer_stream->commit();
  }
}

// The largest whole tensor of the layout (of its Conv1D weights only, when
// transposed_only), in bytes: what a rank holds at once beyond its own
// arrays when it saves (any) or loads (a transposed one) a tensor.
double largest_tensor_bytes(const ParameterLayout& layout, bool transposed_only) {
  size_t largest = 0;
  for (const ParameterTensor& tensor : layout.tensors())
    if (tensor.hf_transposed || !transposed_only) largest = std::max(largest, tensor.global_size());
  return static_cast<double>(largest) * sizeof(float);
}

}  // namespace

std::string save_distributed_checkpoint(const std::string& dir, const LoadedPlan& plan,
                                        ModelStage& stage, DistributedOptimizer& optimizer,
                                        ProcessGroups& groups, const TrainState& state,
                                        const std::function<void()>& before_publish) {
  const ParameterLayout& layout = stage.layout();
  // Rank 0 makes the aside directory; the writers fill it; rank 0 publishes.
  std::unique_ptr<CheckpointDraft> draft;
  if (groups.world_rank == 0) draft = std::make_unique<CheckpointDraft>(dir, state);
  const std::string draft_path = broadcast_text(*groups.world, draft ? draft->path() : "");
  const MeshCoordinates& mesh = groups.mesh;
  const StageWriters writers{mesh.tensor_size, optimizer.state_readers()};
  const ShardFiles files = shard_files(plan, mesh, writers);
  // The first ZeRO group of each stage and tensor rank (every data rank
  // without ZeRO) brings each tensor to its writer among them (fp32 master weights
  // under bf16 storage, so a resumed run continues exactly); the replicas in
  // other groups have nothing to add.
  if (optimizer.reads_state()) {
    std::error_code error;
    if (!fs::is_directory(draft_path, error)) {
      char host[256] = "?";
      ::gethostname(host, sizeof(host) - 1);
      throw std::runtime_error(draft_path + ": world rank 0 made this directory, but rank " +
                               std::to_string(groups.world_rank) + " on " + host +
                               " cannot see it; --checkpoint-dir must be on a filesystem every "
                               "node shares");
    }
    require_host_memory(largest_tensor_bytes(layout, false) * 3,
                        dir + ": the largest tensor, whole, to write it",
                        "save on machines with more memory");
    write_stage_share(draft_path, plan, layout, groups, writers, files, optimizer);
  }
  // Every writer's files are complete before rank 0 indexes and publishes them.
  groups.world->barrier();
  std::string written;
  if (draft) {
    if (files.file_count > 1) {
      write_safetensors_index(draft->path(), kModel, files.model_bytes, files.model_map);
      write_safetensors_index(draft->path(), kOptimizer, 2 * files.model_bytes,
                              files.optimizer_map);
    }
    written = draft->publish(layout.config(), before_publish);
  }
  // Nobody goes on (or exits) before the checkpoint is complete.
  groups.world->barrier();
  return written;
}

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
