// profile_format.h: profile.json, the measured profile `paraplan profile`
// writes (runtime/measure/profiler.cc measures, launcher/profile_command.cc
// merges and writes) and the planner reads (planner/cost/profile.h): its one
// reader and its one writer, beside plan.fbs, so writer and reader cannot
// drift apart.
//
// File: {"format": "paraplan-profile", "version": 2, "devices": {<device name,
// the [cluster] preset>: {...}}}. Version 2 holds per device: provenance
// (measured_on), compute times (per model shape, dtype, tensor-parallel degree
// and micro-batch size: seconds per micro-batch of one block's forward and
// backward without recomputation, the attention core's forward, the
// embedding's and head's forward and backward, on one device of the TP group,
// compute only; optionally its pace in the real group, TensorGroupPace), the optimizer step per
// parameter of a rank's shard, collectives (per operation and group size: the time at each
// message size measured, "points", optional so still version 2, and the latency + bytes x
// seconds_per_byte line fitted to them), GEMM rates (informational) and the machine's peak GEMM
// rate per dtype and memory bandwidth ("hardware"; optional, ignored by readers that predate it,
// so still version 2), and each time entry's "clock" (wall or cpu, below; optional, absent =
// wall). Version 1 (a device's value is an array of compute entries) still reads.
// schema/README.md lists every field.
//
// Every entry records how many processes ran the measurement at once on the
// node ("processes"; version 1: "parallel" true = every local device busy).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan_generated.h"

namespace paraplan {

inline constexpr int kProfileFormatVersion = 2;

struct ProfiledTimes {
  double block_forward = 0;
  double block_backward = 0;
  double attention_core_forward = 0;
  double embedding_forward = 0;
  double embedding_backward = 0;
  double head_forward = 0;
  double head_backward = 0;
};

// What a time was measured by ("clock"; absent: wall). Wall: seconds the
// measurement took with `processes` processes busy at once. CPU (the CPU
// backend since this field exists): the CPU time one process got, capped at
// the wall time, i.e. seconds of a dedicated core's work, as replay counts
// a CPU rank's compute and transfers; sharing cores is the planner's to add.
enum class ProfileClock { kWall, kCpu };

// Version 1's "parallel": true entries do not record their process count; they
// count as measured with every local device busy (the job's devices per node).
inline constexpr int kEveryLocalDevice = 0;

// A tensor-parallel block in lock-step with its real group ("tensor_group",
// runtime/measure/group_pace.h): measured on the CPU backend when every rank
// has a core of its own (where ranks share cores, the planner's simulation
// models the waiting). A group moves at its slowest member's pace: each
// synchronizing call waits for the last to arrive, and compute between the
// calls runs slower than alone (the transfers' buffers evict its data).
struct TensorGroupPace {
  double forward_ratio = 1;   // a block's forward compute in the group / alone
  double backward_ratio = 1;  // its backward's
  // Seconds a member spends per synchronizing call that are neither its
  // compute nor the call's transfer (waiting for the last member, mean over
  // the members), as replay attributes a step's waits.
  double wait_per_call = 0;
};

struct ProfileEntry {
  int seq_len = 0, d_model = 0, num_heads = 0, ffn_size = 0, vocab_size = 0;
  schema::DType dtype = schema::DType::Float32;
  int tensor_parallel = 1;
  int micro_batch_size = 1;
  bool parallel = true;
  int processes = kEveryLocalDevice;
  ProfiledTimes times;
  ProfileClock clock = ProfileClock::kWall;
  std::optional<TensorGroupPace> tensor_group;  // absent: not measured
};

enum class CollectiveOperation { AllReduce, ReduceScatter, AllGather, SendReceive };
// "all_reduce", "reduce_scatter", "all_gather", "send_receive".
const char* collective_operation_name(CollectiveOperation operation);

// One measured call size: bytes as CollectiveEntry counts them, seconds a call.
struct CollectivePoint {
  double bytes = 0;
  double seconds = 0;
};

// A collective's time by buffer size; bytes = the whole buffer (all_reduce),
// the whole input (reduce_scatter), the whole output (all_gather), one message
// (send_receive, group_size 2). latency + bytes x seconds_per_byte is the
// line fitted to the measured points; the points themselves (bytes strictly
// increasing; absent in older profiles) give the time within their range, by
// linear interpolation between the two nearest: a line misses the bends
// where messages outgrow a cache or a library switches algorithm.
struct CollectiveEntry {
  CollectiveOperation operation = CollectiveOperation::AllReduce;
  int group_size = 2;
  int processes = 1;
  double latency = 0;
  double seconds_per_byte = 0;
  ProfileClock clock = ProfileClock::kWall;
  std::vector<CollectivePoint> points = {};
  // Between points: interpolated; beyond them: the nearest point plus the
  // line's slope (>= 0); no points: the line.
  double seconds(double bytes) const;
  // Every time (latency, slope, points) multiplied by factor.
  CollectiveEntry scaled(double factor) const;
};

// The whole optimizer step (norm, clip, AdamW) on one rank's shard, no communication.
struct OptimizerEntry {
  int processes = 1;
  double seconds_per_parameter = 0;
  ProfileClock clock = ProfileClock::kWall;
};

struct GemmEntry {
  int m = 0, n = 0, k = 0;
  schema::DType dtype = schema::DType::Float32;
  int processes = 1;
  double flops_per_second = 0;
};

// The machine's own figures, per process, measured with `processes`
// processes at once: the best GEMM rate of each storage dtype (a large square
// GEMM through the backend's linear op) and the streaming rate of an
// elementwise op (bytes read and written per second). The `cpu` preset takes
// its peak and bandwidth from here, so MFU is against what the machine does.
struct HardwareEntry {
  int processes = 1;
  int threads = 1;  // compute threads of each process
  int cores = 0;    // the machine's cores the processes share (0: not recorded)
  // What the processes got of them while measuring the peak: the sum over
  // the processes of CPU time / wall time (less than `cores` when others ran).
  double available_cores = 0;
  double peak_flops_float32 = 0;
  double peak_flops_bfloat16 = 0;
  double memory_bandwidth = 0;
  bool operator==(const HardwareEntry&) const = default;
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
  std::vector<HardwareEntry> hardware;
};

// A parsed profile file: its version, every device it names, and the one
// device asked for (nullopt when the file has no entry for it).
struct ProfileDocument {
  int version = kProfileFormatVersion;
  std::vector<std::string> devices;
  std::optional<DeviceProfile> device;
};

// The reader. Parses profile JSON text; path names the file in messages,
// which give the JSON path of the bad field (`profile.json:
// devices."cpu".collectives[0].latency is required`). Only `device`'s section
// is read in full.
ProfileDocument parse_profile_document(const std::string& text, const std::string& path,
                                       const std::string& device);

// The writer. One device's section in the current version (what
// parse_profile_document reads back as equal).
nlohmann::json device_profile_json(const DeviceProfile& device);
// The whole file: `devices` maps device names to sections (those of other
// devices kept as they were read).
std::string profile_document_text(const nlohmann::json& devices);

}  // namespace paraplan
