// profile_report.cc: the report's lines on what the measured profile supplied
// and what it missed (see profile_report.h).
#include "planner/profile_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <type_traits>

#include "planner/cost/compute_model.h"

namespace paraplan {
namespace {

std::string str(long long value) {
  return std::to_string(value);
}

std::string number(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

template <typename Values>
std::string join(const Values& values, const std::string& separator = ", ") {
  std::string text;
  for (const auto& value : values) {
    if (!text.empty()) text += separator;
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(value)>>)
      text += str(value);
    else
      text += value;
  }
  return text;
}

const char* dtype_name(schema::DType dtype) {
  return dtype == schema::DType::BFloat16 ? "bfloat16" : "float32";
}

std::string model_shape(int seq_len, int d_model, int heads, int ffn, int vocab,
                        schema::DType dtype) {
  return "seq " + str(seq_len) + ", d_model " + str(d_model) + ", heads " + str(heads) + ", ffn " +
         str(ffn) + ", vocab " + str(vocab) + ", " + dtype_name(dtype);
}

std::string provenance_line(const DeviceProfile& data) {
  std::string line = "profile: format version " + str(data.version);
  if (!data.measured_on) return line + ", no provenance (measured_on)";
  const ProfileProvenance& origin = *data.measured_on;
  line += ", measured on " +
          (origin.description.empty() ? "an undescribed device" : origin.description);
  if (!origin.date.empty()) line += ", " + origin.date;
  std::vector<std::string> details;
  if (!origin.backend.empty()) details.push_back("backend " + origin.backend);
  if (!origin.host.empty()) details.push_back("host " + origin.host);
  if (!origin.paraplan_version.empty()) details.push_back("paraplan " + origin.paraplan_version);
  if (!details.empty()) line += " (" + join(details) + ")";
  return line;
}

// "all_reduce (groups 2, 4), send_receive (groups 2)".
std::string collective_list(const std::set<std::pair<CollectiveOperation, int>>& collectives) {
  std::map<CollectiveOperation, std::vector<int>> groups;
  for (const auto& [operation, size] : collectives) groups[operation].push_back(size);
  std::vector<std::string> parts;
  for (const auto& [operation, sizes] : groups)
    parts.push_back(std::string(collective_operation_name(operation)) + " (groups " + join(sizes) +
                    ")");
  return join(parts);
}

// Compute: per (tp, micro-batch) shape of the settings considered.
struct ComputeCoverage {
  std::set<std::pair<int, int>> considered, missing, measured_shapes;
  long long measured_settings = 0;
  std::vector<std::string> other_models;  // the profile's other model shapes, as text
};

ComputeCoverage compute_coverage(const ModelConfig& model, const MeasuredProfile& profile,
                                 const std::vector<PlanSetting>& settings,
                                 std::set<int>& processes_used) {
  ComputeCoverage coverage;
  for (const PlanSetting& setting : settings) {
    // (Context parallelism's settings are costed analytically: a profile
    // measures blocks of whole sequences.)
    if (setting.shape.context_parallel > 1) continue;
    const std::pair<int, int> shape{setting.shape.tensor_parallel, setting.micro_batch_size};
    coverage.considered.insert(shape);
    const ProfileEntry* entry = profile.find_compute(model, shape.first, shape.second);
    if (entry == nullptr) {
      coverage.missing.insert(shape);
      continue;
    }
    ++coverage.measured_settings;
    processes_used.insert(profile.processes_of(entry->processes));
  }
  for (const ProfileEntry& entry : profile.data().compute) {
    if (same_model(entry, model)) {
      coverage.measured_shapes.insert({entry.tensor_parallel, entry.micro_batch_size});
      continue;
    }
    const std::string shape = model_shape(entry.seq_len, entry.d_model, entry.num_heads,
                                          entry.ffn_size, entry.vocab_size, entry.dtype);
    if (std::find(coverage.other_models.begin(), coverage.other_models.end(), shape) ==
        coverage.other_models.end())
      coverage.other_models.push_back(shape);
  }
  return coverage;
}

std::string compute_line(const ModelConfig& model, const ProfileLoad& load,
                         const ComputeCoverage& coverage, size_t settings, const std::string& run) {
  const MeasuredProfile& profile = *load.profile;
  const std::string named = "profile " + load.path + " (" + profile.device() + ")";
  const std::string this_job = model_shape(model.seq_len, model.d_model, model.num_heads,
                                           model.ffn_size, model.vocab_size, model.dtype);
  const std::string settings_count = str(static_cast<long long>(settings));
  if (profile.data().compute.empty())
    return named + " has no compute entries; analytic compute time used — " + run;
  if (coverage.measured_shapes.empty())
    return named + " was measured for other model shapes (" + join(coverage.other_models, "; ") +
           "); analytic compute time used — " + run + " (this job: " + this_job + ")";
  if (coverage.missing.empty())
    return "profile compute: measured for all " + settings_count + " settings considered (" +
           format_shapes(coverage.considered) + ")";
  return "profile compute: measured for " + str(coverage.measured_settings) + " of " +
         settings_count + " settings considered; no compute entry for " +
         format_shapes(coverage.missing) +
         " (measured: " + format_shapes(coverage.measured_shapes) +
         "); analytic compute time for those";
}

// The tensor-parallel groups' measured pace (profile_format.h's TensorGroupPace).
void describe_tensor_pace(const ModelConfig& model, const MeasuredProfile& profile,
                          const std::set<std::pair<int, int>>& considered,
                          std::vector<std::string>& lines) {
  std::vector<std::string> paced;
  for (const auto& [t, b] : considered) {
    const ProfileEntry* entry = t > 1 ? profile.find_compute(model, t, b) : nullptr;
    if (entry == nullptr || !entry->tensor_group) continue;
    const TensorGroupPace& pace = *entry->tensor_group;
    paced.push_back("tp " + str(t) + " x micro-batch " + str(b) + ": compute x" +
                    number("%.3g", pace.forward_ratio) + " forward, x" +
                    number("%.3g", pace.backward_ratio) + " backward, " +
                    number("%.3g", pace.wait_per_call * 1e6) + " us waiting per call");
  }
  if (!paced.empty())
    lines.push_back("profile tensor-parallel pace (used where ranks have cores of their own): " +
                    join(paced, "; "));
}

// Collectives: every group some setting's stages are charged for.
std::string collectives_line(const JobConfig& config, const MeasuredProfile& profile,
                             const std::vector<PlanSetting>& settings,
                             std::set<int>& processes_used) {
  std::set<std::pair<CollectiveOperation, int>> measured, unmeasured, inter_node;
  for (const PlanSetting& setting : settings) {
    const StageCostModel costs(config, setting, &profile);
    for (const ChargedCollective& charged : costs.charged_collectives()) {
      const std::pair<CollectiveOperation, int> key{charged.operation, charged.group_size};
      const CollectiveEntry* entry = profile.find_collective(charged.operation, charged.group_size);
      if (charged.inter_node) {
        inter_node.insert(key);
      } else if (entry != nullptr) {
        measured.insert(key);
        processes_used.insert(profile.processes_of(entry->processes));
      } else {
        unmeasured.insert(key);
      }
    }
  }
  std::vector<std::string> parts;
  if (!measured.empty()) parts.push_back("measured " + collective_list(measured));
  if (!unmeasured.empty()) parts.push_back("analytic, no entry: " + collective_list(unmeasured));
  if (!inter_node.empty())
    parts.push_back("inter-node, analytic link: " + collective_list(inter_node));
  if (parts.empty()) parts.push_back("none charged");
  return "profile collectives: " + join(parts, "; ");
}

// The optimizer step (training only), the hardware entry and the GEMM rates.
void describe_optimizer_and_hardware(const JobConfig& config, const MeasuredProfile& profile,
                                     std::vector<std::string>& lines,
                                     std::set<int>& processes_used) {
  if (config.planner.is_train) {
    if (const OptimizerEntry* optimizer = profile.find_optimizer(); optimizer != nullptr) {
      lines.push_back("profile optimizer: measured " +
                      number("%.3g", optimizer->seconds_per_parameter) +
                      " s per parameter of a rank's shard");
      processes_used.insert(profile.processes_of(optimizer->processes));
    } else {
      lines.push_back("profile optimizer: no entry; analytic (" +
                      number("%g", optimizer_bytes_per_parameter(config.model.dtype)) +
                      " bytes per parameter at " +
                      number("%g", config.cluster.memory_bandwidth_gbps) + " GB/s)");
    }
  }
  if (const HardwareEntry* hardware = profile.find_hardware()) {
    const bool used = config.cluster.preset == "cpu";
    lines.push_back("profile hardware: " + number("%.3g", hardware->peak_flops_float32 / 1e9) +
                    " GFLOP/s float32, " + number("%.3g", hardware->peak_flops_bfloat16 / 1e9) +
                    " GFLOP/s bfloat16, memory " +
                    number("%.3g", hardware->memory_bandwidth / 1e9) + " GB/s per process (" +
                    str(hardware->processes) + " at once)" +
                    (used ? "; the cpu preset's peak and bandwidth (MFU against them) where the "
                            "job does not set them"
                          : "; informational (GPU presets keep their spec-sheet peaks)"));
    processes_used.insert(profile.processes_of(hardware->processes));
  }
  if (!profile.data().gemm.empty()) {
    std::vector<std::string> rates;
    for (const GemmEntry& gemm : profile.data().gemm)
      rates.push_back(str(gemm.m) + " x " + str(gemm.n) + " x " + str(gemm.k) + " " +
                      dtype_name(gemm.dtype) + " " + number("%.3g", gemm.flops_per_second) +
                      " FLOP/s (processes " + str(gemm.processes) + ")");
    lines.push_back("profile gemm (informational): " + join(rates, "; "));
  }
}

// Process counts that stand in for the wanted one.
void describe_stand_in_processes(const MeasuredProfile& profile, std::set<int> processes_used,
                                 std::vector<std::string>& lines) {
  const ProfilePreference& preference = profile.preference();
  const int wanted = preference.parallel ? preference.processes_per_node : 1;
  processes_used.erase(wanted);
  if (!processes_used.empty())
    lines.push_back("profile processes: wanted " + str(wanted) +
                    (preference.parallel ? " (parallel_profile = true: this job's devices per node)"
                                         : " (parallel_profile = false: one device at a time)") +
                    "; entries measured with " + join(processes_used) +
                    " processes used for lack of exact ones");
}

}  // namespace

std::string format_shapes(const std::set<std::pair<int, int>>& shapes) {
  std::map<int, std::vector<int>> sizes_of;
  for (const auto& [tp, micro_batch] : shapes) sizes_of[tp].push_back(micro_batch);
  std::vector<std::pair<std::vector<int>, std::vector<int>>> groups;  // (tps, sizes)
  for (const auto& [tp, sizes] : sizes_of) {
    const std::vector<int>& these = sizes;  // clang before 16 cannot capture a structured binding
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const auto& group) { return group.second == these; });
    if (same != groups.end())
      same->first.push_back(tp);
    else
      groups.push_back({{tp}, sizes});
  }
  std::vector<std::string> parts;
  for (const auto& [tps, sizes] : groups)
    parts.push_back("tp " + join(tps) + " x micro-batch " + join(sizes));
  return join(parts, "; ");
}

std::vector<std::string> describe_profile_use(const JobConfig& config, const ProfileLoad& load,
                                              const std::vector<PlanSetting>& settings) {
  const std::string run = "run `paraplan profile --config " + config.source + "`";
  if (!load.file_found)
    return {"profile: none at " + load.path + "; analytic time model — " + run + " to measure"};
  if (!load.profile) return {load.unused_reason};
  const MeasuredProfile& profile = *load.profile;
  std::vector<std::string> lines = {provenance_line(profile.data())};
  std::set<int> processes_used;  // of the entries the time model took
  const ComputeCoverage coverage =
      compute_coverage(config.model, profile, settings, processes_used);
  lines.push_back(compute_line(config.model, load, coverage, settings.size(), run));
  describe_tensor_pace(config.model, profile, coverage.considered, lines);
  lines.push_back(collectives_line(config, profile, settings, processes_used));
  describe_optimizer_and_hardware(config, profile, lines, processes_used);
  describe_stand_in_processes(profile, processes_used, lines);
  return lines;
}

}  // namespace paraplan
