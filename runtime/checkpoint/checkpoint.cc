// checkpoint.cc: saving and loading plan-independent checkpoints in Hugging
// Face form (model.safetensors + config.json, model/architecture.h) with the
// AdamW moments and the training position beside them.
#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc, _GNU_SOURCE)
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "common/json_fields.h"
#include "common/printable_text.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/model/architecture.h"

namespace paraplan {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModel = "model";
constexpr const char* kOptimizer = "optimizer";
constexpr const char* kConfigFile = "config.json";
constexpr const char* kStateFile = "train_state.json";
constexpr const char* kLatestFile = "latest";

std::string step_directory_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

// Removes what saves killed part-way left in `dir`: step_N.tmp-<pid>-<n>
// directories and latest.tmp-<pid>-<n> files (common/atomic_file.h names
// them) whose process is gone. A temporary of a live process, another save
// still being written, is left alone.
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const size_t marker = name.find(".tmp-");
    if (marker == std::string::npos) continue;
    const std::string_view base = std::string_view(name).substr(0, marker);
    if (base != kLatestFile && !parse_step_directory_name(base)) continue;
    const std::string_view rest = std::string_view(name).substr(marker + 5);
    long long pid = 0;
    const auto [end, parse_error] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (parse_error != std::errc() || end == rest.data() || end == rest.data() + rest.size() ||
        *end != '-' || pid <= 0 || pid > std::numeric_limits<pid_t>::max())
      continue;
    if (pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or unknown
    std::error_code ignored;
    fs::remove_all(entry.path(), ignored);
  }
}

// Transposes a row-major [rows, cols] matrix into [cols, rows].
void transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

// A whole layout's tensors (shape == global_shape), each name once: a
// stage's tied head copy shares the embedding's name.
void add_tensors(SafetensorsWriter& writer, const ParameterLayout& layout, const float* buffer,
                 const std::string& prefix) {
  std::set<std::string> written;
  for (const ParameterTensor& tensor : layout.tensors()) {
    if (!written.insert(tensor.name).second) continue;
    const float* data = buffer + tensor.offset;
    if (tensor.hf_transposed) {
      std::vector<float> hf;
      writer.add(prefix + tensor.name, hugging_face_shape(tensor),
                 hugging_face_data(tensor, data, hf));
    } else {
      writer.add_view(prefix + tensor.name, tensor.shape, data);
    }
  }
}

std::string read_text(const fs::path& path, const char* what, const FileKind& kind) {
  std::error_code error;
  if (!fs::exists(fs::symlink_status(path, error)))
    throw std::runtime_error(path.string() + ": cannot read " + what +
                             " (missing; the checkpoint is incomplete)");
  return read_bounded_file(path.string(), kind);
}

nlohmann::json parse_json_object(const std::string& text, const std::string& path,
                                 const char* what) {
  try {
    nlohmann::json json = nlohmann::json::parse(text);
    if (!json.is_object()) throw std::runtime_error("not a JSON object");
    return json;
  } catch (const std::exception& error) {
    throw std::runtime_error(path + ": " + what +
                             " is not valid JSON: " + printable_text(error.what(), 200));
  }
}

TransformerConfig parse_config(const fs::path& path) {
  return parse_checkpoint_config(read_text(path, "model config", kCheckpointJsonFile),
                                 path.string());
}

// Every field where the checkpoint's model differs from the plan's, one line each.
void check_config_matches(const TransformerConfig& saved, const TransformerConfig& plan,
                          const fs::path& path) {
  const std::vector<std::string> problems = config_differences(saved, plan);
  if (problems.empty()) return;
  std::string message;
  for (const std::string& problem : problems)
    message.append(message.empty() ? "" : "\n").append(path.string()).append(": ").append(problem);
  throw std::runtime_error(message);
}

