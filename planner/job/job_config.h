// job_config.h: job.toml -> JobConfig, the planner's whole input (model, training,
// cluster, planner options), with dotted command-line overrides.
//
// Contract:
// - Every key has a default except the model shape ([model] seq_len, num_layers,
//   d_model, num_heads) and [training] global_batch_size and total_steps, which
//   must be given (in the file or as overrides).
// - Every error is a std::runtime_error naming the file, the field and what is
//   valid: unknown sections and keys (listing the valid ones), wrong types, bad
//   enum strings (listing the values), impossible sizes, TOML syntax errors with
//   line:column.
// - [planner] accepts every AutoDist option under its own name with its own
//   default (see planner/README.md for the mapping), plus the torchtitan-style
//   tensor_parallel_degree, data_parallel_degree and context_parallel_degree
//   (0 = let the planner choose).
// - Derived defaults are resolved from what was set: ffn_size = 4 * d_model,
//   min_learning_rate = learning_rate / 10, cluster fields from the preset. An
//   explicit value always wins; JobConfig::was_set() tells which keys were given.
//
// Micro-batching: [training] global_batch_size is the batch per optimizer step over
// the whole job. [training] micro_batch_size and [planner] micro_batch_size are the
// same quantity under two names; when either is set explicitly it fixes the micro-
// batch size (both set and different is an error). [planner] update_freq (the
// micro-batch count per replica), when set explicitly, fixes the count instead.
// Whatever is left unset the search chooses (see search_space.h).
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plan_generated.h"
#include "planner/job/nccl_settings.h"

namespace paraplan {

struct JobSection {
  std::string name = "default";
};

struct ModelConfig {
  schema::Architecture architecture = schema::Architecture::Gpt2;
  int vocab_size = 256;
  int seq_len = 0;              // required
  int num_layers = 0;           // required
  int d_model = 0;              // required
  int num_heads = 0;            // required
  int ffn_size = 0;             // default gpt2: 4 * d_model; llama: 8/3 * d_model rounded up to 256
  bool tied_embeddings = true;  // default gpt2: true; llama: false
  schema::DType dtype = schema::DType::Float32;
  double layernorm_epsilon = 1e-5;  // gpt2
  double init_std = 0.02;
  // Llama only (an error with gpt2 when set).
  int num_kv_heads = 0;            // grouped-query attention; default num_heads
  double rms_norm_eps = 1e-5;      // RMSNorm's epsilon
  double rope_theta = 10000;       // the rotary base (Llama 3: 500000)
  double rope_scaling_factor = 0;  // Llama 3.1's "llama3" frequency scaling; 0: none
  double rope_low_freq_factor = 1;
  double rope_high_freq_factor = 4;
  int rope_original_max_positions = 8192;
  bool qkv_bias = false;  // biases on q, k and v (Qwen 2; Megatron's --add-qkv-bias)

