// distributed_checkpoint_save.cc: every (stage, tensor rank) writes its share
// of whole tensors (distributed_checkpoint.h), in line or in the background.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/checkpoint/distributed_checkpoint.h"
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

// Sends `root`'s text (the aside directory's path, a failure) to every rank.
// The communicators carry floats, so the bytes travel packed four to a float:
// MPI and NCCL copy them bit for bit.
std::string broadcast_text(Communicator& world, const std::string& text, int root = 0) {
  float length = static_cast<float>(text.size());  // a path or a message: exact below 2^24
  world.broadcast(&length, 1, root);
  std::vector<float> packed((static_cast<size_t>(length) + 3) / 4, 0.0f);
  if (world.rank() == root) std::memcpy(packed.data(), text.data(), text.size());
  if (!packed.empty()) world.broadcast(packed.data(), packed.size(), root);
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

// Where a writer's whole tensors go: its file, or (a background save) a copy
// in memory. Called with the stored name, the tensor and its whole data in
// paraplan's layout (the Hugging Face transposition is the sink's: on the
// writing thread for a background save).
using TensorSink = std::function<void(const std::string&, const ParameterTensor&, const float*)>;

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
                const TensorSink& sink) {
  std::vector<float> own, whole, received;
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
    sink(prefix + tensor.name, tensor, data);
  }
}

// A writer's two files: their declarations (the tensors it writes, in order)
// and paths; with the data too when they are written in the background.
struct ShareFiles {
  // A tensor held for the background: its stored name, the tensor (a copy:
  // a thread left to a failing process's end may outlive the stage) and its
  // whole data in paraplan's layout.
  struct Held {
    std::string name;
    ParameterTensor tensor;
    std::vector<float> data;
  };
  SafetensorsWriter model, moments;
  std::string model_path, optimizer_path;
  std::vector<Held> model_data, optimizer_data;

  // Streams the data held into both files, as Hugging Face lays it out, and
  // commits them.
  void write_held() const {
    std::vector<float> hugging_face;
    SafetensorsStream model_stream = model.open_stream(model_path);
    for (const Held& held : model_data)
      model_stream.append(held.name,
                          hugging_face_data(held.tensor, held.data.data(), hugging_face));
    SafetensorsStream optimizer_stream = moments.open_stream(optimizer_path);
    for (const Held& held : optimizer_data)
      optimizer_stream.append(held.name,
                              hugging_face_data(held.tensor, held.data.data(), hugging_face));
    model_stream.commit();
    optimizer_stream.commit();
  }
};

// This rank's files in the aside directory `draft_path`: its share of the
// stage's tensors (model) and of their moments (optimizer), streamed into
// them as they arrive, or, given `background` and room in memory, copied and returned for
// write_held (null for a rank that writes no file).
std::unique_ptr<ShareFiles> write_stage_share(const std::string& draft_path, const LoadedPlan& plan,
                                              const ParameterLayout& layout, ProcessGroups& groups,
                                              const StageWriters& writers, const ShardFiles& files,
                                              DistributedOptimizer& optimizer,
                                              const BackgroundWrite* background,
                                              std::string& in_line_note) {
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

  auto share = std::make_unique<ShareFiles>();
  share->model.set_metadata("format", "pt");  // transformers refuses safetensors without it
  share->moments.set_metadata("format", "pt");
  share->moments.set_metadata("content", "AdamW moments in model.safetensors layouts");
  double share_bytes = 0;
  for (const char* prefix : {"", "exp_avg.", "exp_avg_sq."})
    for (size_t i = 0; i < tensors.size(); ++i)
      if (writer[i] == own_writer) {
        (*prefix ? share->moments : share->model)
            .declare(prefix + tensors[i]->name, hugging_face_shape(*tensors[i]));
        share_bytes += static_cast<double>(tensors[i]->global_size()) * sizeof(float);
      }

  const int number =
      files.number[static_cast<size_t>(mesh.pipeline_rank * writers.count() + own_writer)];
  if (background != nullptr && number != 0)
    in_line_note = background_write_refusal(share_bytes, background->ranks_on_node,
                                            available_memory_bytes(), groups.world_rank);
  const bool in_background = background != nullptr && number != 0 && in_line_note.empty();
  std::unique_ptr<SafetensorsStream> model_stream, optimizer_stream;
  TensorSink model_sink, optimizer_sink;  // empty for a rank that writes nothing
  if (number != 0) {
    const fs::path dir(draft_path);
    share->model_path = (dir / files.name(kModel, number)).string();
    share->optimizer_path = (dir / files.name(kOptimizer, number)).string();
    const auto hold = [](std::vector<ShareFiles::Held>& held) {
      return [&held](const std::string& name, const ParameterTensor& tensor, const float* data) {
        held.push_back({name, tensor, std::vector<float>(data, data + tensor.global_size())});
      };
    };
    const auto stream_into = [](std::unique_ptr<SafetensorsStream>& stream) {
      return
          [&stream, hugging_face = std::vector<float>()](
              const std::string& name, const ParameterTensor& tensor, const float* data) mutable {
            stream->append(name, hugging_face_data(tensor, data, hugging_face));
          };
    };
    if (in_background) {
      model_sink = hold(share->model_data);
      optimizer_sink = hold(share->optimizer_data);
    } else {
      model_stream =
          std::make_unique<SafetensorsStream>(share->model.open_stream(share->model_path));
      optimizer_stream =
          std::make_unique<SafetensorsStream>(share->moments.open_stream(share->optimizer_path));
      model_sink = stream_into(model_stream);
      optimizer_sink = stream_into(optimizer_stream);
    }
  }
  using Array = DistributedOptimizer::StateArray;
  write_pass(stage, tensors, writer, optimizer, Array::kParameters, "", model_sink);
  write_pass(stage, tensors, writer, optimizer, Array::kFirstMoment, "exp_avg.", optimizer_sink);
  write_pass(stage, tensors, writer, optimizer, Array::kSecondMoment, "exp_avg_sq.",
             optimizer_sink);
  if (model_stream) {
    model_stream->commit();
    optimizer_stream->commit();
  }
  if (!in_background || number == 0) return nullptr;
  return share;
}