// Reads every tensor of a whole layout (under `prefix`) from `files` into
// `buffer`.
void read_tensors(const TensorFileSet& files, const ParameterLayout& layout, float* buffer,
                  const std::string& prefix) {
  std::vector<float> scratch;
  for (const ParameterTensor& tensor : layout.tensors())
    read_whole_tensor(files, tensor, prefix, buffer + tensor.offset, scratch);
}

// Puts the complete directory `from` at `to`; an existing `to` (the same step
// saved again) is swapped out atomically where the filesystem allows.
void publish_directory(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return;
  if (errno != EEXIST && errno != ENOTEMPTY)
    throw std::runtime_error("cannot rename " + from.string() + " to " + to.string() + ": " +
                             std::strerror(errno));
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) {
    // No atomic exchange here: move the old one aside first.
    const fs::path aside = unique_temp_path(to);
    fs::rename(to, aside);
    fs::rename(from, to);
    fs::remove_all(aside);
    return;
  }
  fs::remove_all(from);  // now holds the replaced step directory
}

}  // namespace

std::optional<int64_t> parse_step_directory_name(std::string_view name) {
  constexpr std::string_view prefix = "step_";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  const std::string_view digits = name.substr(prefix.size());
  int64_t step = 0;
  if (digits.empty() || digits.size() > 18 ||
      std::from_chars(digits.data(), digits.data() + digits.size(), step).ptr !=
          digits.data() + digits.size() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return step;
}

CheckpointDraft::CheckpointDraft(const std::string& dir, const TrainState& state)
    : dir_(dir), state_(state) {
  if (state.step < 0 || state.step > kMaxTrainStep || state.next_train_sample < 0 ||
      state.next_train_sample > kMaxTrainSample)
    throw std::runtime_error(
        dir + ": cannot save a checkpoint for step " + std::to_string(state.step) + " at sample " +
        std::to_string(state.next_train_sample) + " (valid: steps 0 to " +
        std::to_string(kMaxTrainStep) + ", samples 0 to " + std::to_string(kMaxTrainSample) + ")");
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir))
    throw std::runtime_error(dir + ": cannot create checkpoint directory" +
                             (error ? ": " + error.message() : std::string()));
  remove_stale_temporaries(dir);
  name_ = step_directory_name(state.step);
  const fs::path temp = unique_temp_path(fs::path(dir) / name_);
  fs::create_directory(temp);
  temp_path_ = temp.string();
}

CheckpointDraft::~CheckpointDraft() {
  std::error_code ignored;
  if (!published_) fs::remove_all(temp_path_, ignored);
}

std::string CheckpointDraft::publish(const TransformerConfig& config,
                                     const std::function<void()>& before_publish) {
  const fs::path temp(temp_path_);
  write_file_atomically(temp / kConfigFile, hugging_face_config(config).dump(2) + "\n");
  nlohmann::ordered_json train_state;
  train_state["format_version"] = kCheckpointFormatVersion;
  train_state["step"] = state_.step;
  train_state["next_train_sample"] = state_.next_train_sample;
  train_state["seed"] = state_.seed;
  if (state_.data_order) train_state["data_order"] = data_order_to_json(*state_.data_order);
  write_file_atomically(temp / kStateFile, train_state.dump(2) + "\n");
  fsync_directory(temp);

  if (before_publish) before_publish();
  const fs::path final_dir = fs::path(dir_) / name_;
  publish_directory(temp, final_dir);
  published_ = true;
  fsync_directory(dir_);
  // Only now, with the step directory complete, does 'latest' move to it.
  write_file_atomically(fs::path(dir_) / kLatestFile, name_ + "\n");
  return final_dir.string();
}

