// profile.h: the measured profile the time model uses instead of the analytic
// roofline and alpha-beta links, read from [planner] profile_dir.
//
// File: <profile_dir>/profile.json, written by `paraplan profile`; its format,
// reader and writer are schema/profile_format.h. Keyed by device name (the
// [cluster] preset).
//
// Lookups prefer, with parallel_profile = true, entries whose processes equals
// the job's devices per node, then the parallel entry with the nearest count,
// then one-process entries; with parallel_profile = false one-process entries,
// then the smallest count. Ties go to the earlier entry in the file.
//
// re_profile = true ignores an existing profile (it is to be measured again).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/job/job_config.h"
#include "schema/profile_format.h"

namespace paraplan {

// Which entries lookups prefer: parallel_profile and the job's devices per node.
struct ProfilePreference {
  bool parallel = true;
  int processes_per_node = 1;
};

// The entry was measured for this model's shape and dtype (any degree, any
// micro-batch size).
bool same_model(const ProfileEntry& entry, const ModelConfig& model);

class MeasuredProfile {
 public:
  MeasuredProfile() = default;
  // Compute entries only (as version 1), processes per node 1.
  MeasuredProfile(std::string path, std::string device, std::vector<ProfileEntry> entries,
                  bool prefer_parallel);
  MeasuredProfile(std::string path, std::string device, DeviceProfile data,
                  ProfilePreference preference);
  // The times for this model, degree and micro-batch size, if measured.
  std::optional<ProfiledTimes> lookup(const ModelConfig& model, int tensor_parallel,
                                      int micro_batch_size) const;
  // The preferred entries (nullptr when none matches).
  const ProfileEntry* find_compute(const ModelConfig& model, int tensor_parallel,
                                   int micro_batch_size) const;
  const CollectiveEntry* find_collective(CollectiveOperation operation, int group_size) const;
  const OptimizerEntry* find_optimizer() const;
  const HardwareEntry* find_hardware() const;
  const std::string& path() const { return path_; }
  const std::string& device() const { return device_; }
  size_t size() const { return data_.compute.size(); }  // compute entries
  const DeviceProfile& data() const { return data_; }
  const ProfilePreference& preference() const { return preference_; }
  // An entry's process count, version 1's parallel entries resolved to the
  // job's devices per node.
  int processes_of(int processes) const {
    return processes == kEveryLocalDevice ? preference_.processes_per_node : processes;
  }

 private:
  std::string path_, device_;
  DeviceProfile data_;
  ProfilePreference preference_;
  // Lower is preferred: (class, distance from the wanted count).
  std::pair<int, int> rank(int processes) const;
};

// What load_profile found, for the report.
struct ProfileLoad {
  std::string path;  // <profile_dir>/profile.json
  bool file_found = false;
  std::optional<MeasuredProfile> profile;  // what the time model uses
  // Why a file that exists is not used (re_profile, no entry for the device,
  // measured on a foreign backend): the report's line. Empty when used or absent.
  std::string unused_reason;
};

// The profile for config's cluster preset, preferring entries per
// parallel_profile and resolve_device_layout(config).devices_per_node. A file
// that exists but is malformed is an error naming the file and the field.
ProfileLoad load_profile(const JobConfig& config);

// load_profile(config).profile: nullopt when there is no file, no entry for the
// device, a foreign backend, or re_profile = true.
std::optional<MeasuredProfile> load_measured_profile(const JobConfig& config);

// The job as the planner costs it: for the `cpu` preset, the profile's
// measured peak (per dtype), memory bandwidth and threads per process
// (HardwareEntry, preferred by process count like every entry) replace the
// preset's figures that the job does not set explicitly, so the analytic
// model and MFU use what this machine does. Other presets, and profiles
// without hardware figures, leave the job as it is.
JobConfig with_measured_hardware(const JobConfig& config, const MeasuredProfile* profile);

// Parses profile JSON text (path names it in messages) for one device.
std::optional<MeasuredProfile> parse_measured_profile(const std::string& text,
                                                      const std::string& path,
                                                      const std::string& device,
                                                      bool prefer_parallel,
                                                      int processes_per_node = 1);

}  // namespace paraplan
