// profile.h: the measured profile the time model uses instead of the analytic
// roofline and alpha-beta links, read from [planner] profile_dir.
//
// File: <profile_dir>/profile.json, written by `paraplan profile` (format in
// planner/README.md). Keyed by device name (the [cluster] preset). Version 2
// holds per device: provenance (measured_on), compute times (per model shape,
// dtype, tensor-parallel degree and micro-batch size: seconds per micro-batch
// of one block's forward and backward without recomputation, the attention
// core's forward, the embedding's and head's forward and backward, on one
// device of the TP group, compute only), the optimizer step per parameter of a
// rank's shard, collectives (latency + bytes x seconds_per_byte per operation
// and group size) and GEMM rates (informational). Version 1 holds compute
// entries only and still loads.
//
// Every entry records how many processes ran the measurement at once on the
// node ("processes"; version 1: "parallel" true = every local device busy).
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

#include "planner/job_config.h"

namespace paraplan {

struct ProfiledTimes {
  double block_forward = 0;
  double block_backward = 0;
  double attention_core_forward = 0;
  double embedding_forward = 0;
  double embedding_backward = 0;
  double head_forward = 0;
  double head_backward = 0;
};

// Version 1's "parallel": true entries do not record their process count; they
// count as measured with every local device busy (the job's devices per node).
inline constexpr int kEveryLocalDevice = 0;

struct ProfileEntry {
  int seq_len = 0, d_model = 0, num_heads = 0, ffn_size = 0, vocab_size = 0;
  schema::DType dtype = schema::DType::Float32;
  int tensor_parallel = 1;
  int micro_batch_size = 1;
  bool parallel = true;
  int processes = kEveryLocalDevice;
  ProfiledTimes times;
  // Measured for this model's shape and dtype (any degree, any micro-batch size).
  bool same_model(const ModelConfig& model) const;
};

enum class CollectiveOperation { AllReduce, ReduceScatter, AllGather, SendReceive };
// "all_reduce", "reduce_scatter", "all_gather", "send_receive".
const char* collective_operation_name(CollectiveOperation operation);

// time(bytes) = latency + bytes x seconds_per_byte; bytes = the whole buffer
// (all_reduce), the whole input (reduce_scatter), the whole output
// (all_gather), one message (send_receive, group_size 2).
struct CollectiveEntry {
  CollectiveOperation operation = CollectiveOperation::AllReduce;
  int group_size = 2;
  int processes = 1;
  double latency = 0;
  double seconds_per_byte = 0;
  double seconds(double bytes) const { return latency + bytes * seconds_per_byte; }
};

// The whole optimizer step (norm, clip, AdamW) on one rank's shard, no communication.
struct OptimizerEntry {
  int processes = 1;
  double seconds_per_parameter = 0;
};

struct GemmEntry {
  int m = 0, n = 0, k = 0;
  schema::DType dtype = schema::DType::Float32;
  int processes = 1;
  double flops_per_second = 0;
};

struct ProfileProvenance {
  std::string backend, description, host, paraplan_version, date;
};

// Everything a profile file holds for one device.
struct DeviceProfile {
  int version = 2;
  std::optional<ProfileProvenance> measured_on;
  std::vector<ProfileEntry> compute;
  std::vector<OptimizerEntry> optimizer;
  std::vector<CollectiveEntry> collectives;
  std::vector<GemmEntry> gemm;
};

// Which entries lookups prefer: parallel_profile and the job's devices per node.
struct ProfilePreference {
  bool parallel = true;
  int processes_per_node = 1;
};

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

// A parsed profile file: its version, every device it names, and the one
// device asked for (nullopt when the file has no entry for it).
struct ProfileDocument {
  int version = 2;
  std::vector<std::string> devices;
  std::optional<DeviceProfile> device;
};

// Parses profile JSON text; path names the file in messages, which give the
// JSON path of the bad field (`profile.json: devices."cpu".collectives[0].latency
// is required`). Only `device`'s section is read in full.
ProfileDocument parse_profile_document(const std::string& text, const std::string& path,
                                       const std::string& device);

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

// Parses profile JSON text (path names it in messages) for one device.
std::optional<MeasuredProfile> parse_measured_profile(const std::string& text,
                                                      const std::string& path,
                                                      const std::string& device,
                                                      bool prefer_parallel,
                                                      int processes_per_node = 1);

}  // namespace paraplan