std::string save_checkpoint(const std::string& dir, const ParameterLayout& layout,
                            const float* params, const float* first_moment,
                            const float* second_moment, const TrainState& state,
                            const std::function<void()>& before_publish) {
  if ((first_moment == nullptr) != (second_moment == nullptr))
    throw std::runtime_error(dir + ": save both AdamW moments or neither");
  CheckpointDraft draft(dir, state);
  SafetensorsWriter model;
  model.set_metadata("format", "pt");  // transformers refuses safetensors without it
  add_tensors(model, layout, params, "");
  model.write((fs::path(draft.path()) / single_file_name(kModel)).string());
  if (first_moment != nullptr) {
    SafetensorsWriter optimizer;
    optimizer.set_metadata("format", "pt");
    optimizer.set_metadata("content", "AdamW moments in model.safetensors layouts");
    add_tensors(optimizer, layout, first_moment, "exp_avg.");
    add_tensors(optimizer, layout, second_moment, "exp_avg_sq.");
    optimizer.write((fs::path(draft.path()) / single_file_name(kOptimizer)).string());
  }
  return draft.publish(layout.config(), before_publish);
}

double largest_tensor_bytes(const ParameterLayout& layout, bool transposed_only) {
  size_t largest = 0;
  for (const ParameterTensor& tensor : layout.tensors())
    if (tensor.hf_transposed || !transposed_only) largest = std::max(largest, tensor.global_size());
  return static_cast<double>(largest) * sizeof(float);
}

std::vector<int64_t> hugging_face_shape(const ParameterTensor& tensor) {
  if (!tensor.hf_transposed) return tensor.global_shape;
  return {tensor.global_shape[1], tensor.global_shape[0]};
}

const float* hugging_face_data(const ParameterTensor& tensor, const float* whole,
                               std::vector<float>& scratch) {
  if (!tensor.hf_transposed) return whole;
  scratch.resize(tensor.global_size());
  transpose(whole, tensor.global_shape[0], tensor.global_shape[1], scratch.data());
  return scratch.data();
}

std::string stored_tensor_name(const TensorFileSet& files, const ParameterTensor& tensor,
                               const std::string& prefix) {
  std::string name = prefix + tensor.name;
  // Checkpoints from the Hugging Face hub name GPT2Model's tensors without "transformer.".
  const std::string hub_prefix = "transformer.";
  if (!files.has(name) && prefix.empty() && name.rfind(hub_prefix, 0) == 0 &&
      files.has(name.substr(hub_prefix.size())))
    name = name.substr(hub_prefix.size());
  if (!files.has(name))
    throw std::runtime_error(files.path() + ": missing tensor '" + name + "' (the plan's model " +
                             "needs it; the file holds " + std::to_string(files.tensor_count()) +
                             " tensors)");
  return name;
}

void read_whole_tensor(const TensorFileSet& files, const ParameterTensor& tensor,
                       const std::string& prefix, float* whole, std::vector<float>& scratch) {
  const std::string name = stored_tensor_name(files, tensor, prefix);
  if (!tensor.hf_transposed) {
    files.read(name, whole, tensor.global_shape);
    return;
  }
  scratch.resize(tensor.global_size());
  files.read(name, scratch.data(), hugging_face_shape(tensor));
  transpose(scratch.data(), tensor.global_shape[1], tensor.global_shape[0], whole);
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path root(path);
  if (!fs::exists(root)) throw std::runtime_error(path + ": checkpoint path does not exist");
  const fs::path latest = root / kLatestFile;
  if (fs::is_regular_file(latest)) {
    std::string name = read_text(latest, "latest checkpoint name", kCheckpointLatestFile);
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.front())))
      name.erase(0, 1);
    if (name.empty())
      throw std::runtime_error(latest.string() +
                               " is empty; it should name a step directory such as step_00000100");
    // Only a step directory of this checkpoint directory: never a path that
    // leads elsewhere ("../../etc", "/etc").
    if (!parse_step_directory_name(name))
      throw std::runtime_error(latest.string() + " holds '" + printable_text(name) +
                               "', not the name of a step directory of " + root.string() +
                               "; it must hold one line such as step_00000100");
    const fs::path step_dir = root / name;
    if (!fs::is_directory(step_dir))
      throw std::runtime_error(latest.string() + " names " + name + " but " + step_dir.string() +
                               " does not exist");
    return step_dir.string();
  }
  if (fs::is_directory(root) && has_tensor_files(root.string(), kModel)) return root.string();
  throw std::runtime_error(path + ": not a checkpoint: neither a checkpoint directory (no '" +
                           kLatestFile + "' file) nor a step directory (no " +
                           single_file_name(kModel) + " or " + index_file_name(kModel) + ")");
}

