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

}  // namespace

void run_profile(const ProfileArguments& arguments, const std::vector<std::string>& extras,
                 const std::vector<std::string>& self_arguments) {
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

  // The shapes the planner considers: every TP degree of its meshes, every
  // micro-batch size of every data-parallel degree.
  std::set<int> tensor_parallel, micro_batches;
  for (const ParallelShape& mesh : space.meshes) {
    tensor_parallel.insert(mesh.tensor_parallel);
    for (int b : micro_batch_sizes(space, config, mesh.data_parallel)) micro_batches.insert(b);
  }
  const ProfileLoad stored = load_profile(config);  // validates a file that exists
  const std::string& device = config.cluster.preset;
  // Other devices' sections are kept as they are; this device's is read with
  // the format's reader and rewritten with its writer.
  json devices = json::object();
  DeviceProfile previous;
  if (stored.file_found) {
    const std::string text = read_bounded_file(stored.path, kProfileFile);
    const json existing = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (existing.is_object() && existing.contains("devices") && existing["devices"].is_object() &&
        existing.value("version", 1) == kProfileFormatVersion) {
      devices = existing["devices"];
      const ProfileDocument document = parse_profile_document(text, stored.path, device);
      if (document.device && !config.planner.re_profile) previous = *document.device;
    }
  }
  if (previous.measured_on && previous.measured_on->backend != arguments.backend)
    previous = DeviceProfile{};  // another backend's numbers: measure all again

  ProfileRequest request;
  request.model = shapes_of(config.model);
  request.tensor_parallel.assign(tensor_parallel.begin(), tensor_parallel.end());
  request.micro_batch_sizes.assign(micro_batches.begin(), micro_batches.end());
  request.backend = arguments.backend;
  request.dtype = config.model.dtype == schema::DType::BFloat16 ? kernels::DType::kBFloat16
                                                                : kernels::DType::kFloat32;
  request.repetitions = arguments.repetitions;
  request.minimum_window_seconds = arguments.minimum_window_seconds;
  // Collectives as the job runs them: its transport, up to its gradient bucket.
  request.transport = arguments.transport;
  request.largest_collective_bytes = static_cast<uint64_t>(config.training.gradient_bucket_size) *
                                     (request.dtype == kernels::DType::kBFloat16 ? 2 : 4);
  // This model's entries of this process count stay and are not measured
  // again; everything else in the section stays as well.
  size_t kept = 0;
  for (const ProfileEntry& entry : previous.compute)
    if (same_model(entry, config.model) && entry.processes == session.world_size()) {
      ++kept;
      request.already_measured.emplace_back(entry.tensor_parallel, entry.micro_batch_size);
    }
  if (leader)
    std::cout << "paraplan profile: device '" << device << "', backend " << arguments.backend
              << ", " << session.world_size() << " process(es) at once; "
              << request.tensor_parallel.size() << " tp degree(s) x "
              << request.micro_batch_sizes.size() << " micro-batch size(s), " << kept
              << " shape(s) kept from " << stored.path << std::endl;

  const DeviceProfile measured = measure_device_profile(request, session);
  if (!leader) return;

  DeviceProfile merged = previous;
  merged.version = kProfileFormatVersion;
  merged.measured_on = measured.measured_on;
  merged.compute.insert(merged.compute.end(), measured.compute.begin(), measured.compute.end());
  const int world = session.world_size();
  merged.optimizer = merge_by_processes(previous.optimizer, measured.optimizer, world);
  merged.collectives = merge_by_processes(previous.collectives, measured.collectives, world);
  merged.gemm = merge_by_processes(previous.gemm, measured.gemm, world);
  merged.hardware = merge_by_processes(previous.hardware, measured.hardware, world);
  devices[device] = device_profile_json(merged);
  std::filesystem::create_directories(std::filesystem::path(stored.path).parent_path());
  write_file_atomically(stored.path, profile_document_text(devices));

  // The peak the plans use: on the `cpu` preset this machine's, measured here.
  const MeasuredProfile written(stored.path, device, merged,
                                {config.planner.parallel_profile, processes});
  const double peak =
      with_measured_hardware(config, &written).cluster.peak_flops(config.model.dtype);
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
  std::cout << "profile written to " << stored.path << " (device '" << device << "', "
            << merged.compute.size() << " compute entries)" << std::endl;
}

}  // namespace paraplan