  // The norm's epsilon the plan carries: layernorm_epsilon or rms_norm_eps.
  double norm_epsilon() const {
    return architecture == schema::Architecture::Llama ? rms_norm_eps : layernorm_epsilon;
  }
};

struct TrainingConfig {
  int global_batch_size = 0;  // required
  int micro_batch_size = 0;   // 0 = not given; the planner chooses
  double learning_rate = 6e-4;
  double min_learning_rate = 0;  // default learning_rate / 10; an explicit 0 decays to 0
  double beta1 = 0.9;
  double beta2 = 0.95;
  double epsilon = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0 disables clipping
  int warmup_steps = 0;
  int total_steps = 0;  // required: the LR horizon and the default step count
  schema::LrDecayStyle decay_style = schema::LrDecayStyle::Cosine;
  // decay_style = "wsd" (warmup-stable-decay): the last wsd_decay_steps steps
  // decay (default: a tenth of the steps after warm-up), in this shape.
  int wsd_decay_steps = 0;
  schema::WsdDecayStyle wsd_decay_style = schema::WsdDecayStyle::Linear;
  uint64_t seed = 1337;
  int eval_interval = 0;  // steps between evaluations; 0 disables evaluation
  int eval_batches = 8;
  // Elements per data-parallel gradient bucket, reduced while backward still
  // runs (Megatron's default 40M); 0 reduces everything after backward.
  int64_t gradient_bucket_size = 40000000;
};

// [data]: where `paraplan train` reads samples and in what order. Paths are a
// file, a glob or a comma-separated list (as --data takes), relative to the
// directory `paraplan plan` runs in; the plan records them absolute.
struct DataSourceConfig {
  std::string path;
  double weight = 1.0;
  bool operator==(const DataSourceConfig&) const = default;
};

struct DataConfig {
  // train = "shards/train_*.bin" (one dataset), or a blend:
  // train = [{path = "a_*.bin", weight = 0.7}, {path = "b_*.bin", weight = 0.3}].
  // Empty: `paraplan train --data` names it.
  std::vector<DataSourceConfig> train;
  std::string validation;  // empty: --val-data names it, or none
  bool shuffle = true;     // a seeded permutation of each dataset per epoch
  uint64_t seed = 0;       // default: [training] seed
  // Document masking (Data.document_separator): attention stays within the
  // documents of a sequence, each ended by document_separator. Its default
  // with document_mask: the end-of-text token of the vocabulary's tokenizer
  // (default_document_separator); -1 without masking.
  bool document_mask = false;
  int document_separator = -1;
};

// The token between documents in llm.c's shards (and `paraplan tokenize`'s)
// for the vocabularies paraplan knows: 50256 (GPT-2's <|endoftext|>) for
// vocab_size 50257..50304 (GPT-2's, padded), 128000 (Llama 3's
// <|begin_of_text|>) for 128256; -1 for any other.
int default_document_separator(int vocab_size);

// Sizes are in the units users read on spec sheets: GB (2^30 bytes, as AutoDist's
// memory_constraint), TFLOP/s (10^12), GB/s (10^9 bytes/s, per direction),
// microseconds.
struct ClusterConfig {
  std::string preset = "cpu";
  // NCCL_* variables that size NCCL's buffers (nccl_settings.h), read from
  // the environment when the job is parsed; NCCL's defaults otherwise.
  NcclSettings nccl;
  int num_nodes = 1;
  int devices_per_node = 8;
  double device_memory_gb = 8;  // what a process can allocate on the device
  // Device memory the plan leaves alone: what a process holds outside the
  // runtime's own allocations (the CUDA context, the cuBLAS workspace,
  // allocator slack; NCCL's communicator buffers are a category of their own,
  // planner/cost/communicator_memory.h). The GPU presets reserve 2 GB; the cpu preset
  // none. The planner's limit is min(memory_constraint, device_memory_gb -
  // reserved_memory_gb), and the runtime refuses a stage beyond that too.
  double reserved_memory_gb = 0;
  double peak_tflops_fp32 = 0.1;
  double peak_tflops_bf16 = 0.1;
  double intra_node_bandwidth_gbps = 5;
  double intra_node_latency_us = 5;
  double inter_node_bandwidth_gbps = 1.25;
  double inter_node_latency_us = 50;
  // Device memory bandwidth (GB/s) and compute units (GPU SMs; CPU cores per
  // device): the analytic time model's memory-bound operations and GEMM
  // wave quantization (planner/cost/compute_model.h).
  double memory_bandwidth_gbps = 10;
  int compute_units = 1;
  // CPU cores a node's devices share (the cpu preset's ranks are processes on
  // one machine): the machine's cores, or what its processes got of them
  // while others ran (the profile measures that); 0: every device computes on
  // its own. With more ranks than cores, the plan's step comes from playing
  // its schedule out with the cores shared (planner/schedule/pipeline_simulation.h).
  double cores_per_node = 0;
  // Whether collectives run beside compute (NCCL on its own stream, the GPU
  // presets), so gradient buckets reduced during backward hide behind it; the
  // cpu preset's MPI calls block the rank, and nothing overlaps.
  bool overlap_communication = false;

  // Peak FLOP/s of one device for the model's dtype.
  double peak_flops(schema::DType dtype) const;
};

enum class PlannerSolver { DynamicProgramming, IntegerLinearProgramming };

// AutoDist options (same names, same defaults) plus torchtitan-style fixed degrees.
struct PlannerOptions {
  std::string task_name = "default";
  bool consider_mem = true;
  double memory_constraint = 32;  // GB per device
  int memory_granularity = 1;     // bytes
  double transient_mem_coef = 2;
  double opt_resident_coef = 2;
  double opt_transient_coef = 0;
  std::string recompute_modules;
  int zero_stage = 0;
  int zero_ngroups = 1;
  // ZeRO-2 and 3's units: layers gathered and reduce-scattered as one
  // (plan.fbs, Zero.layers_per_unit); 0 = the search tries one layer and the
  // larger unit its cost model prefers (StageCostModel::larger_zero_unit).
  int zero_layers_per_unit = 0;
  std::string pipeline_pivots;
  int pipeline_nstages = 0;  // 0 = 'auto'
  // The fixed kind; unset = 'auto': the search picks the kind, and the
  // virtual stages, per setting (schema/schedule_kinds.h names them).
  std::optional<schema::ScheduleKind> pipeline_scheduler;
  int pipeline_virtual_stages = 0;  // interleaved's model chunks per rank; 0 = search
  // Megatron's sequence parallelism with tensor_parallel > 1: true, false,
  // or unset = 'auto' (the search tries both).
  std::optional<bool> sequence_parallel;
  double max_pipeline_bubble_ratio = 0.2;
  double max_pipeline_unbalance_ratio = 0.5;
  int mesh_row = 1;
  int mesh_col = 1;
  int world_size = 1;
  int micro_batch_size = 1;
  int update_freq = 1;
  std::string profile_dir = "~/.cache/paraplan/profile";
  bool parallel_profile = true;
  bool re_profile = false;
  int topk = 20;
  PlannerSolver solver = PlannerSolver::DynamicProgramming;
  int nproc = 1;
  std::string load_plan_path;
  std::string save_plan_path;
  std::string partition_constraints_path;
  bool is_train = true;
  bool verbose = false;
  int64_t ignore_small_tensor_threshold = 1;
  int tensor_parallel_degree = 0;   // 0 = auto
  int data_parallel_degree = 0;     // 0 = auto
  int context_parallel_degree = 0;  // 0 = auto (plan.fbs Mesh.context_parallel)
};

struct JobConfig {
  std::string source = "job.toml";  // the file (or name) used in every message
  JobSection job;
  ModelConfig model;
  TrainingConfig training;
  DataConfig data;
  ClusterConfig cluster;
  PlannerOptions planner;
  // Dotted keys given explicitly, in the file or as overrides ("planner.update_freq").
  std::set<std::string> set_keys;