// The first half of a save: the aside directory (world rank 0 makes it), the
// transfers, and this rank's files written or (given `background`) held.
struct StartedSave {
  std::unique_ptr<CheckpointDraft> draft;  // world rank 0's
  ShardFiles files;
  std::unique_ptr<ShareFiles> held;  // this rank's, to write in the background
  std::string in_line_note;          // why this rank wrote its share in line instead
};

StartedSave start_save(const std::string& dir, const LoadedPlan& plan, ModelStage& stage,
                       DistributedOptimizer& optimizer, ProcessGroups& groups,
                       const TrainState& state, const BackgroundWrite* background) {
  const ParameterLayout& layout = stage.layout();
  StartedSave save;
  if (groups.world_rank == 0) save.draft = std::make_unique<CheckpointDraft>(dir, state);
  const std::string draft_path =
      broadcast_text(*groups.world, save.draft ? save.draft->path() : "");
  const MeshCoordinates& mesh = groups.mesh;
  const StageWriters writers{mesh.tensor_size, optimizer.state_readers()};
  save.files = shard_files(plan, mesh, writers);
  // The first ZeRO group of each stage and tensor rank (every data rank
  // without ZeRO) brings each tensor to its writer among them (fp32 master weights
  // under bf16 storage, so a resumed run continues exactly); the replicas in
  // other groups have nothing to add.
  if (!optimizer.reads_state()) return save;
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
  save.held = write_stage_share(draft_path, plan, layout, groups, writers, save.files, optimizer,
                                background, save.in_line_note);
  return save;
}

// World rank 0, once every writer's files are complete: the indexes of a
// sharded save, then the publication.
std::string publish_save(CheckpointDraft& draft, const ShardFiles& files,
                         const TransformerConfig& config,
                         const std::function<void()>& before_publish) {
  if (files.file_count > 1) {
    write_safetensors_index(draft.path(), kModel, files.model_bytes, files.model_map);
    write_safetensors_index(draft.path(), kOptimizer, 2 * files.model_bytes, files.optimizer_map);
  }
  return draft.publish(config, before_publish);
}

}  // namespace

std::string background_write_refusal(double share_bytes, int ranks_on_node, double available_bytes,
                                     int world_rank) {
  const int ranks = std::max(1, ranks_on_node);
  const double node_bytes = share_bytes * ranks;
  if (available_bytes <= 0 || node_bytes <= 0.8 * available_bytes) return "";
  return "rank " + std::to_string(world_rank) +
         " writes its share of this checkpoint in line: " + std::to_string(ranks) +
         " rank(s) on this node would hold " + gibibytes_text(node_bytes) +
         " for the background, more than 80% of the " + gibibytes_text(available_bytes) +
         " of memory available";
}

