// plan_reuse.cc: load_plan_path: validate a saved plan against the current job,
// name the differences and re-estimate (see plan_reuse.h).
#include "planner/plan_reuse.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "planner/cost/model_counts.h"
#include "planner/cost/plan_estimate.h"
#include "planner/cost/stage_cost.h"
#include "planner/job/device_layout.h"
#include "schema/pipeline_layout.h"
#include "schema/plan_io.h"

namespace paraplan {
namespace {

constexpr double kBytesPerGigabyte = 1024.0 * 1024.0 * 1024.0;

std::string str(int64_t value) {
  return std::to_string(value);
}

std::string printf_string(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

[[noreturn]] void refuse(const JobConfig& config, const std::vector<std::string>& differences,
                         const std::string& why) {
  std::string message = config.source + ": [planner] load_plan_path = '" +
                        config.planner.load_plan_path + "' cannot be reused: " + why + ".";
  if (!differences.empty()) {
    message += " The job differs from the plan in:";
    for (const std::string& difference : differences) message += "\n  " + difference;
  }
  throw std::runtime_error(message + "\nPlan again without load_plan_path.");
}

// Every option the plan recorded against the current value of the same key;
// a plan that recorded none, against its model table.
void name_option_differences(const JobConfig& config, const schema::Plan& plan,
                             std::vector<std::string>& differences) {
  std::map<std::string, std::string> recorded;
  if (plan.header()->creation_options() != nullptr)
    for (const schema::KeyValue* option : *plan.header()->creation_options())
      recorded[option->key() ? option->key()->str() : ""] =
          option->value() ? option->value()->str() : "";
  // An option newer than the plan, at its default, is what the plan ran with.
  std::map<std::string, std::string> defaults;
  for (const auto& [key, value] : job_config_options(JobConfig{})) defaults[key] = value;
  for (const auto& [key, value] : recorded_job_options(config)) {
    if (key == "planner.load_plan_path" || key == "planner.save_plan_path") continue;
    const auto it = recorded.find(key);
    if (it == recorded.end()) {
      if (!recorded.empty() && defaults[key] != value)
        differences.push_back(key + ": not in the plan, now " + value);
    } else if (it->second != value) {
      differences.push_back(key + ": plan " + it->second + ", now " + value);
    }
  }
  // The model table itself is authoritative for what the plan's stages hold.
  const schema::Model& model = *plan.model();
  const ModelConfig& now = config.model;
  if (recorded.empty())
    for (const auto& [name, planned, current] :
         {std::tuple<const char*, int, int>{"model.vocab_size", model.vocab_size(), now.vocab_size},
          {"model.seq_len", model.seq_len(), now.seq_len},
          {"model.d_model", model.d_model(), now.d_model},
          {"model.num_heads", model.num_heads(), now.num_heads},
          {"model.num_kv_heads", model.num_kv_heads(), now.num_kv_heads},
          {"model.ffn_size", model.ffn_size(), now.ffn_size}})
      if (planned != current)
        differences.push_back(std::string(name) + ": plan " + str(planned) + ", now " +
                              str(current));
}

// The job's device layout, refused unless the plan's mesh still fits it.
DeviceLayout check_plan_mesh(const JobConfig& config, const schema::Mesh& mesh,
                             std::vector<std::string>& differences) {
  const ModelConfig& now = config.model;
  const DeviceLayout layout = resolve_device_layout(config);
  const int world = mesh.pipeline_parallel() * mesh.data_parallel() *
                    std::max(mesh.context_parallel(), 1) * mesh.tensor_parallel();
  if (world != layout.world_size())
    refuse(config, differences,
           "the plan uses " + str(world) + " devices, the job now has " + str(layout.world_size()));
  if (layout.devices_per_node != mesh.devices_per_node())
    differences.push_back("devices per node: plan " + str(mesh.devices_per_node()) + ", now " +
                          str(layout.devices_per_node));
  const int tp = mesh.tensor_parallel();
  for (const auto& [name, size] : {std::pair<const char*, int>{"num_heads", now.num_heads},
                                   {"num_kv_heads", kv_heads(now)},
                                   {"d_model", now.d_model},
                                   {"ffn_size", now.ffn_size},
                                   {"vocab_size", now.vocab_size},
                                   {"devices per node", layout.devices_per_node}})
    if (size % tp != 0)
      refuse(config, differences,
             "the plan's tensor-parallel degree " + str(tp) + " does not divide " + name + " " +
                 str(size));
  return layout;
}

// The plan's mesh, micro-batching, ZeRO and schedule as a setting, with the
// micro-batch count the job's batch now needs.
PlanSetting setting_of_plan(const JobConfig& config, const schema::Plan& plan,
                            const DeviceLayout& layout, int chunks,
                            const std::vector<std::string>& differences) {
  const schema::Mesh& mesh = *plan.mesh();
  const int tp = mesh.tensor_parallel(), cp = std::max(mesh.context_parallel(), 1);
  PlanSetting setting;
  setting.shape = {mesh.pipeline_parallel(), mesh.data_parallel(), tp, mesh.sequence_parallel(),
                   cp};
  const int seq_len = config.model.seq_len;
  if (cp > 1 && seq_len % (2 * cp) != 0)
    refuse(config, differences,
           "the plan's context parallelism " + str(cp) + " needs 2 x " + str(cp) +
               " to divide seq_len " + str(seq_len));
  if (mesh.sequence_parallel() && (seq_len / cp) % tp != 0)
    refuse(config, differences,
           "the plan's sequence parallelism needs its tensor-parallel degree " + str(tp) +
               " to divide seq_len " +
               (cp > 1 ? "/ context parallelism " + str(cp) + " = " : std::string()) +
               str(seq_len / cp));
  setting.layout = layout;
  setting.micro_batch_size = plan.training()->micro_batch_size();
  setting.num_micro_batches = plan.training()->num_micro_batches();
  setting.zero_stage = plan.zero()->stage();
  setting.zero_ngroups = plan.zero()->num_groups();
  setting.zero_layers_per_unit = plan.zero()->layers_per_unit();
  setting.schedule = {plan.schedule()->kind(), chunks, 0};
  const int global = config.training.global_batch_size;
  const int64_t per_step = int64_t{setting.micro_batch_size} * mesh.data_parallel();
  if (global % per_step != 0)
    refuse(config, differences,
           "[training] global_batch_size " + str(global) +
               " is not a multiple of the plan's micro-batch size x data-parallel degree = " +
               str(per_step));
  setting.num_micro_batches = static_cast<int>(global / per_step);
  return setting;
}

// The plan's stages as the cost model takes them: one layout per rank, each
// rank's chunks in chunk order (pipeline_layout.h: round robin, or a V).
std::vector<StageLayout> rank_layouts_of(const schema::Plan& plan, int chunks) {
  std::vector<StageLayout> stages;
  for (const schema::Stage* stage : *plan.stages()) {
    StageLayout layout_of_stage;
    layout_of_stage.first_layer = stage->first_layer();
    layout_of_stage.num_layers = stage->num_layers();
    layout_of_stage.has_embedding = stage->has_embedding();
    layout_of_stage.has_head = stage->has_head();
    // A stage of no layers may omit its (empty) recompute list.
    if (stage->recompute() != nullptr)
      layout_of_stage.recompute.assign(stage->recompute()->begin(), stage->recompute()->end());
    stages.push_back(std::move(layout_of_stage));
  }
  // ZeRO-3's choice per pipeline rank (the schedule's stages are the ranks).
  const auto keep_gathered = [&plan](size_t rank) {
    const auto* schedules = plan.schedule()->stages();
    return schedules != nullptr && rank < schedules->size() &&
           schedules->Get(static_cast<flatbuffers::uoffset_t>(rank))->keep_parameters_gathered();
  };
  if (chunks <= 1) {
    for (size_t r = 0; r < stages.size(); ++r)
      stages[r].keep_parameters_gathered = keep_gathered(r);
    return stages;
  }
  const size_t p = static_cast<size_t>(plan.mesh()->pipeline_parallel());
  const PipelineLayout pipeline =
      PipelineLayout::of(plan.schedule()->kind(), static_cast<int>(p), chunks);
  std::vector<StageLayout> ranks(p);
  for (size_t s = 0; s < stages.size(); ++s) {
    StageLayout& rank = ranks[pipeline.rank_of(static_cast<int>(s))];
    const StageLayout& chunk = stages[s];
    if (s < p) rank.first_layer = chunk.first_layer;
    rank.num_layers += chunk.num_layers;
    rank.recompute.insert(rank.recompute.end(), chunk.recompute.begin(), chunk.recompute.end());
  }
  for (size_t r = 0; r < p; ++r) {
    ranks[r].has_embedding = r == 0, ranks[r].has_head = r + 1 == p;
    ranks[r].keep_parameters_gathered = keep_gathered(r);
  }
  return ranks;
}

// The memory estimate must still hold.
void check_memory(const JobConfig& config, const PlanEstimate& estimate,
                  const std::vector<std::string>& differences) {
  if (!config.planner.consider_mem) return;
  const double limit = config.planner.memory_constraint * kBytesPerGigabyte;
  for (size_t s = 0; s < estimate.stages.size(); ++s) {
    const double need = static_cast<double>(estimate.stages[s].memory.total());
    if (need > limit)
      refuse(config, differences,
             "stage " + str(static_cast<int64_t>(s)) + " now needs " +
                 printf_string("%.2f", need / kBytesPerGigabyte) + " GB; memory_constraint is " +
                 printf_string("%g", config.planner.memory_constraint) + " GB");
  }
}

}  // namespace

ReusedPlan reuse_plan(const JobConfig& config, const MeasuredProfile* profile) {
  validate_job_config(config);
  const LoadedPlan loaded = load_plan(config.planner.load_plan_path);
  const schema::Plan& plan = loaded.plan();
  ReusedPlan reused;
  std::vector<std::string>& differences = reused.differences;
  name_option_differences(config, plan, differences);
  if (plan.model()->num_layers() != config.model.num_layers)
    refuse(config, differences,
           "the plan's stages hold " + str(plan.model()->num_layers()) +
               " blocks, the model now has " + str(config.model.num_layers));

  // Decisions from the plan.
  const DeviceLayout layout = check_plan_mesh(config, *plan.mesh(), differences);
  JobConfig effective = config;  // the plan's schedule and ZeRO decisions stand
  effective.planner.pipeline_scheduler = plan.schedule()->kind();
  const int chunks = std::max(plan.schedule()->virtual_stages(), 1);
  effective.planner.pipeline_virtual_stages = chunks;
  PlanCandidate& candidate = reused.candidate;
  candidate.setting = setting_of_plan(config, plan, layout, chunks, differences);
  if (const std::string why = why_no_schedule_choice(effective, candidate.setting, false);
      !why.empty())
    refuse(config, differences, "the plan's schedule cannot run the job now: " + why);
  candidate.stages = rank_layouts_of(plan, chunks);
  candidate.estimate = evaluate_plan(effective, candidate.setting, candidate.stages, profile);
  reused.loaded_step_seconds = plan.predictions() ? plan.predictions()->step_seconds() : 0;
  check_memory(config, candidate.estimate, differences);
  reused.unchanged = differences.empty() &&
                     candidate.estimate.prediction.step_seconds == reused.loaded_step_seconds;
  reused.plan = reused.unchanged ? loaded.bytes() : serialize_plan(effective, candidate, profile);
  return reused;
}

std::string format_reuse_report(const JobConfig& config, const ReusedPlan& reused) {
  std::string text = "paraplan plan: reusing " + config.planner.load_plan_path + " (no search)\n";
  if (reused.unchanged) return text + "the job matches the plan; the plan is used as saved\n";
  if (reused.differences.empty()) {
    text += "the job matches the plan's options, but the cost model's prediction changed\n";
  } else {
    text += "the job differs from the plan in " +
            str(static_cast<int64_t>(reused.differences.size())) +
            " field(s); the plan's decisions are kept and re-estimated:\n";
    for (const std::string& difference : reused.differences) text += "  " + difference + "\n";
  }
  text += "predicted step: plan " + printf_string("%.4f", reused.loaded_step_seconds) +
          " s, re-estimated " +
          printf_string("%.4f", reused.candidate.estimate.prediction.step_seconds) + " s\n";
  return text;
}

}  // namespace paraplan
