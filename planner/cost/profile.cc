// profile.cc: the measured profile's lookups (process-count preference) and
// loading it for a job: which device, foreign backends, re_profile (see profile.h).
#include "planner/cost/profile.h"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "common/bounded_file.h"
#include "planner/job/device_layout.h"

namespace paraplan {

bool same_model(const ProfileEntry& entry, const ModelConfig& model) {
  return entry.seq_len == model.seq_len && entry.d_model == model.d_model &&
         entry.num_heads == model.num_heads && entry.ffn_size == model.ffn_size &&
         entry.vocab_size == model.vocab_size && entry.dtype == model.dtype;
}

MeasuredProfile::MeasuredProfile(std::string path, std::string device,
                                 std::vector<ProfileEntry> entries, bool prefer_parallel)
    : path_(std::move(path)), device_(std::move(device)), preference_{prefer_parallel, 1} {
  data_.version = 1;
  data_.compute = std::move(entries);
}

MeasuredProfile::MeasuredProfile(std::string path, std::string device, DeviceProfile data,
                                 ProfilePreference preference)
    : path_(std::move(path)),
      device_(std::move(device)),
      data_(std::move(data)),
      preference_(preference) {}

std::pair<int, int> MeasuredProfile::rank(int processes) const {
  const int wanted = preference_.processes_per_node;
  if (preference_.parallel) {
    // Version 1's parallel entries: every local device busy, as wanted.
    if (processes == kEveryLocalDevice || processes == wanted) return {0, 0};
    if (processes > 1) return {1, std::abs(processes - wanted)};
    return {2, 0};
  }
  if (processes == 1) return {0, 0};
  if (processes == kEveryLocalDevice) return {1, wanted};
  return {1, processes};
}

namespace {

// The best-ranked of the entries that match (the earlier one on ties).
template <typename Entry, typename Matches, typename Rank>
const Entry* preferred(const std::vector<Entry>& entries, Matches matches, Rank rank) {
  const Entry* best = nullptr;
  std::pair<int, int> best_rank;
  for (const Entry& entry : entries) {
    if (!matches(entry)) continue;
    const std::pair<int, int> key = rank(entry.processes);
    if (best == nullptr || key < best_rank) best = &entry, best_rank = key;
  }
  return best;
}

}  // namespace

const ProfileEntry* MeasuredProfile::find_compute(const ModelConfig& model, int tensor_parallel,
                                                  int micro_batch_size) const {
  return preferred(
      data_.compute,
      [&](const ProfileEntry& entry) {
        return same_model(entry, model) && entry.tensor_parallel == tensor_parallel &&
               entry.micro_batch_size == micro_batch_size;
      },
      [&](int processes) { return rank(processes); });
}

std::optional<ProfiledTimes> MeasuredProfile::lookup(const ModelConfig& model, int tensor_parallel,
                                                     int micro_batch_size) const {
  const ProfileEntry* entry = find_compute(model, tensor_parallel, micro_batch_size);
  if (entry == nullptr) return std::nullopt;
  return entry->times;
}

const CollectiveEntry* MeasuredProfile::find_collective(CollectiveOperation operation,
                                                        int group_size) const {
  return preferred(
      data_.collectives,
      [&](const CollectiveEntry& entry) {
        return entry.operation == operation && entry.group_size == group_size;
      },
      [&](int processes) { return rank(processes); });
}

const OptimizerEntry* MeasuredProfile::find_optimizer() const {
  return preferred(
      data_.optimizer, [](const OptimizerEntry&) { return true; },
      [&](int processes) { return rank(processes); });
}

const HardwareEntry* MeasuredProfile::find_hardware() const {
  return preferred(
      data_.hardware, [](const HardwareEntry&) { return true; },
      [&](int processes) { return rank(processes); });
}

JobConfig with_measured_hardware(const JobConfig& config, const MeasuredProfile* profile) {
  if (profile == nullptr || config.cluster.preset != "cpu") return config;
  const HardwareEntry* hardware = profile->find_hardware();
  if (hardware == nullptr) return config;
  JobConfig measured = config;
  ClusterConfig& cluster = measured.cluster;
  if (!config.was_set("cluster.peak_tflops_fp32"))
    cluster.peak_tflops_fp32 = hardware->peak_flops_float32 / 1e12;
  if (!config.was_set("cluster.peak_tflops_bf16"))
    cluster.peak_tflops_bf16 = hardware->peak_flops_bfloat16 / 1e12;
  if (!config.was_set("cluster.memory_bandwidth_gbps"))
    cluster.memory_bandwidth_gbps = hardware->memory_bandwidth / 1e9;
  if (!config.was_set("cluster.compute_units")) cluster.compute_units = hardware->threads;
  if (!config.was_set("cluster.cores_per_node"))
    cluster.cores_per_node =
        hardware->available_cores > 0 ? hardware->available_cores : hardware->cores;
  return measured;
}

namespace {

std::string expand_home(const std::string& path) {
  if (path.rfind("~/", 0) != 0) return path;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + path.substr(1);
}

std::string device_list(const std::vector<std::string>& devices) {
  std::string text;
  for (const std::string& device : devices) text += (text.empty() ? "" : ", ") + device;
  return "[" + text + "]";
}

}  // namespace

std::optional<MeasuredProfile> parse_measured_profile(const std::string& text,
                                                      const std::string& path,
                                                      const std::string& device,
                                                      bool prefer_parallel,
                                                      int processes_per_node) {
  ProfileDocument document = parse_profile_document(text, path, device);
  if (!document.device) return std::nullopt;
  return MeasuredProfile(path, device, std::move(*document.device),
                         {prefer_parallel, processes_per_node});
}

ProfileLoad load_profile(const JobConfig& config) {
  ProfileLoad load;
  load.path = expand_home(config.planner.profile_dir) + "/profile.json";
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::symlink_status(load.path, error))) return load;
  load.file_found = true;
  const std::string& device = config.cluster.preset;
  if (config.planner.re_profile) {
    load.unused_reason = "re_profile = true: profile " + load.path +
                         " is ignored (to be measured again); analytic time model used";
    return load;
  }
  ProfileDocument document =
      parse_profile_document(read_bounded_file(load.path, kProfileFile), load.path, device);
  if (!document.device) {
    load.unused_reason = "profile " + load.path + " has devices " + device_list(document.devices) +
                         ", none for this job's device '" + device + "': analytic time model used";
    return load;
  }
  if (const auto& origin = document.device->measured_on; origin && !origin->backend.empty()) {
    const bool cpu_backend = origin->backend == "cpu", cpu_preset = device == "cpu";
    if (cpu_backend != cpu_preset) {
      load.unused_reason = "profile " + load.path + " (" + device +
                           ") is foreign: measured on backend '" + origin->backend + "'" +
                           (origin->description.empty() ? "" : " (" + origin->description + ")") +
                           " for " +
                           (cpu_preset ? "the CPU preset 'cpu'" : "GPU preset '" + device + "'") +
                           "; analytic time model used — run `paraplan profile --config " +
                           config.source + "` on this device";
      return load;
    }
  }
  const ProfilePreference preference{config.planner.parallel_profile,
                                     resolve_device_layout(config).devices_per_node};
  load.profile.emplace(load.path, device, std::move(*document.device), preference);
  return load;
}

std::optional<MeasuredProfile> load_measured_profile(const JobConfig& config) {
  return load_profile(config).profile;
}

}  // namespace paraplan
