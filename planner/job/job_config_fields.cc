// job_config_fields.cc: the option table, every JobConfig option described once
// (its section, key, type and how to read and write it), and the option dump
// written into the plan header (job_config_options).
//
// Parsing TOML, parsing override strings, listing valid keys (job_config.cc) and
// dumping the options all walk this one table, so a new option is one line here.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "planner/job/cluster_presets.h"
#include "planner/job/job_config.h"
#include "planner/job/job_config_internal.h"
#include "schema/schedule_kinds.h"

namespace paraplan {
namespace job_fields {
namespace {

template <typename T>
FieldSpec make_field(const char* section, const char* key, T& (*access)(JobConfig&)) {
  FieldSpec spec;
  spec.section = section;
  spec.key = key;
  auto read = [access](const JobConfig& config) -> const T& {
    return access(const_cast<JobConfig&>(config));
  };
  spec.copy = [access, read](JobConfig& to, const JobConfig& from) { access(to) = read(from); };
  if constexpr (std::is_same_v<T, bool>) {
    spec.kind = FieldKind::Boolean;
    spec.set = [access](JobConfig& c, const FieldValue& v) { access(c) = std::get<bool>(v); };
    spec.get = [read](const JobConfig& c) -> std::string { return read(c) ? "true" : "false"; };
  } else if constexpr (std::is_integral_v<T>) {
    spec.kind = FieldKind::Integer;
    spec.min_integer = std::is_signed_v<T> ? std::numeric_limits<T>::min() : 0;
    spec.max_integer = static_cast<int64_t>(
        std::min<uint64_t>(std::numeric_limits<T>::max(), std::numeric_limits<int64_t>::max()));
    spec.set = [access](JobConfig& c, const FieldValue& v) {
      access(c) = static_cast<T>(std::get<int64_t>(v));
    };
    spec.get = [read](const JobConfig& c) { return std::to_string(read(c)); };
  } else if constexpr (std::is_same_v<T, double>) {
    spec.kind = FieldKind::Float;
    spec.set = [access](JobConfig& c, const FieldValue& v) { access(c) = std::get<double>(v); };
    spec.get = [read](const JobConfig& c) { return format_double(read(c)); };
  } else {
    static_assert(std::is_same_v<T, std::string>);
    spec.kind = FieldKind::String;
    spec.set = [access](JobConfig& c, const FieldValue& v) {
      access(c) = std::get<std::string>(v);
    };
    spec.get = [read](const JobConfig& c) { return read(c); };
  }
  return spec;
}

// A field stored as T but written as one of a fixed set of strings.
template <typename T>
FieldSpec make_choice(const char* section, const char* key, T& (*access)(JobConfig&),
                      std::vector<std::pair<std::string, T>> names) {
  FieldSpec spec;
  spec.section = section;
  spec.key = key;
  spec.kind = FieldKind::Choice;
  for (const auto& entry : names) spec.choices.push_back(entry.first);
  spec.copy = [access](JobConfig& to, const JobConfig& from) {
    access(to) = access(const_cast<JobConfig&>(from));
  };
  spec.set = [access, names](JobConfig& c, const FieldValue& v) {
    for (const auto& [name, value] : names)
      if (name == std::get<std::string>(v)) access(c) = value;
  };
  spec.get = [access, names](const JobConfig& c) {
    const T& current = access(const_cast<JobConfig&>(c));
    for (const auto& [name, value] : names)
      if (value == current) return name;
    return std::string("?");
  };
  return spec;
}

}  // namespace

#define PARAPLAN_FIELD(section, member) \
  make_field(                           \
      #section, #member, +[](JobConfig & c) -> auto& { return c.section.member; })
#define PARAPLAN_CHOICE(section, member, ...) \
  make_choice(                                \
      #section, #member, +[](JobConfig & c) -> auto& { return c.section.member; }, __VA_ARGS__)

namespace {

// [job] and [model].
std::vector<FieldSpec> model_fields() {
  using schema::Architecture, schema::DType;
  return {
      PARAPLAN_FIELD(job, name),
      PARAPLAN_CHOICE(model, architecture,
                      std::vector<std::pair<std::string, Architecture>>{
                          {"gpt2", Architecture::Gpt2}, {"llama", Architecture::Llama}}),
      PARAPLAN_FIELD(model, vocab_size),
      PARAPLAN_FIELD(model, seq_len),
      PARAPLAN_FIELD(model, num_layers),
      PARAPLAN_FIELD(model, d_model),
      PARAPLAN_FIELD(model, num_heads),
      PARAPLAN_FIELD(model, ffn_size),
      PARAPLAN_FIELD(model, tied_embeddings),
      PARAPLAN_CHOICE(model, dtype,
                      std::vector<std::pair<std::string, DType>>{{"float32", DType::Float32},
                                                                 {"bfloat16", DType::BFloat16}}),
      PARAPLAN_FIELD(model, layernorm_epsilon),
      PARAPLAN_FIELD(model, init_std),
      PARAPLAN_FIELD(model, num_kv_heads),
      PARAPLAN_FIELD(model, rms_norm_eps),
      PARAPLAN_FIELD(model, rope_theta),
      PARAPLAN_FIELD(model, rope_scaling_factor),
      PARAPLAN_FIELD(model, rope_low_freq_factor),
      PARAPLAN_FIELD(model, rope_high_freq_factor),
      PARAPLAN_FIELD(model, rope_original_max_positions),
      PARAPLAN_FIELD(model, qkv_bias),
  };
}

// [training] and [data] ([data] train: a dataset or a blend, as TOML text).
std::vector<FieldSpec> training_fields() {
  using schema::LrDecayStyle;
  // [data] train: one dataset or a blend, held as canonical TOML text.
  FieldSpec data_train;
  data_train.section = "data";
  data_train.key = "train";
  data_train.kind = FieldKind::DataSources;
  data_train.set = [](JobConfig& c, const FieldValue& v) {
    const std::string& text = std::get<std::string>(v);
    c.data.train = text.empty() ? std::vector<DataSourceConfig>{}
                                : data_sources_from_text(text, "[data] train");
  };
  data_train.get = [](const JobConfig& c) {
    return c.data.train.empty() ? std::string() : data_sources_text(c.data.train);
  };
  data_train.copy = [](JobConfig& to, const JobConfig& from) { to.data.train = from.data.train; };
  return {
      PARAPLAN_FIELD(training, global_batch_size),
      PARAPLAN_FIELD(training, micro_batch_size),
      PARAPLAN_FIELD(training, learning_rate),
      PARAPLAN_FIELD(training, min_learning_rate),
      PARAPLAN_FIELD(training, beta1),
      PARAPLAN_FIELD(training, beta2),
      PARAPLAN_FIELD(training, epsilon),
      PARAPLAN_FIELD(training, weight_decay),
      PARAPLAN_FIELD(training, grad_clip),
      PARAPLAN_FIELD(training, warmup_steps),
      PARAPLAN_FIELD(training, total_steps),
      PARAPLAN_CHOICE(training, decay_style,
                      std::vector<std::pair<std::string, LrDecayStyle>>{
                          {"cosine", LrDecayStyle::Cosine},
                          {"linear", LrDecayStyle::Linear},
                          {"constant", LrDecayStyle::Constant},
                          {"wsd", LrDecayStyle::WarmupStableDecay}}),
      PARAPLAN_FIELD(training, wsd_decay_steps),
      PARAPLAN_CHOICE(training, wsd_decay_style,
                      std::vector<std::pair<std::string, schema::WsdDecayStyle>>{
                          {"linear", schema::WsdDecayStyle::Linear},
                          {"cosine", schema::WsdDecayStyle::Cosine},
                          {"minus_sqrt", schema::WsdDecayStyle::MinusSqrt}}),
      PARAPLAN_FIELD(training, seed),
      PARAPLAN_FIELD(training, eval_interval),
      PARAPLAN_FIELD(training, eval_batches),
      PARAPLAN_FIELD(training, gradient_bucket_size),
      data_train,
      PARAPLAN_FIELD(data, validation),
      PARAPLAN_FIELD(data, shuffle),
      PARAPLAN_FIELD(data, seed),
      PARAPLAN_FIELD(data, document_mask),
      PARAPLAN_FIELD(data, document_separator),
  };
}

// [cluster]: a preset and its figures.
std::vector<FieldSpec> cluster_fields() {
  std::vector<std::pair<std::string, std::string>> presets;
  for (const std::string& name : cluster_preset_names()) presets.emplace_back(name, name);
  return {
      PARAPLAN_CHOICE(cluster, preset, presets),
      PARAPLAN_FIELD(cluster, num_nodes),
      PARAPLAN_FIELD(cluster, devices_per_node),
      PARAPLAN_FIELD(cluster, device_memory_gb),
      PARAPLAN_FIELD(cluster, reserved_memory_gb),
      PARAPLAN_FIELD(cluster, peak_tflops_fp32),
      PARAPLAN_FIELD(cluster, peak_tflops_bf16),
      PARAPLAN_FIELD(cluster, intra_node_bandwidth_gbps),
      PARAPLAN_FIELD(cluster, intra_node_latency_us),
      PARAPLAN_FIELD(cluster, inter_node_bandwidth_gbps),
      PARAPLAN_FIELD(cluster, inter_node_latency_us),
      PARAPLAN_FIELD(cluster, memory_bandwidth_gbps),
      PARAPLAN_FIELD(cluster, compute_units),
      PARAPLAN_FIELD(cluster, cores_per_node),
      PARAPLAN_FIELD(cluster, overlap_communication),
  };
}

// [planner]: AutoDist's options; the scheduler, the pipeline degree and
// sequence parallelism also take 'auto'.
std::vector<FieldSpec> planner_fields() {
  using schema::ScheduleKind;
  // Every kind by its catalogue name, or 'auto' (unset).
  FieldSpec pipeline_scheduler = PARAPLAN_CHOICE(planner, pipeline_scheduler, [] {
    std::vector<std::pair<std::string, std::optional<ScheduleKind>>> kinds;
    for (const ScheduleKindTraits& row : every_schedule_kind())
      kinds.emplace_back(row.name, row.kind);
    kinds.emplace_back("auto", std::nullopt);
    return kinds;
  }());
  FieldSpec pipeline_nstages;
  pipeline_nstages.section = "planner";
  pipeline_nstages.key = "pipeline_nstages";
  pipeline_nstages.kind = FieldKind::IntegerOrAuto;
  pipeline_nstages.min_integer = 1;
  pipeline_nstages.max_integer = std::numeric_limits<int>::max();
  pipeline_nstages.set = [](JobConfig& c, const FieldValue& v) {
    c.planner.pipeline_nstages =
        std::holds_alternative<int64_t>(v) ? static_cast<int>(std::get<int64_t>(v)) : 0;
  };
  pipeline_nstages.copy = [](JobConfig& to, const JobConfig& from) {
    to.planner.pipeline_nstages = from.planner.pipeline_nstages;
  };
  pipeline_nstages.get = [](const JobConfig& c) {
    return c.planner.pipeline_nstages == 0 ? std::string("auto")
                                           : std::to_string(c.planner.pipeline_nstages);
  };
  FieldSpec sequence_parallel;
  sequence_parallel.section = "planner";
  sequence_parallel.key = "sequence_parallel";
  sequence_parallel.kind = FieldKind::BooleanOrAuto;
  sequence_parallel.set = [](JobConfig& c, const FieldValue& v) {
    c.planner.sequence_parallel =
        std::holds_alternative<bool>(v) ? std::optional<bool>(std::get<bool>(v)) : std::nullopt;
  };
  sequence_parallel.copy = [](JobConfig& to, const JobConfig& from) {
    to.planner.sequence_parallel = from.planner.sequence_parallel;
  };
  sequence_parallel.get = [](const JobConfig& c) {
    const std::optional<bool>& value = c.planner.sequence_parallel;
    return std::string(!value ? "auto" : *value ? "true" : "false");
  };
  return {
      PARAPLAN_FIELD(planner, task_name),
      PARAPLAN_FIELD(planner, consider_mem),
      PARAPLAN_FIELD(planner, memory_constraint),
      PARAPLAN_FIELD(planner, memory_granularity),
      PARAPLAN_FIELD(planner, transient_mem_coef),
      PARAPLAN_FIELD(planner, opt_resident_coef),
      PARAPLAN_FIELD(planner, opt_transient_coef),
      PARAPLAN_FIELD(planner, recompute_modules),
      PARAPLAN_FIELD(planner, zero_stage),
      PARAPLAN_FIELD(planner, zero_ngroups),
      PARAPLAN_FIELD(planner, zero_layers_per_unit),
      PARAPLAN_FIELD(planner, pipeline_pivots),
      pipeline_nstages,
      pipeline_scheduler,
      PARAPLAN_FIELD(planner, pipeline_virtual_stages),
      sequence_parallel,
      PARAPLAN_FIELD(planner, max_pipeline_bubble_ratio),
      PARAPLAN_FIELD(planner, max_pipeline_unbalance_ratio),
      PARAPLAN_FIELD(planner, mesh_row),
      PARAPLAN_FIELD(planner, mesh_col),
      PARAPLAN_FIELD(planner, world_size),
      PARAPLAN_FIELD(planner, micro_batch_size),
      PARAPLAN_FIELD(planner, update_freq),
      PARAPLAN_FIELD(planner, profile_dir),
      PARAPLAN_FIELD(planner, parallel_profile),
      PARAPLAN_FIELD(planner, re_profile),
      PARAPLAN_FIELD(planner, topk),
      PARAPLAN_CHOICE(planner, solver,
                      std::vector<std::pair<std::string, PlannerSolver>>{
                          {"dp", PlannerSolver::DynamicProgramming},
                          {"ilp", PlannerSolver::IntegerLinearProgramming}}),
      PARAPLAN_FIELD(planner, nproc),
      PARAPLAN_FIELD(planner, load_plan_path),
      PARAPLAN_FIELD(planner, save_plan_path),
      PARAPLAN_FIELD(planner, partition_constraints_path),
      PARAPLAN_FIELD(planner, is_train),
      PARAPLAN_FIELD(planner, verbose),
      PARAPLAN_FIELD(planner, ignore_small_tensor_threshold),
      PARAPLAN_FIELD(planner, tensor_parallel_degree),
      PARAPLAN_FIELD(planner, data_parallel_degree),
      PARAPLAN_FIELD(planner, context_parallel_degree),
  };
}

}  // namespace

const std::vector<FieldSpec>& field_table() {
  static const std::vector<FieldSpec> table = [] {
    std::vector<FieldSpec> fields;
    for (std::vector<FieldSpec> (*section)() :
         {model_fields, training_fields, cluster_fields, planner_fields})
      for (FieldSpec& field : section()) fields.push_back(std::move(field));
    return fields;
  }();
  return table;
}

#undef PARAPLAN_FIELD
#undef PARAPLAN_CHOICE

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names = {"job",  "model",   "training",
                                                 "data", "cluster", "planner"};
  return names;
}

}  // namespace job_fields

std::vector<std::pair<std::string, std::string>> job_config_options(const JobConfig& config) {
  std::vector<std::pair<std::string, std::string>> options;
  for (const job_fields::FieldSpec& spec : job_fields::field_table())
    options.emplace_back(spec.dotted(), spec.get(config));
  return options;
}

std::vector<std::pair<std::string, std::string>> recorded_job_options(const JobConfig& config) {
  std::vector<std::pair<std::string, std::string>> options = job_config_options(config);
  for (auto& [key, value] : options) {
    if (value.empty() ||
        (key != "planner.profile_dir" && key != "planner.partition_constraints_path"))
      continue;
    std::string path = value;
    if (path.rfind("~/", 0) == 0)
      if (const char* home = std::getenv("HOME")) path = home + path.substr(1);
    value = std::filesystem::absolute(path).lexically_normal().string();
  }
  return options;
}

}  // namespace paraplan
