// search_space.cc: resolve_search_space, the candidate meshes, micro-batch sizes
// and ZeRO settings, and their narrowing by the partition-constraints file
// (rules in search_space.h).
#include "planner/search/search_space.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "planner/cost/context_parallel_cost.h"
#include "planner/cost/model_counts.h"
#include "planner/job/module_names.h"
#include "schema/model_limits.h"
#include "schema/zero_stages.h"

namespace paraplan {

using schema::RecomputeMode;

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

const char* mode_name(RecomputeMode mode) {
  return mode == RecomputeMode::Full        ? "full"
         : mode == RecomputeMode::Selective ? "selective"
                                            : "none";
}

// Fixed degrees must fit the world and the model.
void check_fixed_degrees(const JobConfig& config, const DeviceLayout& layout) {
  const PlannerOptions& p = config.planner;
  const int world = layout.world_size();
  const int global = config.training.global_batch_size;
  const int fixed_pp = p.pipeline_nstages, fixed_tp = p.tensor_parallel_degree,
            fixed_dp = p.data_parallel_degree, fixed_cp = p.context_parallel_degree;
  for (const auto& [name, degree] : {std::pair<const char*, int>{"pipeline_nstages", fixed_pp},
                                     {"tensor_parallel_degree", fixed_tp},
                                     {"data_parallel_degree", fixed_dp},
                                     {"context_parallel_degree", fixed_cp}})
    if (degree > 0 && world % degree != 0)
      fail(config, std::string("[planner] ") + name + " = " + str(degree) +
                       " does not divide the world size " + str(world) + "; choose a divisor of " +
                       str(world));
  const int64_t fixed_product = int64_t{std::max(fixed_pp, 1)} * std::max(fixed_tp, 1) *
                                std::max(fixed_dp, 1) * std::max(fixed_cp, 1);
  // (An unset context_parallel_degree takes what the others leave; fixed,
  // the four must multiply to the world.)
  // pp, tp and dp fixed: they make the mesh (an unset context_parallel_degree
  // is 1 there; the message names the cp that would fill the world).
  const bool mesh_fixed = fixed_pp > 0 && fixed_tp > 0 && fixed_dp > 0;
  if (world % fixed_product != 0 || (mesh_fixed && fixed_product != world)) {
    const int64_t rest = world % fixed_product == 0 ? world / fixed_product : 0;
    const bool rest_is_context =
        mesh_fixed && fixed_cp == 0 && rest > 1 && config.model.seq_len % (2 * rest) == 0;
    fail(config, "[planner] pipeline_nstages x tensor_parallel_degree x data_parallel_degree" +
                     std::string(fixed_cp > 0 ? " x context_parallel_degree" : "") + " = " +
                     str(fixed_product) + " does not " + (mesh_fixed ? "equal" : "divide") +
                     " the world size " + str(world) +
                     (rest_is_context ? "; set [planner] context_parallel_degree = " + str(rest) +
                                            " to split the sequences over the rest"
                                      : std::string()));
  }
  if (fixed_tp > 0) {
    const std::string problem = tensor_parallel_problem(config, fixed_tp, layout.devices_per_node);
    if (!problem.empty())
      fail(config, "[planner] tensor_parallel_degree = " + str(fixed_tp) + " " + problem);
  }
  if (fixed_pp > int64_t{config.model.num_layers} + 2)
    fail(config,
         "[planner] pipeline_nstages = " + str(fixed_pp) +
             " exceeds [model] num_layers + 2 = " + str(int64_t{config.model.num_layers} + 2) +
             " (every stage but the first and last must hold a block)");
  if (fixed_dp > 0 && global % fixed_dp != 0)
    fail(config, "[training] global_batch_size = " + str(global) +
                     " is not divisible by [planner] data_parallel_degree = " + str(fixed_dp));
}

// Micro-batching and ZeRO: the values fixed by the job, else the choices.
void resolve_batching_and_zero(const JobConfig& config, SearchSpace& space) {
  const PlannerOptions& p = config.planner;
  if (config.was_set("training.micro_batch_size")) {
    space.fixed_micro_batch_size = config.training.micro_batch_size;
    space.micro_batch_field = "[training] micro_batch_size";
  } else if (config.was_set("planner.micro_batch_size")) {
    space.fixed_micro_batch_size = p.micro_batch_size;
    space.micro_batch_field = "[planner] micro_batch_size";
  }
  if (config.was_set("planner.update_freq")) space.fixed_num_micro_batches = p.update_freq;
  space.zero_ngroups_fixed = config.was_set("planner.zero_ngroups");
  space.zero_ngroups = p.zero_ngroups;
  if (config.was_set("planner.zero_stage")) {
    space.zero_stages = {p.zero_stage};
  } else {
    space.zero_stages.clear();
    for (int stage = 0; stage <= kHighestZeroStage; ++stage) space.zero_stages.push_back(stage);
  }
  // ZeRO groups split the data- x context-parallel ranks (an unset
  // context_parallel_degree counts 1 here).
  const int fixed_dp = p.data_parallel_degree, fixed_cp = std::max(p.context_parallel_degree, 1);
  if (fixed_dp > 0 && space.zero_ngroups_fixed &&
      int64_t{fixed_dp} * fixed_cp % p.zero_ngroups != 0)
    fail(config, "[planner] zero_ngroups = " + str(p.zero_ngroups) +
                     " does not divide [planner] data_parallel_degree = " + str(fixed_dp) +
                     (fixed_cp > 1 ? " x context_parallel_degree = " + str(fixed_cp) : "") +
                     "; the data-parallel ranks are split into equal ZeRO groups");
}

// Per-layer recompute and stage boundaries, then the constraints file; the
// tensor-parallel degrees the file allows (empty: any).
std::vector<int> resolve_layer_rules(const JobConfig& config, SearchSpace& space) {
  const PlannerOptions& p = config.planner;
  const ModelConfig& model = config.model;
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
  return allowed_tensor_parallel;
}

// The context-parallel degrees of a mesh whose pp x tp leaves `ranks`
// ranks per tensor-parallel rank: the fixed one, else every cp dividing them
// with 2 cp dividing seq_len into chunks of an attention tile or more
// (context_parallel_cost.h).
std::vector<int> context_parallel_choices(const JobConfig& config, int ranks) {
  const int fixed = config.planner.context_parallel_degree;
  std::vector<int> choices;
  for (int cp = 1; cp <= ranks; ++cp) {
    if (ranks % cp != 0 || (fixed > 0 && cp != fixed)) continue;
    if (fixed == 0 && !context_parallel_searchable(config.model, cp)) continue;
    choices.push_back(cp);
  }
  return choices;
}

// The meshes with tensor-parallel degree tp, or why there are none.
void add_meshes_of_tensor_parallel(const JobConfig& config, int tp, SearchSpace& space) {
  const int world = space.layout.world_size();
  const int global = config.training.global_batch_size;
  const int fixed_pp = config.planner.pipeline_nstages,
            fixed_dp = config.planner.data_parallel_degree;
  for (int pp = 1; pp <= world / tp; ++pp) {
    if ((world / tp) % pp != 0 || (fixed_pp > 0 && pp != fixed_pp)) continue;
    for (int cp : context_parallel_choices(config, world / tp / pp)) {
      const int dp = world / tp / pp / cp;
      if (fixed_dp > 0 && dp != fixed_dp) continue;
      if (pp > int64_t{config.model.num_layers} + 2 || pp > kMaxPipelineStages) {
        space.excluded.push_back("pp " + str(pp) + ": more stages than num_layers + 2 or " +
                                 str(kMaxPipelineStages));
        break;
      }
      const std::string mesh = "pp " + str(pp) + (cp > 1 ? " x cp " + str(cp) : "") + " x tp " +
                               str(tp) + " (dp " + str(dp) + ")";
      if (global % dp != 0) {
        // (Context parallelism's meshes named only where the job fixes it.)
        if (cp == 1 || config.planner.context_parallel_degree > 0)
          space.excluded.push_back(mesh + ": dp does not divide global_batch_size " + str(global));
        continue;
      }
      for (bool sequence_parallel : sequence_parallel_choices(config, tp, cp, space.excluded))
        space.meshes.push_back({pp, dp, tp, sequence_parallel, cp});
    }
  }
}

void add_meshes(const JobConfig& config, const std::vector<int>& allowed_tensor_parallel,
                SearchSpace& space) {
  const int world = space.layout.world_size();
  const int fixed_tp = config.planner.tensor_parallel_degree;
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
                               config.planner.partition_constraints_path);
      continue;
    }
    add_meshes_of_tensor_parallel(config, tp, space);
  }
}

