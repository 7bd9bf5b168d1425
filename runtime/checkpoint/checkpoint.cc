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

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kConfigFile = "config.json";
constexpr const char* kStateFile = "train_state.json";
constexpr const char* kLatestFile = "latest";

std::string step_directory_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

// The step of a step directory name: "step_" and 1 to 18 digits, as
// step_directory_name writes it; nullopt for anything else.
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

// The shape Hugging Face stores: Conv1D weights are [in, out], the reverse of ours.
std::vector<int64_t> hf_shape(const ParameterTensor& tensor) {
  if (!tensor.hf_transposed) return tensor.shape;
  return {tensor.shape[1], tensor.shape[0]};
}

// Transposes a row-major [rows, cols] matrix into [cols, rows].
void transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

void add_tensors(SafetensorsWriter& writer, const ParameterLayout& layout, const float* buffer,
                 const std::string& prefix) {
  std::set<std::string> written;  // a stage's tied head copy shares the embedding's name
  for (const ParameterTensor& tensor : layout.tensors()) {
    if (!written.insert(tensor.name).second) continue;
    const float* data = buffer + tensor.offset;
    if (tensor.hf_transposed) {
      std::vector<float> hf(tensor.size);
      transpose(data, tensor.shape[0], tensor.shape[1], hf.data());
      writer.add(prefix + tensor.name, hf_shape(tensor), hf.data());
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

// Reads every tensor of the layout (under `prefix`) from `file` into `buffer`,
// transposing Conv1D weights back to [out, in].
void read_tensors(const SafetensorsFile& file, const ParameterLayout& layout, float* buffer,
                  const std::string& prefix) {
  for (const ParameterTensor& tensor : layout.tensors()) {
    std::string name = prefix + tensor.name;
    // Checkpoints from the Hugging Face hub name GPT2Model's tensors without "transformer.".
    const std::string hub_prefix = "transformer.";
    if (!file.has(name) && prefix.empty() && name.rfind(hub_prefix, 0) == 0 &&
        file.has(name.substr(hub_prefix.size())))
      name = name.substr(hub_prefix.size());
    if (!file.has(name))
      throw std::runtime_error(file.path() + ": missing tensor '" + name + "' (the plan's model " +
                               "needs it; the file holds " + std::to_string(file.tensors().size()) +
                               " tensors)");
    float* out = buffer + tensor.offset;
    if (tensor.hf_transposed) {
      std::vector<float> hf(tensor.size);
      file.read(name, hf.data(), hf_shape(tensor));
      transpose(hf.data(), tensor.shape[1], tensor.shape[0], out);
    } else {
      file.read(name, out, tensor.shape);
    }
  }
}

// Removes a directory tree when the save it belongs to fails part-way.
struct RemoveOnFailure {
  fs::path path;
  bool armed = true;
  ~RemoveOnFailure() {
    std::error_code ignored;
    if (armed) fs::remove_all(path, ignored);
  }
};

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

std::string save_checkpoint(const std::string& dir, const ParameterLayout& layout,
                            const float* params, const float* first_moment,
                            const float* second_moment, const TrainState& state,
                            const std::function<void()>& before_publish) {
  if (state.step < 0 || state.step > kMaxTrainStep || state.next_train_sample < 0 ||
      state.next_train_sample > kMaxTrainSample)
    throw std::runtime_error(
        dir + ": cannot save a checkpoint for step " + std::to_string(state.step) + " at sample " +
        std::to_string(state.next_train_sample) + " (valid: steps 0 to " +
        std::to_string(kMaxTrainStep) + ", samples 0 to " + std::to_string(kMaxTrainSample) + ")");
  if ((first_moment == nullptr) != (second_moment == nullptr))
    throw std::runtime_error(dir + ": save both AdamW moments or neither");
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir))
    throw std::runtime_error(dir + ": cannot create checkpoint directory" +
                             (error ? ": " + error.message() : std::string()));

  remove_stale_temporaries(dir);

  const std::string name = step_directory_name(state.step);
  const fs::path final_dir = fs::path(dir) / name;
  RemoveOnFailure temp{unique_temp_path(final_dir)};
  fs::create_directory(temp.path);

  SafetensorsWriter model;
  model.set_metadata("format", "pt");  // transformers refuses safetensors without it
  add_tensors(model, layout, params, "");
  model.write((temp.path / kModelFile).string());
  if (first_moment != nullptr) {
    SafetensorsWriter optimizer;
    optimizer.set_metadata("format", "pt");
    optimizer.set_metadata("content", "AdamW moments in model.safetensors layouts");
    add_tensors(optimizer, layout, first_moment, "exp_avg.");
    add_tensors(optimizer, layout, second_moment, "exp_avg_sq.");
    optimizer.write((temp.path / kOptimizerFile).string());
  }
  write_file_atomically(temp.path / kConfigFile,
                        hugging_face_config(layout.config()).dump(2) + "\n");
  nlohmann::ordered_json train_state;
  train_state["format_version"] = kCheckpointFormatVersion;
  train_state["step"] = state.step;
  train_state["next_train_sample"] = state.next_train_sample;
  train_state["seed"] = state.seed;
  if (state.data_order) train_state["data_order"] = data_order_to_json(*state.data_order);
  write_file_atomically(temp.path / kStateFile, train_state.dump(2) + "\n");
  fsync_directory(temp.path);

  if (before_publish) before_publish();
  publish_directory(temp.path, final_dir);
  temp.armed = false;
  fsync_directory(dir);
  // Only now, with the step directory complete, does 'latest' move to it.
  write_file_atomically(fs::path(dir) / kLatestFile, name + "\n");
  return final_dir.string();
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
  if (fs::is_directory(root) && fs::exists(root / kModelFile)) return root.string();
  throw std::runtime_error(path + ": not a checkpoint: neither a checkpoint directory (no '" +
                           kLatestFile + "' file) nor a step directory (no " + kModelFile + ")");
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

TrainState load_checkpoint(const std::string& path, const ParameterLayout& layout, float* params,
                           float* first_moment, float* second_moment) {
  const fs::path step_dir = resolve_checkpoint(path);
  check_config_matches(parse_config(step_dir / kConfigFile), layout.config(),
                       step_dir / kConfigFile);

  read_tensors(SafetensorsFile::open((step_dir / kModelFile).string()), layout, params, "");
  if (first_moment != nullptr || second_moment != nullptr) {
    const fs::path optimizer_path = step_dir / kOptimizerFile;
    if (!fs::exists(optimizer_path))
      throw std::runtime_error(optimizer_path.string() +
                               ": missing; the checkpoint holds no optimizer state to resume "
                               "(it was saved without moments)");
    const SafetensorsFile optimizer = SafetensorsFile::open(optimizer_path.string());
    if (first_moment != nullptr) read_tensors(optimizer, layout, first_moment, "exp_avg.");
    if (second_moment != nullptr) read_tensors(optimizer, layout, second_moment, "exp_avg_sq.");
  }

  // A weights-only load (sampling) accepts a directory without training state,
  // e.g. a Hugging Face GPT-2 export; resuming needs it.
  const fs::path state_path = step_dir / kStateFile;
  if (first_moment == nullptr && second_moment == nullptr && !fs::exists(state_path))
    return TrainState{};
  return parse_train_state(read_text(state_path, "training state", kCheckpointJsonFile),
                           state_path.string());
}

}  // namespace paraplan
