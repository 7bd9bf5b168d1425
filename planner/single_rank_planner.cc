// single_rank_planner.cc: decisions, predictions and FlatBuffer serialization of
// the world-size-1 plan.
#include "planner/single_rank_planner.h"

#include <flatbuffers/flatbuffers.h>

#include <cstdio>
#include <stdexcept>

#include "schema/plan_io.h"

namespace paraplan {

using schema::RecomputeMode;

namespace {

constexpr double kBytesPerGigabyte = 1024.0 * 1024.0 * 1024.0;

std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

// AutoDist suffix matching: entry names module_name or a dotted suffix of it.
bool matches(const std::string& entry, const std::string& module_name) {
  if (entry == module_name) return true;
  return module_name.size() > entry.size() &&
         module_name.compare(module_name.size() - entry.size(), entry.size(), entry) == 0 &&
         module_name[module_name.size() - entry.size() - 1] == '.';
}

// "1.50 GB", "12.00 MB", "3.25 KB" (binary units, as memory_constraint).
std::string format_bytes(uint64_t bytes) {
  const double value = static_cast<double>(bytes);
  const char* unit = "GB";
  double scaled = value / kBytesPerGigabyte;
  if (value < kBytesPerGigabyte / 10) unit = "MB", scaled = value / (1024.0 * 1024.0);
  if (value < 1024.0 * 1024.0 / 10) unit = "KB", scaled = value / 1024.0;
  char text[48];
  std::snprintf(text, sizeof(text), "%.2f %s", scaled, unit);
  return text;
}

std::string describe(const MemoryBreakdown& memory) {
  return "weights " + format_bytes(memory.weights) + ", gradients " +
         format_bytes(memory.gradients) + ", optimizer state " +
         format_bytes(memory.optimizer_state + memory.optimizer_transient) + ", activations " +
         format_bytes(memory.activations) + ", transient " + format_bytes(memory.transient) +
         "; total " + format_bytes(memory.total());
}

void reject_multi_rank(const JobConfig& config) {
  const PlannerOptions& p = config.planner;
  const std::pair<const char*, int> settings[] = {
      {"world_size", p.world_size},
      {"mesh_row", p.mesh_row},
      {"mesh_col", p.mesh_col},
      {"pipeline_nstages", p.pipeline_nstages},
      {"tensor_parallel_degree", p.tensor_parallel_degree},
      {"data_parallel_degree", p.data_parallel_degree}};
  for (const auto& [key, value] : settings)
    if (value > 1)
      throw std::runtime_error(
          config.source + ": [planner] " + key + " = " + std::to_string(value) +
          ": this planner version plans world size 1 only; multi-rank planning arrives with "
          "the search. Set world_size, mesh_row, mesh_col, pipeline_nstages, "
          "tensor_parallel_degree and data_parallel_degree to 1 (or leave them at their "
          "defaults)");
  if (!p.is_train)
    throw std::runtime_error(config.source +
                             ": [planner] is_train = false: inference plans are not supported; "
                             "the runtime trains. Set is_train = true");
}

}  // namespace

std::vector<RecomputeMode> recompute_modes_from_modules(const std::string& recompute_modules,
                                                        int num_layers, const std::string& source) {
  std::vector<RecomputeMode> modes(static_cast<size_t>(num_layers), RecomputeMode::None);
  size_t start = 0;
  while (start <= recompute_modules.size()) {
    size_t comma = recompute_modules.find(',', start);
    if (comma == std::string::npos) comma = recompute_modules.size();
    const std::string entry = trim(recompute_modules.substr(start, comma - start));
    start = comma + 1;
    if (entry.empty()) continue;
    bool matched = false;
    if (entry == "ROOT" || matches(entry, "transformer") || matches(entry, "transformer.h")) {
      modes.assign(modes.size(), RecomputeMode::Full);
      matched = true;
    }
    for (int i = 0; i < num_layers; ++i) {
      const std::string block = "transformer.h." + std::to_string(i);
      if (matches(entry, block)) {
        modes[i] = RecomputeMode::Full;
        matched = true;
      } else if (matches(entry, block + ".attn.core_attention")) {
        if (modes[i] == RecomputeMode::None) modes[i] = RecomputeMode::Selective;
        matched = true;
      }
    }
    if (!matched)
      throw std::runtime_error(
          source + ": [planner] recompute_modules entry '" + entry +
          "' names no module; valid module names (or any dotted suffix of them): ROOT, "
          "transformer, transformer.h (every block, full recompute), transformer.h.<i> for i in "
          "0.." +
          std::to_string(num_layers - 1) +
          " (block i, full recompute), transformer.h.<i>.attn.core_attention (selective: the "
          "attention core)");
  }
  return modes;
}

SingleRankPlan plan_single_rank(const JobConfig& config) {
  validate_job_config(config);
  reject_multi_rank(config);
  const ModelConfig& model = config.model;
  SingleRankPlan plan;
  plan.stage.first_layer = 0;
  plan.stage.num_layers = model.num_layers;
  plan.stage.has_embedding = true;
  plan.stage.has_head = true;
  plan.stage.recompute = recompute_modes_from_modules(config.planner.recompute_modules,
                                                      model.num_layers, config.source);

  const int global = config.training.global_batch_size;
  const int data_parallel = 1;
  int fixed_micro = 0;
  std::string micro_field;
  if (config.was_set("training.micro_batch_size")) {
    fixed_micro = config.training.micro_batch_size, micro_field = "[training] micro_batch_size";
  } else if (config.was_set("planner.micro_batch_size")) {
    fixed_micro = config.planner.micro_batch_size, micro_field = "[planner] micro_batch_size";
  }
  const int fixed_count = config.was_set("planner.update_freq") ? config.planner.update_freq : 0;
  if (fixed_micro > 0 && global % (fixed_micro * data_parallel) != 0)
    throw std::runtime_error(
        config.source + ": [training] global_batch_size (" + std::to_string(global) +
        ") must be divisible by " + micro_field + " (" + std::to_string(fixed_micro) +
        ") x data-parallel degree (1); choose a divisor of " + std::to_string(global));
  if (fixed_count > 0 && global % (fixed_count * data_parallel) != 0)
    throw std::runtime_error(config.source + ": [training] global_batch_size (" +
                             std::to_string(global) +
                             ") must be divisible by [planner] update_freq (" +
                             std::to_string(fixed_count) + ") x data-parallel degree (1)");
  if (fixed_micro > 0 && fixed_count > 0 &&
      int64_t{fixed_micro} * fixed_count * data_parallel != global)
    throw std::runtime_error(
        config.source + ": " + micro_field + " (" + std::to_string(fixed_micro) +
        ") x [planner] update_freq (" + std::to_string(fixed_count) +
        ") x data-parallel degree (1) must equal [training] global_batch_size (" +
        std::to_string(global) + "); set at most two of them");

  // Candidate micro-batch sizes, largest first: the fixed one, or every divisor.
  std::vector<int> candidates;
  if (fixed_micro > 0) {
    candidates.push_back(fixed_micro);
  } else if (fixed_count > 0) {
    candidates.push_back(global / (fixed_count * data_parallel));
  } else {
    for (int micro = global / data_parallel; micro >= 1; --micro)
      if ((global / data_parallel) % micro == 0) candidates.push_back(micro);
  }
  const ParallelShape shape{1, data_parallel, 1};
  const double limit = config.planner.memory_constraint * kBytesPerGigabyte;
  for (int micro : candidates) {
    const int count = global / (micro * data_parallel);
    MemoryBreakdown memory =
        stage_memory(model, config.planner, plan.stage, 0, shape, micro, count);
    const bool fits = !config.planner.consider_mem || static_cast<double>(memory.total()) <= limit;
    if (fits || micro == candidates.back()) {
      plan.micro_batch_size = micro;
      plan.num_micro_batches = count;
      plan.memory = memory;
    }
    if (fits) break;
  }
  if (config.planner.consider_mem && static_cast<double>(plan.memory.total()) > limit) {
    char constraint[32];
    std::snprintf(constraint, sizeof(constraint), "%g", config.planner.memory_constraint);
    throw std::runtime_error(
        config.source + ": the job does not fit [planner] memory_constraint = " + constraint +
        " GB on one device at micro_batch_size " + std::to_string(plan.micro_batch_size) + " (" +
        describe(plan.memory) + "). Recompute blocks ([planner] recompute_modules = \"ROOT\"), " +
        (fixed_micro > 1 || fixed_count > 0 ? "use a smaller micro-batch, " : "") +
        "raise memory_constraint, or set consider_mem = false");
  }

  plan.schedule = generate_schedule(config.planner.pipeline_scheduler, 1, plan.num_micro_batches);
  if (auto problem = verify_schedule(plan.schedule))
    throw std::logic_error("single-rank planner produced an invalid schedule: " + *problem);
  const double peak = config.cluster.peak_flops(model.dtype);
  plan.time = stage_compute_time(model, plan.stage, plan.micro_batch_size, peak);
  const double optimizer = optimizer_step_seconds(stage_parameters(model, plan.stage), peak);
  plan.prediction =
      predict_step(model, {plan.time}, plan.num_micro_batches, 0.0, optimizer, global, peak, 1);
  return plan;
}

std::vector<uint8_t> serialize_single_rank_plan(const JobConfig& config,
                                                const SingleRankPlan& plan) {
  namespace fb = flatbuffers;
  fb::FlatBufferBuilder builder(64 * 1024);
  const ModelConfig& model = config.model;
  const TrainingConfig& training = config.training;
  const ClusterConfig& cluster = config.cluster;

  std::vector<fb::Offset<schema::KeyValue>> options;
  for (const auto& [key, value] : job_config_options(config))
    options.push_back(schema::CreateKeyValueDirect(builder, key.c_str(), value.c_str()));
  const std::string task_name = config.task_name();
  auto header = schema::CreateHeaderDirect(builder, kPlanSchemaVersion, task_name.c_str(),
                                           kPlannerVersion, &options);

  auto model_table = schema::CreateModel(
      builder, model.architecture, model.vocab_size, model.seq_len, model.num_layers, model.d_model,
      model.num_heads, model.ffn_size, model.tied_embeddings, model.dtype,
      static_cast<float>(model.layernorm_epsilon), static_cast<float>(model.init_std));

  auto optimizer = schema::CreateOptimizer(
      builder, static_cast<float>(training.learning_rate),
      static_cast<float>(training.min_learning_rate), static_cast<float>(training.beta1),
      static_cast<float>(training.beta2), static_cast<float>(training.epsilon),
      static_cast<float>(training.weight_decay), static_cast<float>(training.grad_clip),
      training.warmup_steps, training.decay_style, training.total_steps);
  auto training_table = schema::CreateTraining(
      builder, training.global_batch_size, plan.micro_batch_size, plan.num_micro_batches, optimizer,
      training.seed, training.eval_interval, training.eval_batches);

  auto mesh = schema::CreateMesh(builder, 1, 1, 1, 1, 1);

  std::vector<fb::Offset<schema::Stage>> stages = {schema::CreateStageDirect(
      builder, 0, plan.stage.first_layer, plan.stage.num_layers, plan.stage.has_embedding,
      plan.stage.has_head, &plan.stage.recompute)};

  auto zero = schema::CreateZero(builder, config.planner.zero_stage, config.planner.zero_ngroups);

  std::vector<fb::Offset<schema::StageSchedule>> stage_schedules;
  for (size_t s = 0; s < plan.schedule.stages.size(); ++s) {
    std::vector<schema::Instruction> instructions;
    for (const PipelineInstruction& ins : plan.schedule.stages[s])
      instructions.emplace_back(ins.op, ins.micro_batch, ins.peer_micro_batch);
    stage_schedules.push_back(
        schema::CreateStageScheduleDirect(builder, static_cast<int32_t>(s), &instructions));
  }
  auto schedule = schema::CreateScheduleDirect(builder, plan.schedule.kind, &stage_schedules);

  const MemoryBreakdown& m = plan.memory;
  // The schema has one optimizer field: resident state plus the step's transient.
  auto memory = schema::CreateStageMemory(builder, m.weights, m.gradients,
                                          m.optimizer_state + m.optimizer_transient, m.activations,
                                          m.transient, m.total());
  std::vector<fb::Offset<schema::StagePrediction>> stage_predictions = {
      schema::CreateStagePrediction(builder, 0, plan.time.forward_seconds,
                                    plan.time.backward_seconds, 0.0, memory)};
  auto cluster_table = schema::CreateClusterDirect(
      builder, cluster.preset.c_str(), cluster.num_nodes, cluster.devices_per_node,
      static_cast<uint64_t>(cluster.device_memory_gb * kBytesPerGigabyte),
      cluster.peak_flops(model.dtype), cluster.intra_node_bandwidth_gbps * 1e9,
      cluster.intra_node_latency_us * 1e-6, cluster.inter_node_bandwidth_gbps * 1e9,
      cluster.inter_node_latency_us * 1e-6);
  auto predictions = schema::CreatePredictionsDirect(
      builder, plan.prediction.step_seconds, plan.prediction.bubble_ratio,
      plan.prediction.tokens_per_second, plan.prediction.mfu, &stage_predictions, cluster_table);

  auto stages_vector = builder.CreateVector(stages);
  auto root = schema::CreatePlan(builder, header, model_table, training_table, mesh, stages_vector,
                                 zero, schedule, predictions);
  schema::FinishPlanBuffer(builder, root);
  return std::vector<uint8_t>(builder.GetBufferPointer(),
                              builder.GetBufferPointer() + builder.GetSize());
}

std::vector<uint8_t> build_single_rank_plan(const JobConfig& config) {
  return serialize_single_rank_plan(config, plan_single_rank(config));
}

}  // namespace paraplan