// A fixed micro-batching every mesh rejects is one clear error, not a search result.
void check_some_micro_batching(const JobConfig& config, const SearchSpace& space) {
  bool any_micro_batch = false;
  for (const ParallelShape& shape : space.meshes)
    any_micro_batch |= !micro_batch_sizes(space, config, shape.data_parallel).empty();
  if (space.meshes.empty() || any_micro_batch) return;
  const int global = config.training.global_batch_size;
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

}  // namespace

std::vector<bool> sequence_parallel_choices(const JobConfig& config, int tp, int cp,
                                            std::vector<std::string>& excluded) {
  const std::optional<bool> asked = config.planner.sequence_parallel;
  if (tp == 1 || asked == false) return {false};
  // Each rank shards its seq_len / cp tokens of every sequence.
  const int tokens = config.model.seq_len / cp;
  if (tokens % tp != 0) {
    if (asked == true) {
      const std::string reason =
          "tp " + std::to_string(tp) +
          (cp > 1 ? " with cp " + std::to_string(cp) +
                        ": [planner] sequence_parallel = true, but tp does not divide seq_len / "
                        "cp = " +
                        std::to_string(tokens)
                  : ": [planner] sequence_parallel = true, but tp does not divide seq_len " +
                        std::to_string(tokens));
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
  SearchSpace space;
  space.layout = resolve_device_layout(config);
  space.pipeline_fixed = config.planner.pipeline_nstages > 0;
  check_fixed_degrees(config, space.layout);
  resolve_batching_and_zero(config, space);
  const std::vector<int> allowed_tensor_parallel = resolve_layer_rules(config, space);
  add_meshes(config, allowed_tensor_parallel, space);
  check_some_micro_batching(config, space);
  if (space.meshes.empty()) {
    std::string reasons;
    for (const std::string& reason : space.excluded) reasons += "\n  " + reason;
    fail(config, "no (pipeline, data, tensor) parallel mesh fits the world size " +
                     str(space.layout.world_size()) + " with these options:" + reasons);
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

bool context_parallel_dominated(const SearchSpace& space, const JobConfig& config,
                                const ParallelShape& shape, int micro_batch_size,
                                bool measured_profile) {
  const int cp = shape.context_parallel;
  const int g = std::gcd(micro_batch_size, cp);
  if (cp <= 1 || g <= 1 || (measured_profile && g == cp)) return false;
  ParallelShape shorter = shape;
  shorter.data_parallel *= g;
  shorter.context_parallel /= g;
  const auto same = [&](const ParallelShape& mesh) {
    return mesh.pipeline_stages == shorter.pipeline_stages &&
           mesh.data_parallel == shorter.data_parallel &&
           mesh.tensor_parallel == shorter.tensor_parallel &&
           mesh.sequence_parallel == shorter.sequence_parallel &&
           mesh.context_parallel == shorter.context_parallel;
  };
  if (std::none_of(space.meshes.begin(), space.meshes.end(), same)) return false;
  if (cudnn_attention_workspace_bytes(config.model, config.cluster.preset, micro_batch_size / g,
                                      shape.tensor_parallel, shorter.context_parallel,
                                      config.data.document_mask, config.planner.is_train) > 0)
    return false;
  const std::vector<int> sizes = micro_batch_sizes(space, config, shorter.data_parallel);
  return std::find(sizes.begin(), sizes.end(), micro_batch_size / g) != sizes.end();
}

void apply_partition_constraints(const JobConfig& config, const PartitionConstraints& constraints,
                                 SearchSpace& space, std::vector<int>& allowed_tensor_parallel) {
  const PlannerOptions& p = config.planner;
  const int fixed_pp = p.pipeline_nstages;
  for (const PartitionConstraint& c : constraints.constraints) {
    const std::string name = constraints.path + ": constraint " + std::to_string(c.index) +
                             " (module '" + c.module + "')";
    if (!c.tensor_parallel.empty()) {
      if (p.tensor_parallel_degree > 0 &&
          std::find(c.tensor_parallel.begin(), c.tensor_parallel.end(), p.tensor_parallel_degree) ==
              c.tensor_parallel.end())
        throw std::runtime_error(
            name + ": tensor_parallel does not allow " + std::to_string(p.tensor_parallel_degree) +
            ", contradicting " + config.source +
            " [planner] tensor_parallel_degree = " + std::to_string(p.tensor_parallel_degree));
      if (allowed_tensor_parallel.empty()) {
        allowed_tensor_parallel = c.tensor_parallel;
      } else {
        std::vector<int> both;
        for (int t : allowed_tensor_parallel)
          if (std::find(c.tensor_parallel.begin(), c.tensor_parallel.end(), t) !=
              c.tensor_parallel.end())
            both.push_back(t);
        if (both.empty())
          throw std::runtime_error(
              name + ": tensor_parallel leaves no degree the earlier constraints allow");
        allowed_tensor_parallel = both;
      }
    }
    if (c.stage) {
      int stage = *c.stage;
      if (fixed_pp > 0 && stage >= fixed_pp)
        throw std::runtime_error(name + ": stage = " + std::to_string(stage) + " contradicts " +
                                 config.source +
                                 " [planner] pipeline_nstages = " + std::to_string(fixed_pp) +
                                 " (stages 0.." + std::to_string(fixed_pp - 1) + ")");
      if (c.embedding && stage != 0 && !(stage == -1 && fixed_pp == 1))
        throw std::runtime_error(name + ": stage = " + std::to_string(stage) +
                                 ", but the embedding is always on stage 0");
      if (c.head && stage != -1 && !(fixed_pp > 0 && stage == fixed_pp - 1))
        throw std::runtime_error(name + ": stage = " + std::to_string(stage) +
                                 ", but the head is always on the last stage (-1)");
      for (int block : c.blocks) {
        for (const auto& [pinned, other] : space.pinned_layers)
          if (pinned == block && other != stage)
            throw std::runtime_error(name + ": pins block " + std::to_string(block) + " to stage " +
                                     std::to_string(stage) +
                                     ", but an earlier constraint pins it to stage " +
                                     std::to_string(other));
        space.pinned_layers.push_back({block, stage});
      }
    }
    if (c.recompute) {
      for (int block : c.blocks) {
        RecomputeRange& range = space.layer_recompute[block];
        const RecomputeMode lowest = std::max(range.lowest, c.recompute->first);
        const RecomputeMode highest = std::min(range.highest, c.recompute->second);
        if (lowest > highest)
          throw std::runtime_error(
              name + ": recompute allows at most " + mode_name(c.recompute->second) +
              " for block " + std::to_string(block) + ", contradicting " + config.source +
              " [planner] recompute_modules, which asks for " + mode_name(range.lowest) +
              (range.highest < c.recompute->second ? " (or an earlier constraint)" : ""));
        range = {lowest, highest};
      }
    }
  }
  std::sort(space.pinned_layers.begin(), space.pinned_layers.end());
  space.pinned_layers.erase(std::unique(space.pinned_layers.begin(), space.pinned_layers.end()),
                            space.pinned_layers.end());
}

}  // namespace paraplan
