// replan.cc: a saved plan's job planned again for other node counts (replan.h).
#include "planner/replan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>

#include "schema/plan_io.h"

namespace paraplan {
namespace {

// Options that fix the mesh for the old device count; left to the search.
const std::set<std::string>& mesh_options() {
  static const std::set<std::string> keys = {"cluster.num_nodes",
                                             "cluster.devices_per_node",
                                             "planner.world_size",
                                             "planner.nproc",
                                             "planner.mesh_row",
                                             "planner.mesh_col",
                                             "planner.pipeline_nstages",
                                             "planner.data_parallel_degree",
                                             "planner.tensor_parallel_degree",
                                             "planner.load_plan_path",
                                             "planner.save_plan_path"};
  return keys;
}

PlanDecisions decisions_of_best(const PlanCandidate& best) {
  const PlanSetting& setting = best.setting;
  return {setting.shape.pipeline_stages,
          setting.shape.data_parallel,
          setting.shape.tensor_parallel,
          setting.layout.num_nodes,
          setting.layout.devices_per_node,
          setting.micro_batch_size,
          setting.num_micro_batches,
          setting.zero_stage,
          best.estimate.prediction.step_seconds,
          setting.shape.context_parallel};
}

// One count of nodes tried: the whole plan, or only the search's decisions.
struct Attempt {
  PlanOutcome outcome;
  PlanDecisions decisions;
};
Attempt attempt(const JobConfig& job, FallbackDepth depth) {
  Attempt tried;
  if (depth == FallbackDepth::kDecisionsOnly) {
    tried.decisions = decisions_of_best(search_job(job).ranked.front());
    return tried;
  }
  tried.outcome = plan_job(job);
  // plan_job checked the plan already: read it without a second check.
  tried.decisions = paraplan::decisions_of(*schema::GetPlan(tried.outcome.plan.data()));
  return tried;
}

}  // namespace

JobConfig job_for_nodes(const schema::Plan& plan, const std::string& plan_path, int num_nodes,
                        int devices_per_node) {
  const auto* recorded = plan.header() ? plan.header()->creation_options() : nullptr;
  if (recorded == nullptr || recorded->size() == 0)
    throw std::runtime_error(plan_path +
                             ": the plan records no job options (header.creation_options), so "
                             "it cannot be planned again for other nodes; plan the job again "
                             "with this paraplan");
  if (devices_per_node == 0) devices_per_node = plan.mesh()->devices_per_node();
  if (num_nodes < 1 || devices_per_node < 1)
    throw std::runtime_error(plan_path + ": cannot plan for " + std::to_string(num_nodes) +
                             " nodes of " + std::to_string(devices_per_node) +
                             " devices; a plan needs at least 1 node of at least 1 device");
  const schema::Architecture architecture =
      plan.model() ? plan.model()->architecture() : schema::Architecture::Gpt2;
  // Options are recorded resolved, whether the job set them or not. Those at
  // JobConfig{}'s default (0 for "auto", "" for a path not given) and the
  // other architecture's keys are left unset, as the job left them; those
  // whose default comes from other options (a preset's figures, min_learning_rate)
  // are kept whatever their value, since the same default may not follow.
  std::map<std::string, std::string> defaults;
  for (auto& [key, value] : job_config_options(JobConfig{})) defaults[key] = value;
  std::vector<ConfigOverride> overrides;
  for (const schema::KeyValue* option : *recorded) {
    const std::string key = option->key() ? option->key()->str() : "";
    const std::string value = option->value() ? option->value()->str() : "";
    const auto standard = defaults.find(key);
    if (mesh_options().count(key) != 0 || !option_applies_to(architecture, key) ||
        (standard != defaults.end() && standard->second == value &&
         !option_default_is_derived(key)))
      continue;
    overrides.push_back({key, value});
  }
  // The devices are the hosts', not the recorded options': a mesh made by
  // mesh_row x mesh_col or world_size alone left [cluster] devices_per_node
  // at its default, which the old mesh never used.
  overrides.push_back({"cluster.num_nodes", std::to_string(num_nodes)});
  overrides.push_back({"cluster.devices_per_node", std::to_string(devices_per_node)});
  JobConfig config =
      parse_job_config("", plan_path + " (the options it was planned with)", overrides);
  // The data as the plan resolved it (absolute paths), not as the job file
  // named it relative to wherever `paraplan plan` ran.
  if (const schema::Data* data = plan.training() ? plan.training()->data() : nullptr) {
    config.data.train.clear();
    if (data->train() != nullptr)
      for (const schema::DataSource* source : *data->train())
        config.data.train.push_back(
            {source->paths() ? source->paths()->str() : "", source->weight()});
    config.data.validation = data->validation() ? data->validation()->str() : "";
    config.data.shuffle = data->shuffle();
    config.data.seed = data->seed();
  }
  return config;
}

PlanOutcome replan_for_nodes(const schema::Plan& plan, const std::string& plan_path, int num_nodes,
                             int devices_per_node) {
  return plan_job(job_for_nodes(plan, plan_path, num_nodes, devices_per_node));
}

PlanDecisions decisions_of(const schema::Plan& plan) {
  const schema::Mesh& mesh = *plan.mesh();
  const schema::Training& training = *plan.training();
  return {mesh.pipeline_parallel(),
          mesh.data_parallel(),
          mesh.tensor_parallel(),
          mesh.num_nodes(),
          mesh.devices_per_node(),
          training.micro_batch_size(),
          training.num_micro_batches(),
          plan.zero() ? plan.zero()->stage() : 0,
          plan.predictions()->step_seconds(),
          std::max(mesh.context_parallel(), 1)};
}

FallbackPlan plan_for_nodes_left(const schema::Plan& plan, const std::string& plan_path,
                                 int nodes_left, int devices_per_node, int min_nodes,
                                 FallbackDepth depth) {
  min_nodes = std::max(min_nodes, 1);
  if (devices_per_node == 0) devices_per_node = plan.mesh()->devices_per_node();
  FallbackPlan fallback;
  std::string first_reason;
  for (int nodes = nodes_left; nodes >= min_nodes && fallback.num_nodes == 0; --nodes) {
    try {
      Attempt tried = attempt(job_for_nodes(plan, plan_path, nodes, devices_per_node), depth);
      fallback.outcome = std::move(tried.outcome);
      fallback.decisions = tried.decisions;
      fallback.num_nodes = fallback.most_nodes_that_fit = nodes;
    } catch (const std::runtime_error& error) {
      const std::string reason = error.what();
      if (first_reason.empty()) first_reason = reason;
      fallback.passed_over.push_back(std::to_string(nodes) +
                                     " nodes: " + reason.substr(0, reason.find('\n')));
      // Fewer nodes help a mesh fit (a quick refusal), not memory or time (a
      // whole search each): stop at any other reason.
      if (reason.find("parallel mesh fits the world size") == std::string::npos) break;
    }
  }
  if (fallback.num_nodes == 0)
    throw std::runtime_error(first_reason.empty() ? plan_path + ": fewer than " +
                                                        std::to_string(min_nodes) + " nodes left"
                                                  : first_reason);
  // The most nodes can force an odd mesh (pp 127 x dp 3 on 381 nodes): the
  // plan's own pipeline and tensor degrees with the next data-parallel degree
  // down that divides the batch, on fewer nodes, may be faster. Searched with
  // that mesh fixed: only its micro-batching, ZeRO, schedule and recompute.
  // (The context-parallel degree stays the plan's too.)
  const schema::Mesh& mesh = *plan.mesh();
  const int64_t batch = plan.training()->global_batch_size();
  const int cp = std::max(mesh.context_parallel(), 1);
  const int64_t replica = int64_t{mesh.pipeline_parallel()} * cp * mesh.tensor_parallel();
  for (int64_t dp = mesh.data_parallel() - 1; dp >= 1; --dp) {
    const int64_t devices = replica * dp;
    if (batch % dp != 0 || devices % devices_per_node != 0) continue;
    const int nodes = static_cast<int>(devices / devices_per_node);
    if (nodes >= fallback.num_nodes) continue;
    if (nodes < min_nodes) break;
    try {
      JobConfig job = job_for_nodes(plan, plan_path, nodes, devices_per_node);
      job.planner.pipeline_nstages = mesh.pipeline_parallel();
      job.planner.tensor_parallel_degree = mesh.tensor_parallel();
      job.planner.data_parallel_degree = static_cast<int>(dp);
      job.planner.context_parallel_degree = cp;
      Attempt smaller = attempt(job, depth);
      if (smaller.decisions.step_seconds < fallback.decisions.step_seconds) {
        fallback.outcome = std::move(smaller.outcome);
        fallback.decisions = smaller.decisions;
        fallback.num_nodes = nodes;
      }
    } catch (const std::runtime_error&) {  // the most nodes' plan stands
    }
    break;
  }
  return fallback;
}

std::string plan_summary(const PlanDecisions& plan) {
  char step[64];
  std::snprintf(step, sizeof(step), "%.4g s", plan.step_seconds);
  return "pp " + std::to_string(plan.pipeline) + " x dp " + std::to_string(plan.data) +
         (plan.context > 1 ? " x cp " + std::to_string(plan.context) : std::string()) + " x tp " +
         std::to_string(plan.tensor) + " on " + std::to_string(plan.num_nodes) +
         (plan.num_nodes == 1 ? " node x " : " nodes x ") + std::to_string(plan.devices_per_node) +
         " devices, micro-batch " + std::to_string(plan.micro_batch_size) + " x " +
         std::to_string(plan.num_micro_batches) +
         (plan.zero_stage > 0 ? ", ZeRO-" + std::to_string(plan.zero_stage) : "") +
         ", predicted step " + step;
}

std::string what_if_lost_nodes(const schema::Plan& plan, const std::string& plan_path, int lost) {
  const int nodes = plan.mesh()->num_nodes();
  const std::string head = "what if " + std::to_string(lost) + (lost == 1 ? " node" : " nodes") +
                           " of " + std::to_string(nodes) + " were lost: ";
  if (lost >= nodes) return head + "no node would be left\n";
  try {
    const FallbackPlan found =
        plan_for_nodes_left(plan, plan_path, nodes - lost, plan.mesh()->devices_per_node(), 1,
                            FallbackDepth::kDecisionsOnly);
    char slowdown[64];
    std::snprintf(slowdown, sizeof(slowdown), "%.2fx",
                  found.decisions.step_seconds / plan.predictions()->step_seconds());
    std::string text =
        head + plan_summary(found.decisions) + ", " + slowdown + " this plan's step\n";
    const int left = nodes - lost;
    if (found.num_nodes < left) {
      text += "  it uses ";
      text += std::to_string(found.num_nodes) + " of the " + std::to_string(left) + " nodes left:";
      // Appended in parts: GCC 12 warns (-Wrestrict, falsely) on " " + a temporary.
      if (!found.passed_over.empty()) {
        text += ' ';
        text += std::to_string(found.passed_over.size()) + " larger count(s) fit no plan (" +
                found.passed_over.front() + ");";
      }
      if (found.most_nodes_that_fit > found.num_nodes) {
        text += ' ';
        text += std::to_string(found.most_nodes_that_fit) + " nodes plan a slower step";
      }
      text += "\n";
    }
    return text;
  } catch (const std::exception& error) {
    return head + "no plan fits: " + error.what() + "\n";
  }
}

}  // namespace paraplan
