// profile.h: measured compute times the time model uses instead of the analytic
// roofline, read from [planner] profile_dir.
//
// File: <profile_dir>/profile.json (written by `paraplan profile`; format in
// planner/README.md). Keyed by device name (the [cluster] preset), each device
// lists entries measured for one model shape, dtype, tensor-parallel degree and
// micro-batch size: seconds per micro-batch of one block's forward and backward
// (without recomputation), of the attention core's forward (what selective
// recompute repeats), and of the embedding and head forward and backward, on one
// device of the tensor-parallel group.
//
// Options: re_profile = true ignores an existing profile (it is to be measured
// again, so the analytic model stands in); parallel_profile selects entries
// measured with every local device busy at once ("parallel": true) over those
// measured on one device, falling back to the other kind when only it exists.
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

struct ProfileEntry {
  int seq_len = 0, d_model = 0, num_heads = 0, ffn_size = 0, vocab_size = 0;
  schema::DType dtype = schema::DType::Float32;
  int tensor_parallel = 1;
  int micro_batch_size = 1;
  bool parallel = true;
  ProfiledTimes times;
};

class MeasuredProfile {
 public:
  MeasuredProfile() = default;
  MeasuredProfile(std::string path, std::string device, std::vector<ProfileEntry> entries,
                  bool prefer_parallel);
  // The times for this model, degree and micro-batch size, if measured.
  std::optional<ProfiledTimes> lookup(const ModelConfig& model, int tensor_parallel,
                                      int micro_batch_size) const;
  const std::string& path() const { return path_; }
  const std::string& device() const { return device_; }
  size_t size() const { return entries_.size(); }

 private:
  std::string path_, device_;
  std::vector<ProfileEntry> entries_;
  bool prefer_parallel_ = true;
};

// The profile for config's cluster preset from [planner] profile_dir, or nullopt
// when there is none (no file, no entry for the device, or re_profile = true).
// A file that exists but is malformed is an error naming the file and the field.
std::optional<MeasuredProfile> load_measured_profile(const JobConfig& config);

// Parses profile JSON text (path names it in messages) for one device.
std::optional<MeasuredProfile> parse_measured_profile(const std::string& text,
                                                      const std::string& path,
                                                      const std::string& device,
                                                      bool prefer_parallel);

}  // namespace paraplan
