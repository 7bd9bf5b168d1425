// profile_command.cc: `paraplan profile`: shapes from the job, measurements
// from runtime/profiler, merged into profile.json.
#include "launcher/profile_command.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "launcher/launch.h"
#include "launcher/model_from.h"
#include "planner/cost/profile.h"
#include "planner/job/job_config.h"
#include "planner/search/search_space.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/measure/profiler.h"
#include "schema/plan_io.h"

namespace paraplan {

namespace {

using nlohmann::json;

TransformerConfig shapes_of(const ModelConfig& model) {
  TransformerConfig config;
  config.architecture = model.architecture == schema::Architecture::Llama ? Architecture::kLlama
                                                                          : Architecture::kGpt2;
  config.num_kv_heads = model.num_kv_heads;
  config.vocab_size = model.vocab_size;
  config.seq_len = model.seq_len;
  config.num_layers = model.num_layers;
  config.d_model = model.d_model;
  config.num_heads = model.num_heads;
  config.ffn_size = model.ffn_size;
  config.tied_embeddings = model.tied_embeddings;
  config.qkv_bias = model.qkv_bias;
  return config;
}

// Replaces the entries of `list` measured with `processes` by `fresh`.
template <typename Entry>
std::vector<Entry> merge_by_processes(const std::vector<Entry>& list,
                                      const std::vector<Entry>& fresh, int processes) {
  std::vector<Entry> merged;
  for (const Entry& entry : list)
    if (entry.processes != processes) merged.push_back(entry);
  merged.insert(merged.end(), fresh.begin(), fresh.end());
  return merged;
}

// The extras as config overrides, with --profile-dir; throws on anything
// else and on a repetition count below 1.
std::vector<ConfigOverride> profile_overrides(const ProfileArguments& arguments,
                                              const std::vector<std::string>& extras) {
  std::vector<std::string> unknown;
  std::vector<ConfigOverride> overrides = parse_override_arguments(extras, &unknown);
  if (!unknown.empty())
    throw std::runtime_error("profile: unexpected argument '" + unknown.front() +
                             "'; overrides take the form --section.key value");
  if (!arguments.profile_dir.empty())
    overrides.push_back({"planner.profile_dir", arguments.profile_dir});
  if (arguments.repetitions < 1)
    throw std::runtime_error("--repetitions: " + std::to_string(arguments.repetitions) +
                             "; must be >= 1");
  return overrides;
}

// The shapes the planner considers: every TP degree of its meshes, every
// micro-batch size of every data-parallel degree.
struct ProfiledShapes {
  std::set<int> tensor_parallel, micro_batches;
};

ProfiledShapes shapes_to_profile(const SearchSpace& space, const JobConfig& config) {
  ProfiledShapes shapes;
  for (const ParallelShape& mesh : space.meshes) {
    shapes.tensor_parallel.insert(mesh.tensor_parallel);
    for (int b : micro_batch_sizes(space, config, mesh.data_parallel))
      shapes.micro_batches.insert(b);
  }
  return shapes;
}

// What profile.json holds: every device's section (other devices' are kept as
// they are), and this device's entries to build on, read with the format's
// reader (none under re_profile or when another backend measured them).
struct StoredProfile {
  json devices = json::object();
  DeviceProfile previous;
};

StoredProfile read_stored_profile(const ProfileLoad& stored, const JobConfig& config,
                                  const std::string& backend) {
  StoredProfile result;
  if (stored.file_found) {
    const std::string text = read_bounded_file(stored.path, kProfileFile);
    const json existing = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (existing.is_object() && existing.contains("devices") && existing["devices"].is_object() &&
        existing.value("version", 1) == kProfileFormatVersion) {
      result.devices = existing["devices"];
      const ProfileDocument document =
          parse_profile_document(text, stored.path, config.cluster.preset);
      if (document.device && !config.planner.re_profile) result.previous = *document.device;
    }
  }
  if (result.previous.measured_on && result.previous.measured_on->backend != backend)
    result.previous = DeviceProfile{};  // another backend's numbers: measure all again
  return result;
}

ProfileRequest profile_request(const ProfileArguments& arguments, const JobConfig& config,
                               const ProfiledShapes& shapes) {
  ProfileRequest request;
  request.model = shapes_of(config.model);
  request.tensor_parallel.assign(shapes.tensor_parallel.begin(), shapes.tensor_parallel.end());
  request.micro_batch_sizes.assign(shapes.micro_batches.begin(), shapes.micro_batches.end());
  request.backend = arguments.backend;
  request.dtype = config.model.dtype == schema::DType::BFloat16 ? kernels::DType::kBFloat16
                                                                : kernels::DType::kFloat32;
  request.repetitions = arguments.repetitions;
  request.minimum_window_seconds = arguments.minimum_window_seconds;
  // Collectives as the job runs them: its transport, up to its gradient bucket.
  request.transport = arguments.transport;
  request.largest_collective_bytes = static_cast<uint64_t>(config.training.gradient_bucket_size) *
                                     (request.dtype == kernels::DType::kBFloat16 ? 2 : 4);
  return request;
}

// This model's entries of this process count stay and are not measured
// again (everything else in the section stays as well). Returns how many.
size_t keep_measured(const DeviceProfile& previous, const ModelConfig& model, int processes,
                     ProfileRequest& request) {
  size_t kept = 0;
  for (const ProfileEntry& entry : previous.compute)
    if (same_model(entry, model) && entry.processes == processes) {
      ++kept;
      request.already_measured.emplace_back(entry.tensor_parallel, entry.micro_batch_size);
    }
  return kept;
}

// The previous section with the new measurements: compute entries added, the
// rest replaced where measured with as many processes.
DeviceProfile merged_profile(const DeviceProfile& previous, const DeviceProfile& measured,
                             int world) {
  DeviceProfile merged = previous;
  merged.version = kProfileFormatVersion;
  merged.measured_on = measured.measured_on;
  merged.compute.insert(merged.compute.end(), measured.compute.begin(), measured.compute.end());
  merged.optimizer = merge_by_processes(previous.optimizer, measured.optimizer, world);
  merged.collectives = merge_by_processes(previous.collectives, measured.collectives, world);
  merged.gemm = merge_by_processes(previous.gemm, measured.gemm, world);
  merged.hardware = merge_by_processes(previous.hardware, measured.hardware, world);
  return merged;
}

// What was measured, each GEMM against `peak` (the one the plans use).
void print_measurements(const DeviceProfile& measured, double peak, const std::string& device) {
  for (const HardwareEntry& hardware : measured.hardware)
    std::cout << "  peak: " << hardware.peak_flops_float32 / 1e9 << " GFLOP/s float32, "
              << hardware.peak_flops_bfloat16 / 1e9 << " GFLOP/s bfloat16, memory "
              << hardware.memory_bandwidth / 1e9 << " GB/s per process (" << hardware.processes
              << " at once, " << hardware.threads << " thread(s) each)" << std::endl;
  for (const GemmEntry& gemm : measured.gemm)
    std::cout << "  GEMM " << gemm.m << " x " << gemm.n << " x " << gemm.k << ": "
              << gemm.flops_per_second / 1e9
              << " GFLOP/s per process = " << 100.0 * gemm.flops_per_second / peak << "% of the '"
              << device << "' peak plans use" << std::endl;
  for (const CollectiveEntry& collective : measured.collectives)
    std::cout << "  " << collective_operation_name(collective.operation) << " over "
              << collective.group_size << ": latency " << collective.latency * 1e6 << " us, "
              << 1e-9 / std::max(1e-30, collective.seconds_per_byte) << " GB/s" << std::endl;
  std::cout << "  optimizer: " << measured.optimizer[0].seconds_per_parameter * 1e9
            << " ns per parameter" << std::endl;
}

}  // namespace

void run_profile(const ProfileArguments& arguments, const std::vector<std::string>& extras,
                 const std::vector<std::string>& self_arguments) {
  const std::vector<ConfigOverride> overrides =
      with_model_from(arguments.model_from, arguments.config, profile_overrides(arguments, extras));
  const JobConfig config = load_job_config(arguments.config, overrides);
  const SearchSpace space = resolve_search_space(config);
  const int processes = config.planner.parallel_profile ? space.layout.devices_per_node : 1;

  // Parallel profiling: one process per local device, started here by mpirun.
  if (processes > 1 && !MpiSession::launched_by_mpirun()) {
    exec_command(local_mpirun_command(processes, self_arguments, arguments.mpirun));
    return;
  }
  MpiSession session;
  const bool leader = session.world_rank() == 0;

  const ProfiledShapes shapes = shapes_to_profile(space, config);
  const ProfileLoad stored = load_profile(config);  // validates a file that exists
  const std::string& device = config.cluster.preset;
  StoredProfile file = read_stored_profile(stored, config, arguments.backend);
  ProfileRequest request = profile_request(arguments, config, shapes);
  const size_t kept = keep_measured(file.previous, config.model, session.world_size(), request);
  if (leader)
    std::cout << "paraplan profile: device '" << device << "', backend " << arguments.backend
              << ", " << session.world_size() << " process(es) at once; "
              << request.tensor_parallel.size() << " tp degree(s) x "
              << request.micro_batch_sizes.size() << " micro-batch size(s), " << kept
              << " shape(s) kept from " << stored.path << std::endl;

  const DeviceProfile measured = measure_device_profile(request, session);
  if (!leader) return;

  const DeviceProfile merged = merged_profile(file.previous, measured, session.world_size());
  file.devices[device] = device_profile_json(merged);
  std::filesystem::create_directories(std::filesystem::path(stored.path).parent_path());
  write_file_atomically(stored.path, profile_document_text(file.devices));

  // The peak the plans use: on the `cpu` preset this machine's, measured here.
  const MeasuredProfile written(stored.path, device, merged,
                                {config.planner.parallel_profile, processes});
  const double peak =
      with_measured_hardware(config, &written).cluster.peak_flops(config.model.dtype);
  print_measurements(measured, peak, device);
  std::cout << "profile written to " << stored.path << " (device '" << device << "', "
            << merged.compute.size() << " compute entries)" << std::endl;
}

}  // namespace paraplan
