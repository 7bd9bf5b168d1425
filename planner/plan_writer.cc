// plan_writer.cc: schedule generation and FlatBuffer serialization of a planned
// job (conventions in plan_writer.h).
#include "planner/plan_writer.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "common/data_list.h"
#include "planner/cost/model_counts.h"
#include "planner/cost/profile.h"
#include "schema/pipeline_layout.h"
#include "schema/plan_io.h"
#include "schema/zero_stages.h"
#include "schema/zero_units.h"

namespace paraplan {

namespace {
constexpr double kBytesPerGigabyte = 1024.0 * 1024.0 * 1024.0;
}  // namespace

PipelineSchedule candidate_schedule(const JobConfig&, const PlanCandidate& candidate) {
  const PlanSetting& setting = candidate.setting;
  PipelineSchedule schedule =
      generate_schedule(setting.schedule.kind, setting.shape.pipeline_stages,
                        setting.num_micro_batches, setting.schedule.virtual_stages);
  if (auto problem = verify_schedule(schedule))
    throw std::logic_error("planner produced an invalid schedule: " + *problem);
  return schedule;
}

std::vector<StageLayout> virtual_stage_layouts(const std::vector<StageLayout>& ranks,
                                               int virtual_stages, schema::ScheduleKind kind) {
  const int p = static_cast<int>(ranks.size()), v = std::max(virtual_stages, 1);
  if (v == 1) return ranks;
  const PipelineLayout pipeline = PipelineLayout::of(kind, p, v);
  // Chunk c of rank r takes the next share of the rank's layers (and their
  // recompute modes, in order); the earlier chunks take the remainder.
  std::vector<StageLayout> out(static_cast<size_t>(p) * v);
  for (int r = 0; r < p; ++r) {
    const StageLayout& rank = ranks[r];
    int taken = 0;
    for (int c = 0; c < v; ++c) {
      const int n = chunk_layers(rank.num_layers, v, c);
      StageLayout& chunk = out[pipeline.virtual_stage(r, c)];
      chunk.num_layers = n;
      chunk.recompute.assign(rank.recompute.begin() + taken, rank.recompute.begin() + taken + n);
      taken += n;
    }
  }
  int first = 0;
  for (size_t s = 0; s < out.size(); ++s) {
    out[s].first_layer = first;
    out[s].has_embedding = s == 0;
    out[s].has_head = s + 1 == out.size();
    first += out[s].num_layers;
  }
  return out;
}

namespace {

// How the data-parallel reduction is counted: overlapped in buckets or not.
std::string overlap_description(const JobConfig& config, const PlanCandidate& candidate) {
  if (candidate.setting.shape.gradient_replicas() <= 1 || !config.training.gradient_bucket_size)
    return "";
  if (!config.cluster.overlap_communication)
    return "; gradient reduction not overlapped (cluster.overlap_communication = false)";
  double hidden = 0, total = 0;
  for (const StageEstimate& stage : candidate.estimate.stages) {
    hidden += stage.hidden_reduction_seconds;
    total += stage.hidden_reduction_seconds + stage.gradient_reduction_seconds;
  }
  char text[160];
  std::snprintf(text, sizeof text,
                "; gradient reduction in buckets of %lld elements during backward: %.0f%% of it "
                "hidden",
                static_cast<long long>(config.training.gradient_bucket_size),
                total > 0 ? 100 * hidden / total : 0.0);
  return text;
}

std::string compute_model_description(const JobConfig& config, const PlanCandidate& candidate,
                                      const MeasuredProfile* profile) {
  char analytic[160];
  std::snprintf(analytic, sizeof analytic,
                "analytic (GEMM tiles and waves on %d units, %.3g TFLOP/s peak, %.4g GB/s memory)",
                config.cluster.compute_units, config.cluster.peak_flops(config.model.dtype) / 1e12,
                config.cluster.memory_bandwidth_gbps);
  if (profile == nullptr) return analytic;
  std::string text = "profile " + profile->path() + " (" + profile->device();
  if (const auto& provenance = profile->data().measured_on)
    text += ", measured " + provenance->date + " on " + provenance->description;
  text += ")";
  const PlanSetting& setting = candidate.setting;
  if (setting.shape.context_parallel > 1)
    text += "; compute: " + std::string(analytic) + ", the profile measures no context parallelism";
  else if (!profile->lookup(config.model, setting.shape.tensor_parallel, setting.micro_batch_size))
    text += "; compute: " + std::string(analytic) + ", no entry for tp " +
            std::to_string(setting.shape.tensor_parallel) + " x micro-batch " +
            std::to_string(setting.micro_batch_size);
  return text;
}

// [data] as the plan records it (Training.data; no datasets: `train --data`
// names them), with document masking's separator (-1 without: not written).
flatbuffers::Offset<schema::Data> data_table(flatbuffers::FlatBufferBuilder& builder,
                                             const DataConfig& data) {
  std::vector<flatbuffers::Offset<schema::DataSource>> sources;
  for (const DataSourceConfig& source : data.train)
    sources.push_back(schema::CreateDataSourceDirect(
        builder, absolute_data_list(source.path).c_str(), source.weight));
  const std::string validation = absolute_data_list(data.validation);
  return schema::CreateDataDirect(builder, &sources, validation.c_str(), data.shuffle, data.seed,
                                  data.document_mask ? data.document_separator : -1);
}

}  // namespace

namespace {

// Where the context-parallel ring's exposed transfers are (none without cp).
std::string context_parallel_description(const PlanCandidate& candidate) {
  if (candidate.setting.shape.context_parallel <= 1) return "";
  return "; context parallel " + std::to_string(candidate.setting.shape.context_parallel) +
         ": the ring's exposed key/value transfers in tensor_parallel_seconds";
}

}  // namespace

std::string time_model_description(const JobConfig& config, const PlanCandidate& candidate,
                                   const MeasuredProfile* profile) {
  return compute_model_description(config, candidate, profile) +
         overlap_description(config, candidate) + context_parallel_description(candidate);
}

// The schedule: every pipeline rank's stream and, under ZeRO-3, whether it
// keeps its parameters gathered.
flatbuffers::Offset<schema::Schedule> schedule_table(flatbuffers::FlatBufferBuilder& builder,
                                                     const JobConfig& config,
                                                     const PlanCandidate& candidate) {
  namespace fb = flatbuffers;
  const PlanSetting& setting = candidate.setting;
  const PipelineSchedule plan_schedule = candidate_schedule(config, candidate);
  const std::vector<StageLayout> virtual_stages = virtual_stage_layouts(
      candidate.stages, setting.schedule.virtual_stages, setting.schedule.kind);
  const PipelineLayout pipeline =
      PipelineLayout::of(setting.schedule.kind, static_cast<int>(plan_schedule.stages.size()),
                         std::max(setting.schedule.virtual_stages, 1));
  std::vector<fb::Offset<schema::StageSchedule>> stage_schedules;
  for (size_t s = 0; s < plan_schedule.stages.size(); ++s) {
    std::vector<schema::Instruction> instructions;
    for (const PipelineInstruction& ins : plan_schedule.stages[s])
      instructions.emplace_back(ins.op, static_cast<uint8_t>(ins.chunk), 0, ins.micro_batch, -1);
    // ZeRO-3: whether this pipeline rank keeps its parameters gathered.
    const bool keep_gathered =
        shards_parameters(setting.zero_stage) && candidate.stages.at(s).keep_parameters_gathered;
    // ZeRO-2 and 3: the unit ops that gather, release and reduce-scatter.
    std::vector<ChunkUnits> units;
    for (int c = 0; c < pipeline.chunks(); ++c) {
      const StageLayout& chunk = virtual_stages.at(pipeline.virtual_stage(static_cast<int>(s), c));
      units.push_back(chunk_units(chunk.has_embedding, chunk.has_head, chunk.num_layers,
                                  config.model.tied_embeddings, setting.zero_layers_per_unit));
    }
    instructions = add_zero_unit_ops(instructions, units, setting.zero_stage, keep_gathered);
    stage_schedules.push_back(schema::CreateStageScheduleDirect(builder, static_cast<int32_t>(s),
                                                                &instructions, keep_gathered));
  }
  return schema::CreateScheduleDirect(builder, plan_schedule.kind, &stage_schedules,
                                      plan_schedule.virtual_stages, schema::Transfers::Posted);
}

// The predictions: per stage, its times and memory, and the step's.
flatbuffers::Offset<schema::Predictions> predictions_table(flatbuffers::FlatBufferBuilder& builder,
                                                           const JobConfig& config,
                                                           const PlanCandidate& candidate,
                                                           const MeasuredProfile* profile) {
  namespace fb = flatbuffers;
  const ModelConfig& model = config.model;
  const ClusterConfig& cluster = config.cluster;
  const PlanSetting& setting = candidate.setting;
  std::vector<fb::Offset<schema::StagePrediction>> stage_predictions;
  const PlanEstimate& estimate = candidate.estimate;
  for (size_t s = 0; s < estimate.stages.size(); ++s) {
    const StageEstimate& stage = estimate.stages[s];
    const MemoryBreakdown& m = stage.memory;
    auto memory = schema::CreateStageMemory(
        builder, m.weights, m.gradients, m.optimizer_state + m.optimizer_transient, m.activations,
        m.transient, m.total(), m.gathered, m.communicator_buffers, m.transient_reserve);
    // ZeRO-3's gathers run on the ZeRO group, where replay counts the
    // gradient reduction: the step's (every micro-batch's) go there, so the
    // parts still add up to the step.
    const double zero_group = stage.gradient_reduction_seconds +
                              setting.num_micro_batches * stage.parameter_gather_seconds;
    // The context-parallel ring's exposed transfers are collectives inside
    // the micro-batch's blocks, as the tensor-parallel ones: counted with them.
    const double in_blocks = stage.tensor_parallel_seconds + stage.context_parallel_seconds;
    const double communication =
        setting.num_micro_batches * (in_blocks + stage.pipeline_p2p_seconds) + zero_group;
    stage_predictions.push_back(schema::CreateStagePrediction(
        builder, static_cast<int32_t>(s), stage.forward_seconds, stage.backward_seconds,
        communication, memory, in_blocks, stage.pipeline_p2p_seconds, zero_group,
        stage.optimizer_seconds, stage.bubble_seconds));
  }
  auto cluster_table = schema::CreateClusterDirect(
      builder, cluster.preset.c_str(), setting.layout.num_nodes, setting.layout.devices_per_node,
      static_cast<uint64_t>(cluster.device_memory_gb * kBytesPerGigabyte),
      cluster.peak_flops(model.dtype), cluster.intra_node_bandwidth_gbps * 1e9,
      cluster.intra_node_latency_us * 1e-6, cluster.inter_node_bandwidth_gbps * 1e9,
      cluster.inter_node_latency_us * 1e-6, cluster.memory_bandwidth_gbps * 1e9,
      cluster.compute_units, static_cast<uint64_t>(cluster.reserved_memory_gb * kBytesPerGigabyte));
  const StepPrediction& prediction = estimate.prediction;
  return schema::CreatePredictionsDirect(
      builder, prediction.step_seconds, prediction.bubble_ratio, prediction.tokens_per_second,
      prediction.mfu, &stage_predictions, cluster_table,
      time_model_description(config, candidate, profile).c_str());
}

std::vector<uint8_t> serialize_plan(const JobConfig& config, const PlanCandidate& candidate,
                                    const MeasuredProfile* profile) {
  namespace fb = flatbuffers;
  fb::FlatBufferBuilder builder(64 * 1024);
  const ModelConfig& model = config.model;
  const TrainingConfig& training = config.training;
  const PlanSetting& setting = candidate.setting;

  std::vector<fb::Offset<schema::KeyValue>> options;
  for (const auto& [key, value] : recorded_job_options(config))
    options.push_back(schema::CreateKeyValueDirect(builder, key.c_str(), value.c_str()));
  const std::string task_name = config.task_name();
  auto header = schema::CreateHeaderDirect(builder, kPlanSchemaVersion, task_name.c_str(),
                                           kPlannerVersion, &options);

  auto model_table = schema::CreateModel(
      builder, model.architecture, model.vocab_size, model.seq_len, model.num_layers, model.d_model,
      model.num_heads, model.ffn_size, model.tied_embeddings, model.dtype,
      static_cast<float>(model.norm_epsilon()), static_cast<float>(model.init_std), kv_heads(model),
      static_cast<float>(model.rope_theta), static_cast<float>(model.rope_scaling_factor),
      static_cast<float>(model.rope_low_freq_factor),
      static_cast<float>(model.rope_high_freq_factor), model.rope_original_max_positions,
      model.qkv_bias);

  auto optimizer = schema::CreateOptimizer(
      builder, static_cast<float>(training.learning_rate),
      static_cast<float>(training.min_learning_rate), static_cast<float>(training.beta1),
      static_cast<float>(training.beta2), static_cast<float>(training.epsilon),
      static_cast<float>(training.weight_decay), static_cast<float>(training.grad_clip),
      training.warmup_steps, training.decay_style, training.total_steps, training.wsd_decay_steps,
      training.wsd_decay_style);
  auto training_table = schema::CreateTraining(
      builder, training.global_batch_size, setting.micro_batch_size, setting.num_micro_batches,
      optimizer, training.seed, training.eval_interval, training.eval_batches,
      static_cast<uint64_t>(training.gradient_bucket_size), data_table(builder, config.data));

  auto mesh = schema::CreateMesh(builder, setting.shape.pipeline_stages,
                                 setting.shape.data_parallel, setting.shape.tensor_parallel,
                                 setting.layout.num_nodes, setting.layout.devices_per_node,
                                 setting.shape.sequence_parallel, setting.shape.context_parallel);

  std::vector<fb::Offset<schema::Stage>> stages;
  const std::vector<StageLayout> virtual_stages = virtual_stage_layouts(
      candidate.stages, setting.schedule.virtual_stages, setting.schedule.kind);
  for (size_t s = 0; s < virtual_stages.size(); ++s) {
    const StageLayout& stage = virtual_stages[s];
    stages.push_back(schema::CreateStageDirect(builder, static_cast<int32_t>(s), stage.first_layer,
                                               stage.num_layers, stage.has_embedding,
                                               stage.has_head, &stage.recompute));
  }
  auto zero =
      schema::CreateZero(builder, setting.zero_stage,
                         shards_optimizer_state(setting.zero_stage) ? setting.zero_ngroups : 1,
                         shards_gradients(setting.zero_stage) ? setting.zero_layers_per_unit : 1);

  auto schedule = schedule_table(builder, config, candidate);
  auto predictions = predictions_table(builder, config, candidate, profile);

  auto stages_vector = builder.CreateVector(stages);
  auto root = schema::CreatePlan(builder, header, model_table, training_table, mesh, stages_vector,
                                 zero, schedule, predictions);
  schema::FinishPlanBuffer(builder, root);
  return std::vector<uint8_t>(builder.GetBufferPointer(),
                              builder.GetBufferPointer() + builder.GetSize());
}

}  // namespace paraplan