TransformerConfig parse_checkpoint_config(const std::string& text, const std::string& path) {
  return config_from_hugging_face(parse_json_object(text, path, "model config"), path);
}

TrainState parse_train_state(const std::string& text, const std::string& path) {
  const nlohmann::json json = parse_json_object(text, path, "training state");
  const int64_t version = json_integer(json, "format_version", path);
  if (version < 1 || version > kCheckpointFormatVersion)
    throw std::runtime_error(path + ": format_version " + std::to_string(version) +
                             " is not supported; this paraplan reads versions 1 to " +
                             std::to_string(kCheckpointFormatVersion));
  TrainState state;
  state.step = json_integer(json, "step", path, std::nullopt, 0, kMaxTrainStep);
  state.next_train_sample =
      json_integer(json, "next_train_sample", path, std::nullopt, 0, kMaxTrainSample);
  const auto seed = json.find("seed");
  if (seed == json.end() || !seed->is_number_unsigned())
    throw std::runtime_error(path + ": field 'seed' must be a non-negative integer");
  state.seed = seed->get<uint64_t>();
  const auto data_order = json.find("data_order");
  if (data_order != json.end() && !data_order->is_null())
    state.data_order = data_order_from_json(*data_order, path);
  return state;
}

TrainState read_train_state(const std::string& path) {
  const fs::path state_path = fs::path(resolve_checkpoint(path)) / kStateFile;
  return parse_train_state(read_text(state_path, "training state", kCheckpointJsonFile),
                           state_path.string());
}

TransformerConfig read_checkpoint_config(const std::string& path) {
  return parse_config(fs::path(resolve_checkpoint(path)) / kConfigFile);
}

void check_checkpoint_config(const std::string& step_dir, const TransformerConfig& config) {
  const fs::path path = fs::path(step_dir) / kConfigFile;
  check_config_matches(parse_config(path), config, path);
}

TensorFileSet open_model_tensors(const std::string& step_dir) {
  return TensorFileSet::open(step_dir, kModel);
}

TensorFileSet open_optimizer_tensors(const std::string& step_dir) {
  if (!has_tensor_files(step_dir, kOptimizer))
    throw std::runtime_error((fs::path(step_dir) / single_file_name(kOptimizer)).string() +
                             ": missing; the checkpoint holds no optimizer state to resume "
                             "(it was saved without moments)");
  return TensorFileSet::open(step_dir, kOptimizer);
}

TrainState read_step_train_state(const std::string& step_dir, bool required) {
  // A weights-only load (sampling, --init-from) accepts a directory without
  // training state, e.g. a Hugging Face export; resuming needs it.
  const fs::path state_path = fs::path(step_dir) / kStateFile;
  if (!required && !fs::exists(state_path)) return TrainState{};
  return parse_train_state(read_text(state_path, "training state", kCheckpointJsonFile),
                           state_path.string());
}

TrainState load_checkpoint(const std::string& path, const ParameterLayout& layout, float* params,
                           float* first_moment, float* second_moment) {
  const std::string step_dir = resolve_checkpoint(path);
  check_checkpoint_config(step_dir, layout.config());
  read_tensors(open_model_tensors(step_dir), layout, params, "");
  if (first_moment != nullptr || second_moment != nullptr) {
    const TensorFileSet optimizer = open_optimizer_tensors(step_dir);
    if (first_moment != nullptr) read_tensors(optimizer, layout, first_moment, "exp_avg.");
    if (second_moment != nullptr) read_tensors(optimizer, layout, second_moment, "exp_avg_sq.");
  }
  return read_step_train_state(step_dir, first_moment != nullptr || second_moment != nullptr);
}

}  // namespace paraplan
