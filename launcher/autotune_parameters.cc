// autotune_parameters.cc: the trial parameters' candidates, pruning rules and
// grid, and a plan's context for them (autotune_parameters.h).
#include "launcher/autotune_parameters.h"

#include <algorithm>
#include <map>

#include "planner/cost/cost_model.h"
#include "schema/pipeline_layout.h"

namespace paraplan {

namespace {

std::string zero_list(const std::vector<int>& stages) {
  std::string text;
  for (int stage : stages) text += (text.empty() ? "ZeRO-" : "/") + std::to_string(stage);
  return text;
}

}  // namespace

std::string not_applicable(const TrialParameter& parameter, const TrialContext& context) {
  const auto& stages = parameter.zero_stages;
  if (std::find(stages.begin(), stages.end(), context.zero_stage) == stages.end())
    return parameter.column + " matters under " + zero_list(stages) + " only, not ZeRO-" +
           std::to_string(context.zero_stage);
  if (parameter.needs_gradient_group && context.gradient_replicas <= 1)
    return parameter.column +
           " not tried: one rank holds each gradient, no data-parallel reduction";
  return "";
}

std::vector<TrialValue> gradient_bucket_candidates(int64_t job_value, const TrialContext& context) {
  const int64_t elements = context.stage_gradient_elements;
  const auto one_bucket = [&](int64_t v) { return v == 0 || (elements > 0 && v >= elements); };
  // The base the other sizes scale: the job's size where it cuts the stage
  // into buckets, else four buckets of the largest stage.
  int64_t base = job_value;
  if (one_bucket(job_value) && elements > 0) base = (elements + 3) / 4;
  std::vector<int64_t> raw = {job_value, 0};
  if (base > 0) raw.push_back(base);
  if (base >= 4) raw.push_back(base / 4);
  if (base > 0) raw.push_back(base * 4);
  std::vector<TrialValue> values;
  std::map<int64_t, int64_t> first_of;  // canonical value -> the first candidate with it
  const std::string stage_size =
      "the largest stage holds " + std::to_string(elements) + " gradient elements";
  for (int64_t v : raw) {
    TrialValue candidate{v, ""};
    const int64_t canonical = one_bucket(v) ? 0 : v;
    const auto earlier = first_of.find(canonical);
    if (earlier != first_of.end()) {
      if (earlier->second == v) continue;  // the same number twice: listed once
      candidate.skipped =
          "same as " + std::to_string(earlier->second) + ": both one bucket (" + stage_size + ")";
    } else if (elements > 0 && !one_bucket(v) && (elements + v - 1) / v > kMaxGradientBuckets) {
      candidate.skipped = std::to_string((elements + v - 1) / v) + " buckets a step, over " +
                          std::to_string(kMaxGradientBuckets) +
                          ": each a collective paying its latency (" + stage_size + ")";
    }
    if (v == job_value && values.empty()) candidate.skipped.clear();  // the base setting
    if (earlier == first_of.end()) first_of[canonical] = v;
    values.push_back(candidate);
  }
  return values;
}

TrialParameter gradient_bucket_parameter(int64_t job_value) {
  TrialParameter parameter;
  parameter.key = "training.gradient_bucket_size";
  parameter.column = "bucket";
  parameter.meaning =
      "[training] gradient_bucket_size: elements per gradient bucket reduced during backward "
      "(0: one bucket, after backward)";
  parameter.zero_stages = {0, 1};  // ZeRO-2/3 reduce-scatter per unit instead
  parameter.needs_gradient_group = true;
  parameter.job_value = job_value;
  parameter.candidates = gradient_bucket_candidates;
  return parameter;
}

std::vector<TrialValue> zero_unit_candidates(int64_t job_value, const TrialContext& context) {
  const int64_t chunk = context.chunk_layers;
  // A size at least the largest chunk's layers is one unit per chunk.
  const auto canonical = [&](int64_t v) { return chunk > 0 && v >= chunk ? chunk : v; };
  std::vector<TrialValue> values{{job_value, ""}};
  std::map<int64_t, int64_t> first_of;  // canonical size -> the first candidate with it
  // The base plan's own size: the job's, or the planner's choice for it.
  first_of[canonical(job_value > 0 ? job_value : context.zero_layers_per_unit)] = job_value;
  for (int64_t v : {1, 2, 4}) {
    if (v == job_value) continue;
    TrialValue candidate{v, ""};
    const auto earlier = first_of.find(canonical(v));
    if (earlier != first_of.end()) {
      candidate.skipped = earlier->second == job_value && job_value == 0
                              ? "the planner's own choice for this setting (" +
                                    std::to_string(context.zero_layers_per_unit) + ")"
                              : "same as " + std::to_string(earlier->second) +
                                    ": one unit per chunk (the " + "largest chunk holds " +
                                    std::to_string(chunk) + " layers)";
    } else {
      first_of[canonical(v)] = v;
    }
    values.push_back(candidate);
  }
  return values;
}

TrialParameter zero_unit_parameter(int64_t job_value) {
  TrialParameter parameter;
  parameter.key = "planner.zero_layers_per_unit";
  parameter.column = "unit";
  parameter.meaning =
      "[planner] zero_layers_per_unit: layers per ZeRO-2/3 unit gathered and reduce-scattered "
      "as one (0: the planner's choice)";
  parameter.zero_stages = {2, 3};
  parameter.needs_gradient_group = true;
  parameter.job_value = job_value;
  parameter.candidates = zero_unit_candidates;
  return parameter;
}

std::vector<TrialParameter> trial_parameters(const JobConfig& config) {
  return {gradient_bucket_parameter(config.training.gradient_bucket_size),
          zero_unit_parameter(config.planner.zero_layers_per_unit)};
}

std::vector<TrialCombination> trial_grid(const std::vector<TrialParameter>& parameters,
                                         const TrialContext& context, int max_runs) {
  std::vector<int64_t> job_values;
  for (const TrialParameter& p : parameters) job_values.push_back(p.job_value);
  std::vector<TrialCombination> grid;
  std::vector<std::vector<TrialCombination>> kept(1, {{job_values, ""}});  // the product so far
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!not_applicable(parameters[i], context).empty()) continue;
    std::vector<TrialCombination> next;
    for (const TrialValue& value : parameters[i].candidates(parameters[i].job_value, context)) {
      if (!value.skipped.empty()) {  // listed once, the other parameters at the job's values
        TrialCombination skipped{job_values, value.skipped};
        skipped.values[i] = value.value;
        grid.push_back(skipped);
        continue;
      }
      for (TrialCombination combination : kept.back()) {
        combination.values[i] = value.value;
        next.push_back(combination);
      }
    }
    kept.push_back(next);
  }
  int runs = 0;
  for (TrialCombination& combination : kept.back()) {
    if (combination.values == job_values) continue;  // the base setting, measured already
    if (runs == max_runs)
      combination.skipped =
          "beyond the " + std::to_string(max_runs) + " experiments the grid may run per setting";
    else
      ++runs;
    grid.push_back(combination);
  }
  // The measured ones first, in grid order; then the skipped.
  std::stable_partition(grid.begin(), grid.end(),
                        [](const TrialCombination& c) { return c.skipped.empty(); });
  return grid;
}