  bool was_set(const std::string& dotted_key) const { return set_keys.count(dotted_key) > 0; }
  // The task name written into the plan: [planner] task_name if set, else [job] name.
  std::string task_name() const;
};

// The memory a plan may use on each device, in GB: [planner] memory_constraint
// (AutoDist's), capped by what the device offers beyond its reserve
// (device_memory_gb - reserved_memory_gb).
double plan_memory_limit_gb(const JobConfig& config);
// True when memory_constraint, not the device, sets that limit.
bool memory_constraint_binds(const JobConfig& config);
// The limit and what sets it: "32 GB (memory_constraint)" or "77.6 GB
// (device_memory_gb 79.6 less reserved_memory_gb 2)".
std::string memory_limit_text(const JobConfig& config);

// One command-line override: key "planner.memory_constraint", value "40".
struct ConfigOverride {
  std::string key;
  std::string value;
};

// Parses job.toml text; source names it in messages. Overrides are applied to the
// TOML document before conversion, so they may supply required keys.
JobConfig parse_job_config(std::string_view toml_text, const std::string& source = "job.toml",
                           const std::vector<ConfigOverride>& overrides = {});

// Reads and parses a job.toml file.
JobConfig load_job_config(const std::string& path,
                          const std::vector<ConfigOverride>& overrides = {});

// Sets one field of an existing config, parsing value by the field's type, then
// re-resolves derived defaults and validates the whole config. On error config
// is left unchanged.
void apply_override(JobConfig& config, const std::string& dotted_key, const std::string& value);

// The TOML-level equivalent: stores the typed value at [section] key of table.
// source names the file in messages.
void apply_override(toml::table& table, const std::string& dotted_key, const std::string& value,
                    const std::string& source = "job.toml");

// Splits "--section.key value" and "--section.key=value" arguments out of args;
// everything else is returned in remaining (in order).
std::vector<ConfigOverride> parse_override_arguments(const std::vector<std::string>& args,
                                                     std::vector<std::string>* remaining = nullptr);

// Range and cross-field checks; throws on the first problem.
void validate_job_config(const JobConfig& config);

// False for a [model] key of the other architecture (num_kv_heads or rope_* for
// gpt2, layernorm_epsilon for llama): job_config_options records its resolved
// default, but a job may not set it.
bool option_applies_to(schema::Architecture architecture, const std::string& dotted_key);

// True for an option whose default comes from others (the cluster preset's
// figures, ffn_size from d_model, tied_embeddings from the architecture,
// num_kv_heads from num_heads, min_learning_rate from learning_rate, data.seed
// from training.seed, data.document_separator from document_mask and
// vocab_size): its resolved value says what the job ran with even
// when it equals JobConfig{}'s.
bool option_default_is_derived(const std::string& dotted_key);

// Every option as dotted key = value, resolved values, in schema order
// ("planner.pipeline_nstages" = "auto").
std::vector<std::pair<std::string, std::string>> job_config_options(const JobConfig& config);

// What the plan header records: job_config_options with the files the
// planner reads (planner.profile_dir, ~ expanded, and
// planner.partition_constraints_path) made absolute, as `paraplan plan`
// resolved them in its working directory, so that planning the job again
// from another directory (a restart on fewer nodes) reads the same files.
std::vector<std::pair<std::string, std::string>> recorded_job_options(const JobConfig& config);

// Names of the cluster presets ("cpu", "a100-80g", "h100-sxm", "h200").
std::vector<std::string> cluster_preset_names();

}  // namespace paraplan
