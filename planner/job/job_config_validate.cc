// job_config_validate.cc: validate_job_config, the range and cross-field checks
// of a JobConfig. Each failure names the file, the field and the valid range.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/job/job_config.h"
#include "planner/job/job_config_internal.h"
#include "schema/model_limits.h"
#include "schema/pipeline_layout.h"
#include "schema/plan_io.h"
#include "schema/schedule_kinds.h"
#include "schema/zero_stages.h"

namespace paraplan {
namespace {

void fail(const JobConfig& config, const std::string& field, const std::string& problem) {
  throw std::runtime_error(config.source + ": " + field + " " + problem);
}

void require_at_least(const JobConfig& config, const char* section, const char* key, int64_t value,
                      int64_t minimum, const char* meaning = nullptr) {
  if (value >= minimum) return;
  const std::string field = std::string("[") + section + "] " + key;
  const std::string dotted = std::string(section) + "." + key;
  if (value == 0 && minimum == 1 && !config.was_set(dotted) &&
      (dotted == "model.seq_len" || dotted == "model.num_layers" || dotted == "model.d_model" ||
       dotted == "model.num_heads" || dotted == "training.global_batch_size" ||
       dotted == "training.total_steps"))
    fail(config, field,
         "is required" + (meaning ? std::string(" (") + meaning + ")" : std::string()) +
             "; give it in the file or as --" + dotted + " N");
  fail(config, field,
       "= " + std::to_string(value) + " is invalid; it must be >= " + std::to_string(minimum) +
           (meaning ? std::string(" (") + meaning + ")" : std::string()));
}

// A count that multiplies the run's work (model_limits.h), bounded by name.
void require_at_most(const JobConfig& config, const char* section, const char* key, int64_t value,
                     int64_t maximum, const char* why) {
  if (value <= maximum) return;
  fail(config, std::string("[") + section + "] " + key,
       "= " + std::to_string(value) + " is invalid; it must be <= " + std::to_string(maximum) +
           " (" + why + ")");
}

constexpr double kInfinity = std::numeric_limits<double>::infinity();

void require_range(const JobConfig& config, const char* section, const char* key, double value,
                   double low, bool low_inclusive, double high, bool high_inclusive) {
  const bool ok = (low_inclusive ? value >= low : value > low) &&
                  (high_inclusive ? value <= high : value < high);
  if (ok) return;
  std::string valid = std::string(low_inclusive ? "[" : "(") + format_double(low) + ", " +
                      (std::isinf(high) ? "inf" : format_double(high)) +
                      (high_inclusive ? "]" : ")");
  fail(config, std::string("[") + section + "] " + key,
       "= " + format_double(value) + " is invalid; valid range " + valid);
}

constexpr const char* kLlamaKeys[] = {"num_kv_heads",
                                      "rms_norm_eps",
                                      "rope_theta",
                                      "rope_scaling_factor",
                                      "rope_low_freq_factor",
                                      "rope_high_freq_factor",
                                      "rope_original_max_positions",
                                      "qkv_bias"};
constexpr const char* kGpt2Keys[] = {"layernorm_epsilon"};

// The keys that belong to one architecture, and Llama's shape rules.
// "'zb-v' and 'dualpipe-v'": the kinds of one chunk rule, from the catalogue.
std::string kinds_with(ChunkRule rule) {
  std::vector<std::string> names;
  for (const ScheduleKindTraits& kind : every_schedule_kind())
    if (kind.chunks == rule) names.push_back(std::string("'").append(kind.name).append("'"));
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return text;
}

void validate_architecture_keys(const JobConfig& c) {
  const ModelConfig& m = c.model;
  if (m.architecture != schema::Architecture::Llama) {
    for (const char* key : kLlamaKeys)
      if (c.was_set(std::string("model.") + key))
        fail(c, std::string("[model] ") + key,
             "is a llama key; architecture = \"gpt2\" has multi-head attention, learned "
             "positions and LayerNorm (layernorm_epsilon); set architecture = \"llama\" or "
             "remove it");
    return;
  }
  if (c.was_set("model.layernorm_epsilon"))
    fail(c, "[model] layernorm_epsilon",
         "is a gpt2 key; architecture = \"llama\" uses RMSNorm: set rms_norm_eps instead");
  require_at_least(c, "model", "num_kv_heads", m.num_kv_heads, 1,
                   "KV heads of grouped-query attention; num_heads for multi-head");
  if (m.num_heads % m.num_kv_heads != 0)
    fail(c, "[model] num_kv_heads",
         std::string("(") + std::to_string(m.num_kv_heads) + ") must divide num_heads (" +
             std::to_string(m.num_heads) + "): each KV head serves an equal group of query heads");
  if ((m.d_model / m.num_heads) % 2 != 0)
    fail(c, "[model] num_heads",
         std::string("(") + std::to_string(m.num_heads) +
             ") gives head_dim d_model / num_heads = " + std::to_string(m.d_model / m.num_heads) +
             ", which is odd; the rotary embedding rotates pairs of dimensions, so choose "
             "num_heads with an even head_dim");
  require_range(c, "model", "rms_norm_eps", m.rms_norm_eps, 0, false, kInfinity, false);
  require_range(c, "model", "rope_theta", m.rope_theta, 0, false, kInfinity, false);
  require_range(c, "model", "rope_scaling_factor", m.rope_scaling_factor, 0, true, kInfinity,
                false);
  if (m.rope_scaling_factor > 0) {
    require_range(c, "model", "rope_low_freq_factor", m.rope_low_freq_factor, 0, false,
                  m.rope_high_freq_factor, false);
    require_at_least(c, "model", "rope_original_max_positions", m.rope_original_max_positions, 1);
  }
}

// [model]: sizes within their limits, the architecture's own keys.
void validate_model(const JobConfig& c) {
  const ModelConfig& m = c.model;
  // Token files hold uint16 ids up to 65536 and uint32 ids above (llm.c's
  // Llama 3 shards); the runtime's ids are int32, the field's own range.
  require_at_least(c, "model", "vocab_size", m.vocab_size, 1);
  require_at_least(c, "model", "seq_len", m.seq_len, 1, "tokens per sequence");
  require_at_least(c, "model", "num_layers", m.num_layers, 1, "transformer blocks");
  require_at_least(c, "model", "d_model", m.d_model, 1, "hidden size");
  require_at_least(c, "model", "num_heads", m.num_heads, 1, "attention heads");
  // The limits every reader of a model applies (schema/model_limits.h).
  static constexpr ModelFieldNames kJobModelFields{"[model] vocab_size", "[model] seq_len",
                                                   "[model] num_layers", "[model] d_model",
                                                   "[model] num_heads",  "[model] ffn_size"};
  const std::vector<FieldProblem> shape_problems = model_shape_problems(
      {m.vocab_size, m.seq_len, m.num_layers, m.d_model, m.num_heads, m.ffn_size}, kJobModelFields);
  if (!shape_problems.empty())
    fail(c, shape_problems.front().field, "= " + shape_problems.front().problem);
  require_range(c, "model", "layernorm_epsilon", m.layernorm_epsilon, 0, false, kInfinity, false);
  require_range(c, "model", "init_std", m.init_std, 0, false, kInfinity, false);
  validate_architecture_keys(c);
}

// [training]: the batch, the optimizer, and the counts that multiply work.
void validate_training(const JobConfig& c) {
  const ModelConfig& m = c.model;
  const TrainingConfig& t = c.training;
  require_at_least(c, "training", "global_batch_size", t.global_batch_size, 1,
                   "sequences per optimizer step over the whole job");
  if (c.was_set("training.micro_batch_size"))
    require_at_least(c, "training", "micro_batch_size", t.micro_batch_size, 1);
  for (const auto& [field, size] : {std::pair{"[training] micro_batch_size", t.micro_batch_size},
                                    {"[planner] micro_batch_size", c.planner.micro_batch_size}})
    for (const FieldProblem& problem :
         micro_batch_rows_problems(size, m.seq_len, field, "[model] seq_len"))
      fail(c, problem.field, "= " + problem.problem);
  require_range(c, "training", "learning_rate", t.learning_rate, 0, false, kInfinity, false);
  require_range(c, "training", "min_learning_rate", t.min_learning_rate, 0, true, t.learning_rate,
                true);
  require_range(c, "training", "beta1", t.beta1, 0, true, 1, false);
  require_range(c, "training", "beta2", t.beta2, 0, true, 1, false);
  require_range(c, "training", "epsilon", t.epsilon, 0, false, kInfinity, false);
  require_range(c, "training", "weight_decay", t.weight_decay, 0, true, kInfinity, false);
  require_range(c, "training", "grad_clip", t.grad_clip, 0, true, kInfinity, false);
  require_at_least(c, "training", "warmup_steps", t.warmup_steps, 0);
  require_at_least(c, "training", "total_steps", t.total_steps, 1,
                   "the LR schedule horizon and default step count");
  if (t.warmup_steps > t.total_steps)
    fail(c, "[training] warmup_steps",
         std::string("(") + std::to_string(t.warmup_steps) + ") must not exceed total_steps (" +
             std::to_string(t.total_steps) + ")");
  require_at_most(c, "training", "total_steps", t.total_steps, kMaxSteps,
                  "steps are counted in an int");
  if (t.decay_style == schema::LrDecayStyle::WarmupStableDecay) {
    if (t.warmup_steps >= t.total_steps)
      fail(c, "[training] warmup_steps",
           std::string("(") + std::to_string(t.warmup_steps) +
               ") leaves no steps for decay_style = \"wsd\" to decay; it must be below "
               "total_steps (" +
               std::to_string(t.total_steps) + ")");
    require_at_least(c, "training", "wsd_decay_steps", t.wsd_decay_steps, 1,
                     "the steps that decay at the end");
    if (t.wsd_decay_steps > t.total_steps - t.warmup_steps)
      fail(c, "[training] wsd_decay_steps",
           std::string("(") + std::to_string(t.wsd_decay_steps) + ") must not exceed the " +
               std::to_string(t.total_steps - t.warmup_steps) +
               " steps after warm-up (total_steps - warmup_steps)");
  } else {
    // A plan's recorded options hold every key, these at their defaults.
    const std::pair<const char*, bool> keys[] = {
        {"wsd_decay_steps", t.wsd_decay_steps != 0},
        {"wsd_decay_style", t.wsd_decay_style != schema::WsdDecayStyle::Linear}};
    for (const auto& [key, given] : keys)
      if (given)
        fail(c, std::string("[training] ") + key,
             "is for decay_style = \"wsd\" (warmup-stable-decay); this job's decay_style is \"" +
                 std::string(lr_decay_style_name(t.decay_style)) + "\"");
  }
  require_at_least(c, "training", "eval_interval", t.eval_interval, 0, "0 disables evaluation");
  require_at_most(c, "training", "eval_interval", t.eval_interval, kMaxSteps,
                  "steps are counted in an int; 0 disables evaluation");
  require_at_least(c, "training", "eval_batches", t.eval_batches, 1);
  require_at_most(c, "training", "eval_batches", t.eval_batches, kMaxEvalBatches,
                  "global batches per evaluation; evaluation reads at most one pass of the "
                  "validation data");
  require_at_least(c, "training", "gradient_bucket_size", t.gradient_bucket_size, int64_t{0},
                   "elements per gradient bucket; 0 reduces all gradients after backward");
}

// [cluster]: the devices and their figures.
void validate_cluster(const JobConfig& c) {
  const ClusterConfig& k = c.cluster;
  require_at_least(c, "cluster", "num_nodes", k.num_nodes, 1);
  require_at_least(c, "cluster", "devices_per_node", k.devices_per_node, 1);
  require_range(c, "cluster", "device_memory_gb", k.device_memory_gb, 0, false, kInfinity, false);
  require_range(c, "cluster", "reserved_memory_gb", k.reserved_memory_gb, 0, true,
                k.device_memory_gb, false);
  require_range(c, "cluster", "peak_tflops_fp32", k.peak_tflops_fp32, 0, false, kInfinity, false);
  require_range(c, "cluster", "peak_tflops_bf16", k.peak_tflops_bf16, 0, false, kInfinity, false);
  require_range(c, "cluster", "intra_node_bandwidth_gbps", k.intra_node_bandwidth_gbps, 0, false,
                kInfinity, false);
  require_range(c, "cluster", "intra_node_latency_us", k.intra_node_latency_us, 0, true, kInfinity,
                false);
  require_range(c, "cluster", "inter_node_bandwidth_gbps", k.inter_node_bandwidth_gbps, 0, false,
                kInfinity, false);
  require_range(c, "cluster", "inter_node_latency_us", k.inter_node_latency_us, 0, true, kInfinity,
                false);
  require_range(c, "cluster", "memory_bandwidth_gbps", k.memory_bandwidth_gbps, 0, false, kInfinity,
                false);
  require_at_least(c, "cluster", "compute_units", k.compute_units, 1);
  require_range(c, "cluster", "cores_per_node", k.cores_per_node, 0, true, kInfinity, false);
}

// [data]: document masking's separator, a token of the vocabulary.
void validate_data(const JobConfig& c) {
  const DataConfig& d = c.data;
  const int vocab = c.model.vocab_size;
  const std::string vocabulary = "[0, " + std::to_string(vocab) + "), the vocabulary";
  if (!d.document_mask) {
    if (d.document_separator >= 0)
      fail(c, "[data] document_separator",
           "= " + std::to_string(d.document_separator) +
               " is set, but document_mask = false; set document_mask = true to keep attention "
               "within the documents it ends, or remove document_separator");
    return;
  }
  if (!c.was_set("data.document_separator") && d.document_separator < 0)
    fail(c, "[data] document_separator",
         "is required with document_mask = true for vocab_size " + std::to_string(vocab) +
             " (the default is known only for GPT-2's 50257..50304, 50256, and Llama 3's "
             "128256, 128000): set it to the token between documents (`paraplan tokenize` prints "
             "it)");
  if (d.document_separator < 0 || d.document_separator >= vocab)
    fail(c, "[data] document_separator",
         "= " + std::to_string(d.document_separator) + " is not a token id; valid: " + vocabulary);
}

// "1, 2, 4, 8, ..., 4096": the context-parallel degrees seq_len allows (2 cp
// dividing it), at most 12 named.
std::string context_parallel_degrees(int seq_len) {
  std::string text;
  int named = 0;
  for (int cp = 1; 2 * int64_t{cp} <= seq_len; ++cp) {
    if (seq_len % (2 * cp) != 0) continue;
    if (++named > 12) return text + ", ...";
    text += (text.empty() ? "" : ", ") + std::to_string(cp);
  }
  return text.empty() ? "none (seq_len is odd: only 1)" : text;
}

// [planner] context_parallel_degree: each rank of a group holds 2 of the
// 2 cp equal chunks of every sequence (plan.fbs Mesh.context_parallel).
void validate_context_parallel(const JobConfig& c) {
  const int cp = c.planner.context_parallel_degree, seq_len = c.model.seq_len;
  require_at_least(c, "planner", "context_parallel_degree", cp, 0, "0 lets the planner choose");
  if (cp <= 1 || seq_len % (2 * int64_t{cp}) == 0) return;
  fail(c, "[planner] context_parallel_degree",
       "= " + std::to_string(cp) + " is invalid: 2 x " + std::to_string(cp) + " = " +
           std::to_string(2 * int64_t{cp}) +
           " does not divide [model] seq_len = " + std::to_string(seq_len) +
           " (each context-parallel rank holds 2 of the 2 x context_parallel_degree equal "
           "chunks of every sequence); valid: 0 (the planner chooses) or " +
           context_parallel_degrees(seq_len));
}

// [planner] pipeline_virtual_stages against the schedule kind's chunk rule.
void validate_pipeline_options(const JobConfig& c) {
  const PlannerOptions& p = c.planner;
  if (p.pipeline_virtual_stages < 0 || p.pipeline_virtual_stages > kMaxVirtualStages)
    fail(c, "[planner] pipeline_virtual_stages",
         "= " + std::to_string(p.pipeline_virtual_stages) +
             " is invalid; valid values: 0 (search) "
             "or 1.." +
             std::to_string(kMaxVirtualStages) + " model chunks per pipeline rank");
  const bool v_shape = p.pipeline_scheduler && v_shaped(*p.pipeline_scheduler);
  if (v_shape && p.pipeline_virtual_stages != 0 && p.pipeline_virtual_stages != 2)
    fail(c, "[planner] pipeline_virtual_stages",
         "= " + std::to_string(p.pipeline_virtual_stages) + " with pipeline_scheduler = '" +
             schedule_kind_name(*p.pipeline_scheduler) +
             "', which runs two model chunks per rank in a V: leave it 0, or set 2");
  else if (p.pipeline_virtual_stages > 1 && p.pipeline_scheduler &&
           schedule_kind_traits(*p.pipeline_scheduler).chunks == ChunkRule::kOne)
    fail(c, "[planner] pipeline_virtual_stages",
         "= " + std::to_string(p.pipeline_virtual_stages) +
             " needs pipeline_scheduler = " + kinds_with(ChunkRule::kChosen) +
             " or 'auto' (the other schedules run one model chunk per rank; " +
             kinds_with(ChunkRule::kTwoInAV) + " two)");
}

// [planner]: the search's options, the mesh, and what contradicts [training].
void validate_planner(const JobConfig& c) {
  const PlannerOptions& p = c.planner;
  const TrainingConfig& t = c.training;
  require_range(c, "planner", "memory_constraint", p.memory_constraint, 0, false, kInfinity, false);
  require_at_least(c, "planner", "memory_granularity", p.memory_granularity, 1);
  require_range(c, "planner", "transient_mem_coef", p.transient_mem_coef, 0, true, kInfinity,
                false);
  require_range(c, "planner", "opt_resident_coef", p.opt_resident_coef, 0, true, kInfinity, false);
  require_range(c, "planner", "opt_transient_coef", p.opt_transient_coef, 0, true, kInfinity,
                false);
  if (p.zero_stage < 0 || p.zero_stage > kHighestZeroStage)
    fail(c, "[planner] zero_stage",
         "= " + std::to_string(p.zero_stage) +
             " is not supported; valid values: " + zero_stages_text());
  require_at_least(c, "planner", "zero_ngroups", p.zero_ngroups, 1);
  require_range(c, "planner", "zero_layers_per_unit", p.zero_layers_per_unit, 0, true,
                std::max(c.model.num_layers, 1), true);
  if (p.zero_layers_per_unit > 1 && c.was_set("planner.zero_stage") && p.zero_stage < 2)
    fail(c, "[planner] zero_layers_per_unit",
         "= " + std::to_string(p.zero_layers_per_unit) + " needs zero_stage 2 or 3 (units of " +
             "several layers are ZeRO-2 and 3's); zero_stage is " + std::to_string(p.zero_stage));
  require_range(c, "planner", "max_pipeline_bubble_ratio", p.max_pipeline_bubble_ratio, 0, true, 1,
                true);
  require_range(c, "planner", "max_pipeline_unbalance_ratio", p.max_pipeline_unbalance_ratio, 0,
                true, 1, true);
  validate_pipeline_options(c);
  require_at_least(c, "planner", "mesh_row", p.mesh_row, 1, "nodes");
  require_at_least(c, "planner", "mesh_col", p.mesh_col, 1, "devices per node");
  require_at_least(c, "planner", "world_size", p.world_size, 1);
  // An unset world_size takes mesh_row x mesh_col (planner/search/search_space.h).
  if (c.was_set("planner.world_size") &&
      p.world_size % (static_cast<int64_t>(p.mesh_row) * p.mesh_col) != 0)
    fail(c, "[planner] world_size",
         std::string("(") + std::to_string(p.world_size) +
             ") must be a multiple of mesh_row x mesh_col (" + std::to_string(p.mesh_row) + " x " +
             std::to_string(p.mesh_col) + ")");
  require_at_least(c, "planner", "micro_batch_size", p.micro_batch_size, 1);
  require_at_least(c, "planner", "update_freq", p.update_freq, 1);
  if (p.update_freq > kMaxMicroBatches)
    fail(c, "[planner] update_freq",
         "= " + std::to_string(p.update_freq) + " is invalid; at most " +
             std::to_string(kMaxMicroBatches) +
             " micro-batches per step (the largest plan paraplan writes)");
  require_at_least(c, "planner", "topk", p.topk, 1);
  require_at_least(c, "planner", "nproc", p.nproc, 1, "search threads");
  require_at_least(c, "planner", "ignore_small_tensor_threshold", p.ignore_small_tensor_threshold,
                   0);
  require_at_least(c, "planner", "tensor_parallel_degree", p.tensor_parallel_degree, 0,
                   "0 lets the planner choose");
  require_at_least(c, "planner", "data_parallel_degree", p.data_parallel_degree, 0,
                   "0 lets the planner choose");
  validate_context_parallel(c);
  if (p.sequence_parallel == true && p.tensor_parallel_degree == 1)
    fail(c, "[planner] sequence_parallel",
         "= true contradicts [planner] tensor_parallel_degree = 1; sequence parallelism shards "
         "over the tensor-parallel group: set tensor_parallel_degree > 1 (or 0, the planner's "
         "choice), or sequence_parallel = false or 'auto'");
  if (c.was_set("training.micro_batch_size") && c.was_set("planner.micro_batch_size") &&
      t.micro_batch_size != p.micro_batch_size)
    fail(c, "[training] micro_batch_size",
         std::string("(") + std::to_string(t.micro_batch_size) +
             ") contradicts [planner] micro_batch_size (" + std::to_string(p.micro_batch_size) +
             "); they name the same quantity, set one");
}

}  // namespace

void validate_job_config(const JobConfig& c) {
  validate_model(c);
  validate_training(c);
  validate_data(c);
  validate_cluster(c);
  validate_planner(c);
}

bool option_applies_to(schema::Architecture architecture, const std::string& dotted_key) {
  const auto is = [&](const char* key) { return dotted_key == std::string("model.") + key; };
  if (architecture == schema::Architecture::Llama)
    return std::none_of(std::begin(kGpt2Keys), std::end(kGpt2Keys), is);
  return std::none_of(std::begin(kLlamaKeys), std::end(kLlamaKeys), is);
}

}  // namespace paraplan