std::string describe_values(const std::vector<TrialParameter>& parameters,
                            const std::vector<int64_t>& values, const TrialContext* context) {
  std::string text;
  for (size_t i = 0; i < parameters.size() && i < values.size(); ++i)
    if (context == nullptr || not_applicable(parameters[i], *context).empty())
      text += (text.empty() ? "" : ", ") + parameters[i].column + "=" + std::to_string(values[i]);
  return text;
}

TrialContext plan_context(const schema::Plan& plan, const JobConfig& config) {
  TrialContext context;
  const schema::Mesh* mesh = plan.mesh();
  if (plan.zero()) {
    context.zero_stage = plan.zero()->stage();
    context.zero_layers_per_unit = plan.zero()->layers_per_unit();
  }
  if (!mesh || !plan.stages()) return context;
  context.gradient_replicas = mesh->data_parallel() * mesh->context_parallel();
  const int ranks = std::max(mesh->pipeline_parallel(), 1);
  const schema::Schedule* schedule = plan.schedule();
  const PipelineLayout layout =
      schedule
          ? PipelineLayout::of(schedule->kind(), ranks, std::max(schedule->virtual_stages(), 1))
          : PipelineLayout(ranks, 1, false);
  std::vector<int64_t> per_rank(ranks, 0);
  for (const schema::Stage* stage : *plan.stages()) {
    const StageLayout chunk{
        stage->first_layer(), stage->num_layers(), stage->has_embedding(), stage->has_head(), {}};
    context.chunk_layers = std::max(context.chunk_layers, stage->num_layers());
    const int rank = layout.rank_of(stage->index());
    if (rank >= 0 && rank < ranks)
      per_rank[rank] += stage_parameters(config.model, chunk, mesh->tensor_parallel(),
                                         config.planner.ignore_small_tensor_threshold);
  }
  context.stage_gradient_elements = *std::max_element(per_rank.begin(), per_rank.end());
  return context;
}

}  // namespace paraplan