std::string save_distributed_checkpoint(const std::string& dir, const LoadedPlan& plan,
                                        ModelStage& stage, DistributedOptimizer& optimizer,
                                        ProcessGroups& groups, const TrainState& state,
                                        const std::function<void()>& before_publish) {
  StartedSave save = start_save(dir, plan, stage, optimizer, groups, state, nullptr);
  // Every writer's files are complete before rank 0 indexes and publishes them.
  groups.world->barrier();
  std::string written;
  if (save.draft)
    written = publish_save(*save.draft, save.files, stage.layout().config(), before_publish);
  // Nobody goes on (or exits) before the checkpoint is complete.
  groups.world->barrier();
  return written;
}

struct PendingCheckpoint::Save {
  StartedSave started;
  TransformerConfig config;
  std::thread writer;
  std::atomic<int> progress{static_cast<int>(Progress::kWriting)};
  std::string failure;  // set before progress turns kFailed
};

PendingCheckpoint::PendingCheckpoint(std::unique_ptr<Save> save, int64_t step)
    : save_(std::move(save)), step_(step) {}

PendingCheckpoint::~PendingCheckpoint() {
  if (save_ && save_->writer.joinable() && std::uncaught_exceptions() > 0) {
    // The job is ending with an error: it must not wait for the files (a
    // writer may take minutes while its peers wait). The thread keeps what it
    // uses; the process's end takes both, and the next save clears the
    // aside directory.
    save_->writer.detach();
    static_cast<void>(save_.release());
    return;
  }
  wait();
}

PendingCheckpoint::Progress PendingCheckpoint::progress() const {
  return static_cast<Progress>(save_->progress.load(std::memory_order_acquire));
}

const std::string& PendingCheckpoint::failure() const {
  return save_->failure;
}

const std::string& PendingCheckpoint::in_line_note() const {
  return save_->started.in_line_note;
}

void PendingCheckpoint::wait() {
  if (save_ && save_->writer.joinable()) save_->writer.join();
}

std::string PendingCheckpoint::job_failure(Communicator& world) const {
  // The lowest failing rank r gives the largest world.size() - r.
  double lowest = progress() == Progress::kFailed ? world.size() - world.rank() : 0;
  world.all_reduce(&lowest, 1, ReduceOp::kMax);
  const int root = world.size() - static_cast<int>(lowest);
  if (lowest == 0) throw std::logic_error("PendingCheckpoint::job_failure: no rank failed");
  const std::string reason =
      broadcast_text(world, root == world.rank() ? save_->failure.substr(0, 4096) : "", root);
  return "checkpoint of step " + std::to_string(step_) +
         " (written in the background) failed on world rank " + std::to_string(root) + ": " +
         reason;
}

std::string PendingCheckpoint::publish(const std::function<void()>& before_publish) {
  wait();
  if (progress() != Progress::kWritten)
    throw std::logic_error("PendingCheckpoint::publish: this rank's files are not written");
  if (!save_->started.draft) return "";
  return publish_save(*save_->started.draft, save_->started.files, save_->config, before_publish);
}

std::unique_ptr<PendingCheckpoint> start_distributed_checkpoint(
    const std::string& dir, const LoadedPlan& plan, ModelStage& stage,
    DistributedOptimizer& optimizer, ProcessGroups& groups, const TrainState& state,
    const BackgroundWrite& background) {
  auto save = std::make_unique<PendingCheckpoint::Save>();
  save->started = start_save(dir, plan, stage, optimizer, groups, state, &background);
  save->config = stage.layout().config();
  if (!save->started.held) {
    save->progress.store(static_cast<int>(PendingCheckpoint::Progress::kWritten));
  } else {
    PendingCheckpoint::Save* writing = save.get();
    writing->writer = std::thread([writing, before_writing = background.before_writing] {
      try {
        if (before_writing) before_writing();
        writing->started.held->write_held();
        writing->started.held.reset();  // the copy's memory goes as soon as it is on disk
        writing->progress.store(static_cast<int>(PendingCheckpoint::Progress::kWritten),
                                std::memory_order_release);
      } catch (const std::exception& error) {
        writing->failure = error.what();
        writing->progress.store(static_cast<int>(PendingCheckpoint::Progress::kFailed),
                                std::memory_order_release);
      }
    });
  }
  return std::unique_ptr<PendingCheckpoint>(new PendingCheckpoint(std::move(save), state.step));
}

}  // namespace paraplan
