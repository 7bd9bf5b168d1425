// search_space.cc: resolve_search_space, the job's devices and the candidate
// meshes, micro-batch sizes and ZeRO settings (rules in search_space.h).
#include "planner/search/search_space.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "planner/cost/model_counts.h"
#include "planner/job/module_names.h"
#include "planner/job/partition_constraints.h"
#include "schema/model_limits.h"

namespace paraplan {
namespace {

std::string str(int64_t value) {
  return std::to_string(value);
}

[[noreturn]] void fail(const JobConfig& config, const std::string& message) {
  throw std::runtime_error(config.source + ": " + message);
}

// Why tensor-parallel degree t cannot split the model, or "" when it can.
std::string tensor_parallel_problem(const JobConfig& config, int t, int devices_per_node) {
  const ModelConfig& m = config.model;
  if (devices_per_node % t != 0)
    return "does not divide the " + str(devices_per_node) +
           " devices per node (a tensor-parallel group sits inside one node)";
  if (m.num_heads % t != 0) return "does not divide [model] num_heads = " + str(m.num_heads);
  if (kv_heads(m) % t != 0)
    return "does not divide [model] num_kv_heads = " + str(kv_heads(m)) +
           " (each tensor-parallel rank holds whole KV heads)";
  if (m.d_model % t != 0) return "does not divide [model] d_model = " + str(m.d_model);
  if (m.ffn_size % t != 0) return "does not divide [model] ffn_size = " + str(m.ffn_size);
  if (m.vocab_size % t != 0)
    return "does not divide [model] vocab_size = " + str(m.vocab_size) +
           " (the runtime splits the vocabulary over the tensor-parallel ranks; pad vocab_size "
           "to a multiple of " +
           str(t) + ", e.g. " + str((m.vocab_size + t - 1) / t * t) + ")";
  return "";
}

}  // namespace

DeviceLayout resolve_device_layout(const JobConfig& config) {
  const PlannerOptions& p = config.planner;
  const ClusterConfig& cluster = config.cluster;
  const bool mesh_given = config.was_set("planner.mesh_row") || config.was_set("planner.mesh_col");
  int64_t world = 0;
  std::string world_source;
  if (config.was_set("planner.world_size")) {
    world = p.world_size, world_source = "[planner] world_size";
  } else if (mesh_given) {
    world = int64_t{p.mesh_row} * p.mesh_col, world_source = "[planner] mesh_row x mesh_col";
  } else if (config.was_set("cluster.num_nodes")) {
    world = int64_t{cluster.num_nodes} * cluster.devices_per_node;
    world_source = "[cluster] num_nodes x devices_per_node";
  } else {
    world = int64_t{std::max(p.pipeline_nstages, 1)} * std::max(p.tensor_parallel_degree, 1) *
            std::max(p.data_parallel_degree, 1);
    world_source = "the fixed degrees";
  }
  if (world > (1 << 24)) fail(config, world_source + " = " + str(world) + " is too large");

  DeviceLayout layout;
  if (mesh_given) {
    layout.devices_per_node = p.mesh_col;
  } else if (world <= cluster.devices_per_node) {
    layout.devices_per_node = static_cast<int>(world);
  } else {
    layout.devices_per_node = cluster.devices_per_node;
  }
  if (world % layout.devices_per_node != 0)
    fail(config,
         "the world size " + str(world) + " (" + world_source +
             ") is not a multiple of [cluster] devices_per_node = " + str(layout.devices_per_node) +
             "; use whole nodes or set [planner] mesh_row and mesh_col");
  layout.num_nodes = static_cast<int>(world / layout.devices_per_node);
  if (config.was_set("cluster.num_nodes") && layout.num_nodes > cluster.num_nodes)
    fail(config, "the job needs " + str(layout.num_nodes) + " nodes of " +
                     str(layout.devices_per_node) + " devices (world size " + str(world) +
                     "), but [cluster] num_nodes = " + str(cluster.num_nodes));
  if (layout.devices_per_node > cluster.devices_per_node && mesh_given)
    fail(config, "[planner] mesh_col = " + str(p.mesh_col) +
                     " exceeds [cluster] devices_per_node = " + str(cluster.devices_per_node));
  return layout;
}

std::vector<bool> sequence_parallel_choices(const JobConfig& config, int tp,
                                            std::vector<std::string>& excluded) {
  const std::optional<bool> asked = config.planner.sequence_parallel;
  if (tp == 1 || asked == false) return {false};
  if (config.model.seq_len % tp != 0) {
    if (asked == true) {
      const std::string reason = "tp " + std::to_string(tp) +
                                 ": [planner] sequence_parallel = true, but tp does not divide "
                                 "seq_len " +
                                 std::to_string(config.model.seq_len);
      if (std::find(excluded.begin(), excluded.end(), reason) == excluded.end())
        excluded.push_back(reason);
      return {};
    }
    return {false};
  }
  if (asked == true) return {true};
  return {false, true};
}

SearchSpace resolve_search_space(const JobConfig& config) {
  validate_job_config(config);
  const PlannerOptions& p = config.planner;
  const ModelConfig& model = config.model;
  SearchSpace space;
  space.layout = resolve_device_layout(config);
  const int world = space.layout.world_size();
  const int global = config.training.global_batch_size;

  // Fixed degrees must fit the world and the model.
  const int fixed_pp = p.pipeline_nstages, fixed_tp = p.tensor_parallel_degree,
            fixed_dp = p.data_parallel_degree;
  space.pipeline_fixed = fixed_pp > 0;
  for (const auto& [name, degree] : {std::pair<const char*, int>{"pipeline_nstages", fixed_pp},
                                     {"tensor_parallel_degree", fixed_tp},
                                     {"data_parallel_degree", fixed_dp}})
    if (degree > 0 && world % degree != 0)
      fail(config, std::string("[planner] ") + name + " = " + str(degree) +
                       " does not divide the world size " + str(world) + "; choose a divisor of " +
                       str(world));
  const int64_t fixed_product =
      int64_t{std::max(fixed_pp, 1)} * std::max(fixed_tp, 1) * std::max(fixed_dp, 1);
  if (world % fixed_product != 0 ||
      (fixed_pp > 0 && fixed_tp > 0 && fixed_dp > 0 && fixed_product != world))
    fail(config, "[planner] pipeline_nstages x tensor_parallel_degree x data_parallel_degree = " +
                     str(fixed_product) + " does not " +
                     (fixed_pp > 0 && fixed_tp > 0 && fixed_dp > 0 ? "equal" : "divide") +
                     " the world size " + str(world));
  if (fixed_tp > 0) {
    const std::string problem =
        tensor_parallel_problem(config, fixed_tp, space.layout.devices_per_node);
    if (!problem.empty())
      fail(config, "[planner] tensor_parallel_degree = " + str(fixed_tp) + " " + problem);
  }
  if (fixed_pp > int64_t{model.num_layers} + 2)
    fail(config, "[planner] pipeline_nstages = " + str(fixed_pp) +
                     " exceeds [model] num_layers + 2 = " + str(int64_t{model.num_layers} + 2) +
                     " (every stage but the first and last must hold a block)");
  if (fixed_dp > 0 && global % fixed_dp != 0)
    fail(config, "[training] global_batch_size = " + str(global) +
                     " is not divisible by [planner] data_parallel_degree = " + str(fixed_dp));

  // Micro-batching.
  if (config.was_set("training.micro_batch_size")) {
    space.fixed_micro_batch_size = config.training.micro_batch_size;
    space.micro_batch_field = "[training] micro_batch_size";
  } else if (config.was_set("planner.micro_batch_size")) {
    space.fixed_micro_batch_size = p.micro_batch_size;
    space.micro_batch_field = "[planner] micro_batch_size";
  }
  if (config.was_set("planner.update_freq")) space.fixed_num_micro_batches = p.update_freq;
  // ZeRO.
  space.zero_ngroups_fixed = config.was_set("planner.zero_ngroups");
  space.zero_ngroups = p.zero_ngroups;
  if (config.was_set("planner.zero_stage")) {
    space.zero_stages = {p.zero_stage};
  } else {
    space.zero_stages = {0, 1};
  }
  if (fixed_dp > 0 && space.zero_ngroups_fixed && fixed_dp % p.zero_ngroups != 0)
    fail(config, "[planner] zero_ngroups = " + str(p.zero_ngroups) +
                     " does not divide [planner] data_parallel_degree = " + str(fixed_dp) +
                     "; the data-parallel ranks are split into equal ZeRO groups");

  // Per-layer recompute and stage boundaries, then the constraints file.
  for (schema::RecomputeMode lowest : recompute_modes_from_modules(
           p.recompute_modules, model.num_layers, config.source, model.architecture))
    space.layer_recompute.push_back({lowest, schema::RecomputeMode::Full});
  space.boundary_allowed = pipeline_boundaries_from_pivots(p.pipeline_pivots, model.num_layers,
                                                           config.source, model.architecture);
  space.boundaries_restricted =
      !p.pipeline_pivots.empty() && !split_module_list(p.pipeline_pivots).empty();
  std::vector<int> allowed_tensor_parallel;
  if (!p.partition_constraints_path.empty())
    apply_partition_constraints(config, load_partition_constraints(config), space,
                                allowed_tensor_parallel);

  // Meshes.
  for (int tp = 1; tp <= space.layout.devices_per_node; ++tp) {
    if (world % tp != 0 || (fixed_tp > 0 && tp != fixed_tp)) continue;
    const std::string problem = tensor_parallel_problem(config, tp, space.layout.devices_per_node);
    if (!problem.empty()) {
      space.excluded.push_back("tp " + str(tp) + ": " + problem);
      continue;
    }
    if (!allowed_tensor_parallel.empty() &&
        std::find(allowed_tensor_parallel.begin(), allowed_tensor_parallel.end(), tp) ==
            allowed_tensor_parallel.end()) {
      space.excluded.push_back("tp " + str(tp) + ": not allowed by " +
                               p.partition_constraints_path);
      continue;
    }
    for (int pp = 1; pp <= world / tp; ++pp) {
      if ((world / tp) % pp != 0 || (fixed_pp > 0 && pp != fixed_pp)) continue;
      const int dp = world / tp / pp;
      if (fixed_dp > 0 && dp != fixed_dp) continue;
      if (pp > int64_t{model.num_layers} + 2 || pp > kMaxPipelineStages) {
        space.excluded.push_back("pp " + str(pp) + ": more stages than num_layers + 2 or " +
                                 str(kMaxPipelineStages));
        continue;
      }
      if (global % dp != 0) {
        space.excluded.push_back("pp " + str(pp) + " x tp " + str(tp) + " (dp " + str(dp) +
                                 "): dp does not divide global_batch_size " + str(global));
        continue;
      }
      for (bool sequence_parallel : sequence_parallel_choices(config, tp, space.excluded))
        space.meshes.push_back({pp, dp, tp, sequence_parallel});
    }
  }
  // A fixed micro-batching every mesh rejects is one clear error, not a search result.
  bool any_micro_batch = false;
  for (const ParallelShape& shape : space.meshes)
    any_micro_batch |= !micro_batch_sizes(space, config, shape.data_parallel).empty();
  if (!space.meshes.empty() && !any_micro_batch) {
    const int dp = space.meshes.front().data_parallel;
    if (space.fixed_micro_batch_size > 0 &&
        global % (int64_t{space.fixed_micro_batch_size} * dp) == 0 &&
        global / dp / space.fixed_micro_batch_size > kMaxMicroBatches)
      fail(config, "[training] global_batch_size = " + str(global) + " with " +
                       space.micro_batch_field + " = " + str(space.fixed_micro_batch_size) +
                       " and data-parallel degree " + str(dp) + " makes " +
                       str(global / dp / space.fixed_micro_batch_size) +
                       " micro-batches per step, more than the " + str(kMaxMicroBatches) +
                       " a plan may hold; raise the micro-batch size");
    if (space.fixed_micro_batch_size > 0 &&
        global % (int64_t{space.fixed_micro_batch_size} * dp) != 0)
      fail(config, "[training] global_batch_size (" + str(global) + ") must be divisible by " +
                       space.micro_batch_field + " (" + str(space.fixed_micro_batch_size) +
                       ") x data-parallel degree (" + str(dp) + "); choose a divisor of " +
                       str(global / dp));
    if (space.fixed_num_micro_batches > 0 &&
        global % (int64_t{space.fixed_num_micro_batches} * dp) != 0)
      fail(config, "[training] global_batch_size (" + str(global) +
                       ") must be divisible by [planner] update_freq (" +
                       str(space.fixed_num_micro_batches) + ") x data-parallel degree (" + str(dp) +
                       ")");
    fail(config, space.micro_batch_field + " (" + str(space.fixed_micro_batch_size) +
                     ") x [planner] update_freq (" + str(space.fixed_num_micro_batches) +
                     ") x data-parallel degree (" + str(dp) +
                     ") must equal [training] global_batch_size (" + str(global) +
                     "); set at most two of them");
  }
  if (space.meshes.empty()) {
    std::string reasons;
    for (const std::string& reason : space.excluded) reasons += "\n  " + reason;
    fail(config, "no (pipeline, data, tensor) parallel mesh fits the world size " + str(world) +
                     " with these options:" + reasons);
  }
  return space;
}

std::vector<int> micro_batch_sizes(const SearchSpace& space, const JobConfig& config,
                                   int data_parallel) {
  const int global = config.training.global_batch_size;
  std::vector<int> sizes;
  if (global % data_parallel != 0) return sizes;
  const int per_replica = global / data_parallel;
  // By micro-batch count m (so at most kMaxMicroBatches candidates, whatever
  // the batch): b = per_replica / m, largest first.
  for (int m = 1; m <= per_replica && m <= kMaxMicroBatches; ++m) {
    if (per_replica % m != 0) continue;
    const int b = per_replica / m;
    if (space.fixed_micro_batch_size > 0 && b != space.fixed_micro_batch_size) continue;
    if (space.fixed_num_micro_batches > 0 && m != space.fixed_num_micro_batches) continue;
    if (int64_t{b} * config.model.seq_len > kMaxMicroBatchRows) continue;
    sizes.push_back(b);
  }
  return sizes;
}

}  // namespace paraplan
