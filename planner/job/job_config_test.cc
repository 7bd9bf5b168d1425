// job_config_test.cc: job.toml parsing, defaults, presets and every class of
// error message (overrides and the option dump: job_config_overrides_test.cc).
#include "planner/job/job_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "planner/job/job_config_test_support.h"
#include "schema/zero_stages.h"

namespace paraplan {
namespace {

using job_config_test::kMinimal;
using job_config_test::parse_error;
using job_config_test::with;

TEST(JobConfigTest, MinimalConfigTakesEveryDefault) {
  const JobConfig config = parse_job_config(kMinimal);
  EXPECT_EQ(config.job.name, "default");
  EXPECT_EQ(config.task_name(), "default");
  EXPECT_EQ(config.model.architecture, schema::Architecture::Gpt2);
  EXPECT_EQ(config.model.vocab_size, 256);
  EXPECT_EQ(config.model.ffn_size, 256);  // 4 * d_model
  EXPECT_TRUE(config.model.tied_embeddings);
  EXPECT_EQ(config.model.dtype, schema::DType::Float32);
  EXPECT_DOUBLE_EQ(config.model.layernorm_epsilon, 1e-5);
  EXPECT_DOUBLE_EQ(config.model.init_std, 0.02);

  const TrainingConfig& t = config.training;
  EXPECT_EQ(t.micro_batch_size, 0);
  EXPECT_FALSE(config.was_set("training.micro_batch_size"));
  EXPECT_DOUBLE_EQ(t.learning_rate, 6e-4);
  EXPECT_DOUBLE_EQ(t.min_learning_rate, 6e-5);  // learning_rate / 10
  EXPECT_DOUBLE_EQ(t.beta1, 0.9);
  EXPECT_DOUBLE_EQ(t.beta2, 0.95);
  EXPECT_DOUBLE_EQ(t.epsilon, 1e-8);
  EXPECT_DOUBLE_EQ(t.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(t.grad_clip, 1.0);
  EXPECT_EQ(t.warmup_steps, 0);
  EXPECT_EQ(t.decay_style, schema::LrDecayStyle::Cosine);
  EXPECT_EQ(t.seed, 1337u);
  EXPECT_EQ(t.eval_interval, 0);
  EXPECT_EQ(t.eval_batches, 8);

  const ClusterConfig& c = config.cluster;
  EXPECT_EQ(c.preset, "cpu");
  EXPECT_EQ(c.num_nodes, 1);
  EXPECT_EQ(c.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(c.device_memory_gb, 8);
  EXPECT_DOUBLE_EQ(c.peak_flops(schema::DType::Float32), 0.1e12);
  EXPECT_DOUBLE_EQ(c.intra_node_bandwidth_gbps, 5);
  EXPECT_DOUBLE_EQ(c.intra_node_latency_us, 5);
}

TEST(JobConfigTest, PlannerDefaultsAreAutoDists) {
  const PlannerOptions p = parse_job_config(kMinimal).planner;
  EXPECT_EQ(p.task_name, "default");
  EXPECT_TRUE(p.consider_mem);
  EXPECT_DOUBLE_EQ(p.memory_constraint, 32);
  EXPECT_EQ(p.memory_granularity, 1);
  EXPECT_DOUBLE_EQ(p.transient_mem_coef, 2);
  EXPECT_DOUBLE_EQ(p.opt_resident_coef, 2);
  EXPECT_DOUBLE_EQ(p.opt_transient_coef, 0);
  EXPECT_EQ(p.recompute_modules, "");
  EXPECT_EQ(p.zero_stage, 0);
  EXPECT_EQ(p.zero_ngroups, 1);
  EXPECT_EQ(p.pipeline_pivots, "");
  EXPECT_EQ(p.pipeline_nstages, 0);                // 'auto'
  EXPECT_FALSE(p.pipeline_scheduler.has_value());  // 'auto'
  EXPECT_DOUBLE_EQ(p.max_pipeline_bubble_ratio, 0.2);
  EXPECT_DOUBLE_EQ(p.max_pipeline_unbalance_ratio, 0.5);
  EXPECT_EQ(p.mesh_row, 1);
  EXPECT_EQ(p.mesh_col, 1);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.micro_batch_size, 1);
  EXPECT_EQ(p.update_freq, 1);
  EXPECT_TRUE(p.parallel_profile);
  EXPECT_FALSE(p.re_profile);
  EXPECT_EQ(p.topk, 20);
  EXPECT_EQ(p.solver, PlannerSolver::DynamicProgramming);
  EXPECT_EQ(p.nproc, 1);
  EXPECT_EQ(p.load_plan_path, "");
  EXPECT_EQ(p.save_plan_path, "");
  EXPECT_EQ(p.partition_constraints_path, "");
  EXPECT_TRUE(p.is_train);
  EXPECT_FALSE(p.verbose);
  EXPECT_EQ(p.ignore_small_tensor_threshold, 1);
  EXPECT_EQ(p.tensor_parallel_degree, 0);
  EXPECT_EQ(p.data_parallel_degree, 0);
}

TEST(JobConfigTest, ParsesEverySection) {
  const JobConfig config = parse_job_config(R"(
[job]
name = "gpt2-small"
[model]
architecture = "gpt2"
vocab_size = 50257
seq_len = 1024
num_layers = 12
d_model = 768
num_heads = 12
ffn_size = 2048
tied_embeddings = false
dtype = "bfloat16"
layernorm_epsilon = 1e-6
init_std = 0.01
[training]
global_batch_size = 512
micro_batch_size = 8
learning_rate = 1e-3
min_learning_rate = 0
warmup_steps = 10
total_steps = 1000
decay_style = "linear"
seed = 42
eval_interval = 50
eval_batches = 4
[cluster]
preset = "a100-80g"
num_nodes = 2
[planner]
task_name = "run-1"
memory_constraint = 40
recompute_modules = "transformer.h.0, core_attention"
zero_stage = 1
zero_ngroups = 2
pipeline_nstages = 4
pipeline_scheduler = "gpipe"
solver = "ilp"
verbose = true
ignore_small_tensor_threshold = 4096
tensor_parallel_degree = 2
)");
  EXPECT_EQ(config.task_name(), "run-1");
  EXPECT_EQ(config.model.vocab_size, 50257);
  EXPECT_EQ(config.model.ffn_size, 2048);
  EXPECT_FALSE(config.model.tied_embeddings);
  EXPECT_EQ(config.model.dtype, schema::DType::BFloat16);
  EXPECT_DOUBLE_EQ(config.model.layernorm_epsilon, 1e-6);
  EXPECT_EQ(config.training.micro_batch_size, 8);
  EXPECT_DOUBLE_EQ(config.training.min_learning_rate, 0);  // explicit 0 stays 0
  EXPECT_EQ(config.training.decay_style, schema::LrDecayStyle::Linear);
  EXPECT_EQ(config.training.seed, 42u);
  EXPECT_EQ(config.cluster.num_nodes, 2);
  EXPECT_DOUBLE_EQ(config.cluster.device_memory_gb, 80);
  EXPECT_DOUBLE_EQ(config.cluster.peak_flops(schema::DType::BFloat16), 312e12);
  EXPECT_DOUBLE_EQ(config.planner.memory_constraint, 40);  // an integer is a valid number
  EXPECT_EQ(config.planner.pipeline_nstages, 4);
  EXPECT_EQ(config.planner.pipeline_scheduler, schema::ScheduleKind::GPipe);
  EXPECT_EQ(config.planner.solver, PlannerSolver::IntegerLinearProgramming);
  EXPECT_EQ(config.planner.ignore_small_tensor_threshold, 4096);
  EXPECT_TRUE(config.was_set("planner.zero_stage"));
  EXPECT_FALSE(config.was_set("planner.update_freq"));
}

TEST(JobConfigTest, PresetsAndExplicitOverrides) {
  JobConfig h100 = parse_job_config(with("[cluster]\npreset = \"h100-sxm\"\n"));
  EXPECT_DOUBLE_EQ(h100.cluster.peak_tflops_fp32, 67);
  EXPECT_DOUBLE_EQ(h100.cluster.peak_tflops_bf16, 989);
  // What a process can allocate (an H100 80 GB exposes 81559 MiB), less 2 GB
  // for the CUDA context, NCCL and cuBLAS.
  EXPECT_DOUBLE_EQ(h100.cluster.device_memory_gb, 79.6);
  EXPECT_DOUBLE_EQ(h100.cluster.reserved_memory_gb, 2);
  EXPECT_DOUBLE_EQ(plan_memory_limit_gb(h100), 32);  // memory_constraint binds
  h100.planner.memory_constraint = 80;
  EXPECT_DOUBLE_EQ(plan_memory_limit_gb(h100), 77.6);  // the device binds
  EXPECT_DOUBLE_EQ(h100.cluster.intra_node_bandwidth_gbps, 450);
  const JobConfig h200 = parse_job_config(
      with("[cluster]\npreset = \"h200\"\ndevice_memory_gb = 100\ninter_node_latency_us = 3\n"));
  EXPECT_DOUBLE_EQ(h200.cluster.device_memory_gb, 100);  // explicit beats the preset's 140.4
  EXPECT_DOUBLE_EQ(h200.cluster.inter_node_latency_us, 3);
  EXPECT_DOUBLE_EQ(h200.cluster.peak_tflops_bf16, 989);
  EXPECT_EQ(parse_job_config(with("[cluster]\npreset = \"h200\"\n")).cluster.device_memory_gb,
            140.4);

  // Switching the preset later re-resolves the fields that were not set explicitly.
  JobConfig a100 = parse_job_config(with("[cluster]\nintra_node_latency_us = 2\n"));
  apply_override(a100, "cluster.preset", "a100-80g");
  EXPECT_DOUBLE_EQ(a100.cluster.device_memory_gb, 80);
  EXPECT_DOUBLE_EQ(a100.cluster.peak_tflops_fp32, 19.5);
  EXPECT_DOUBLE_EQ(a100.cluster.inter_node_bandwidth_gbps, 25);
  EXPECT_DOUBLE_EQ(a100.cluster.intra_node_latency_us, 2);
  EXPECT_EQ(cluster_preset_names(),
            (std::vector<std::string>{"cpu", "a100-80g", "h100-sxm", "h200"}));
}

TEST(JobConfigTest, UnknownKeysListTheValidOnes) {
  const std::string message = parse_error(with("[planner]\nmemory_constrant = 40\n"));
  EXPECT_NE(message.find("job.toml:12:1: [planner] unknown key 'memory_constrant'; valid keys: "
                         "task_name, consider_mem, memory_constraint,"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("tensor_parallel_degree, data_parallel_degree"), std::string::npos);

  const std::string model = parse_error(with("[model]\nhidden = 3\n"));
  EXPECT_NE(model.find("[model] unknown key 'hidden'; valid keys: architecture, vocab_size"),
            std::string::npos)
      << model;
  const std::string section = parse_error(with("[trainer]\nsteps = 3\n"));
  EXPECT_NE(section.find("unknown section [trainer]; valid sections: [job], [model], "
                         "[training], [data], [cluster], [planner]"),
            std::string::npos)
      << section;
}

TEST(JobConfigTest, WrongTypesNameFieldAndLocation) {
  EXPECT_NE(parse_error(with("[planner]\nzero_stage = \"1\"\n"))
                .find("job.toml:12:14: [planner] zero_stage must be an integer, got a string"),
            std::string::npos)
      << parse_error(with("[planner]\nzero_stage = \"1\"\n"));
  EXPECT_NE(parse_error(with("[planner]\nverbose = 1\n"))
                .find("[planner] verbose must be a boolean (true or false), got an integer"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\nnproc = 2.5\n"))
                .find("[planner] nproc must be an integer, got a floating-point number"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\npipeline_nstages = \"many\"\n"))
                .find("'many' is not valid; valid values: 'auto' or an integer >= 1"),
            std::string::npos);
  EXPECT_NE(parse_error("model = 3\n").find("'model' must be a table ([model]), got an integer"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[model]\nvocab_size = 3000000000\n")).find("out of range"),
            std::string::npos);
}

// Warmup-stable-decay (Megatron's --lr-decay-style WSD): its decay steps
// default to a tenth of the steps after warm-up; its keys belong to it.
TEST(JobConfigTest, WarmupStableDecayAndItsKeys) {
  const TrainingConfig defaulted =
      parse_job_config(kMinimal, "job.toml",
                       {{"training.decay_style", "wsd"}, {"training.warmup_steps", "10"}})
          .training;
  EXPECT_EQ(defaulted.decay_style, schema::LrDecayStyle::WarmupStableDecay);
  EXPECT_EQ(defaulted.wsd_decay_steps, 9);  // (100 - 10) / 10
  EXPECT_EQ(defaulted.wsd_decay_style, schema::WsdDecayStyle::Linear);
  const TrainingConfig given = parse_job_config(kMinimal, "job.toml",
                                                {{"training.decay_style", "wsd"},
                                                 {"training.wsd_decay_steps", "20"},
                                                 {"training.wsd_decay_style", "minus_sqrt"}})
                                   .training;
  EXPECT_EQ(given.wsd_decay_steps, 20);
  EXPECT_EQ(given.wsd_decay_style, schema::WsdDecayStyle::MinusSqrt);
  EXPECT_NE(parse_error(kMinimal, {{"training.decay_style", "wsd"},
                                   {"training.warmup_steps", "90"},
                                   {"training.wsd_decay_steps", "20"}})
                .find("[training] wsd_decay_steps (20) must not exceed the 10 steps after warm-up "
                      "(total_steps - warmup_steps)"),
            std::string::npos);
  EXPECT_NE(parse_error(kMinimal, {{"training.wsd_decay_steps", "20"}})
                .find("[training] wsd_decay_steps is for decay_style = \"wsd\" "
                      "(warmup-stable-decay); this job's decay_style is \"cosine\""),
            std::string::npos)
      << parse_error(kMinimal, {{"training.wsd_decay_steps", "20"}});
  EXPECT_NE(
      parse_error(kMinimal, {{"training.decay_style", "wsd"}, {"training.warmup_steps", "100"}})
          .find("[training] warmup_steps (100) leaves no steps for decay_style = \"wsd\" "
                "to decay; it must be below total_steps (100)"),
      std::string::npos);
  EXPECT_NE(parse_error(kMinimal, {{"training.decay_style", "wsd"},
                                   {"training.wsd_decay_style", "exponential"}})
                .find("valid values: linear, cosine, minus_sqrt"),
            std::string::npos);
}

TEST(JobConfigTest, PipelineSchedulerKindsAndAuto) {
  const JobConfig automatic = parse_job_config(kMinimal);
  EXPECT_FALSE(automatic.planner.pipeline_scheduler.has_value());
  EXPECT_EQ(automatic.planner.pipeline_virtual_stages, 0);
  for (const auto& [name, kind] : {std::pair{"1f1b", schema::ScheduleKind::OneForwardOneBackward},
                                   {"gpipe", schema::ScheduleKind::GPipe},
                                   {"interleaved", schema::ScheduleKind::Interleaved1F1B},
                                   {"zb-h1", schema::ScheduleKind::ZeroBubbleH1},
                                   {"zb-v", schema::ScheduleKind::ZeroBubbleV},
                                   {"dualpipe-v", schema::ScheduleKind::DualPipeV}}) {
    const JobConfig config =
        parse_job_config(with(std::string("[planner]\npipeline_scheduler = \"") + name + "\"\n"));
    EXPECT_EQ(config.planner.pipeline_scheduler, kind) << name;
    std::map<std::string, std::string> by_key;
    for (const auto& [key, value] : job_config_options(config)) by_key[key] = value;
    EXPECT_EQ(by_key["planner.pipeline_scheduler"], name);
  }
  const JobConfig fixed = parse_job_config(
      with("[planner]\npipeline_scheduler = \"interleaved\"\npipeline_virtual_stages = 3\n"));
  EXPECT_EQ(fixed.planner.pipeline_virtual_stages, 3);
  EXPECT_NE(parse_error(with("[planner]\npipeline_scheduler = \"zb-h1\"\n"
                             "pipeline_virtual_stages = 2\n"))
                .find("[planner] pipeline_virtual_stages = 2 needs pipeline_scheduler = "
                      "'interleaved' or 'auto'"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\npipeline_scheduler = \"zb-v\"\n"
                             "pipeline_virtual_stages = 3\n"))
                .find("[planner] pipeline_virtual_stages = 3 with pipeline_scheduler = 'zb-v', "
                      "which runs two model chunks per rank in a V: leave it 0, or set 2"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\npipeline_scheduler = \"dualpipe-v\"\n"
                             "pipeline_virtual_stages = 4\n"))
                .find("[planner] pipeline_virtual_stages = 4 with pipeline_scheduler = "
                      "'dualpipe-v', which runs two model chunks per rank in a V"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\npipeline_virtual_stages = -1\n"))
                .find("[planner] pipeline_virtual_stages = -1 is invalid; valid values: 0 "
                      "(search) or 1..256"),
            std::string::npos);
}

TEST(JobConfigTest, BadChoicesListTheValidValues) {
  EXPECT_NE(parse_error(with("[model]\ndtype = \"fp16\"\n"))
                .find("[model] dtype = 'fp16' is not valid; valid values: float32, bfloat16"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[cluster]\npreset = \"tpu\"\n"))
                .find("[cluster] preset = 'tpu' is not valid; valid values: cpu, a100-80g, "
                      "h100-sxm, h200"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\npipeline_scheduler = \"zb\"\n"))
                .find("[planner] pipeline_scheduler = 'zb' is not valid; valid values: 1f1b, "
                      "gpipe, interleaved, zb-h1, zb-v, dualpipe-v, auto"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\nsolver = \"greedy\"\n")).find("valid values: dp, ilp"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[training]\ndecay_style = \"step\"\n"))
                .find("valid values: cosine, linear, constant, wsd"),
            std::string::npos);
  // Every stage of the format is planned (schema/zero_stages.h): 3 is
  // accepted, what lies beyond is refused naming the field and the values.
  EXPECT_EQ(parse_job_config(with("[planner]\nzero_stage = 3\n")).planner.zero_stage, 3);
  EXPECT_NE(
      parse_error(with("[planner]\nzero_stage = 4\n"))
          .find("[planner] zero_stage = 4 is not supported; valid values: " + zero_stages_text()),
      std::string::npos)
      << parse_error(with("[planner]\nzero_stage = 4\n"));
  EXPECT_NE(parse_error(with("[planner]\nzero_stage = -1\n"))
                .find("[planner] zero_stage = -1 is not supported; valid values: 0 (off), 1 "
                      "(optimizer state sharded over data parallel), 2 (gradients too), 3 "
                      "(parameters too)"),
            std::string::npos)
      << parse_error(with("[planner]\nzero_stage = -1\n"));
}

// Each count that multiplies a run's work is bounded by name
// (schema/model_limits.h); the issue's values are refused, the bounds pass.
TEST(JobConfigTest, CountsThatMultiplyWorkAreBounded) {
  for (const char* batches : {"65537", "1000000", "16777216", "2147483647"})
    EXPECT_NE(parse_error(kMinimal, {{"training.eval_batches", batches}})
                  .find(std::string("[training] eval_batches = ") + batches +
                        " is invalid; it must be <= 65536 (global batches per evaluation; "
                        "evaluation reads at most one pass of the validation data)"),
              std::string::npos)
        << batches;
  EXPECT_EQ(parse_error(kMinimal, {{"training.eval_batches", "65536"}}), "");
  EXPECT_NE(parse_error(kMinimal, {{"training.eval_interval", "2147483647"}})
                .find("[training] eval_interval = 2147483647 is invalid; it must be <= "
                      "2147483646 (steps are counted in an int"),
            std::string::npos);
  EXPECT_NE(parse_error(kMinimal, {{"training.total_steps", "2147483647"}})
                .find("[training] total_steps = 2147483647 is invalid; it must be <= 2147483646"),
            std::string::npos);
  EXPECT_NE(parse_error(kMinimal, {{"planner.update_freq", "16385"}})
                .find("[planner] update_freq = 16385 is invalid; at most 16384 micro-batches"),
            std::string::npos);
}

TEST(JobConfigTest, ImpossibleSizesAreRejected) {
  const std::string base = R"(
[training]
global_batch_size = 8
total_steps = 100
[model]
seq_len = 64
)";
  auto model = [&](const std::string& fields) { return parse_error(base + fields); };
  EXPECT_NE(model("num_layers = 2\nd_model = 100\nnum_heads = 3\n")
                .find("job.toml: [model] d_model = 100 is not divisible by num_heads 3; d_model "
                      "must be a multiple of num_heads"),
            std::string::npos);
  EXPECT_NE(model("num_layers = 0\nd_model = 64\nnum_heads = 4\n")
                .find("[model] num_layers = 0 is invalid; it must be >= 1"),
            std::string::npos)
      << model("num_layers = 0\nd_model = 64\nnum_heads = 4\n");
  EXPECT_NE(model("num_layers = 2\nd_model = -64\nnum_heads = 4\n")
                .find("[model] d_model = -64 is invalid; it must be >= 1"),
            std::string::npos);
  // Above 65536 the token files hold uint32 ids (llm.c's Llama 3 shards).
  EXPECT_EQ(model("num_layers = 2\nd_model = 64\nnum_heads = 4\nvocab_size = 128256\n"), "");
  EXPECT_NE(model("num_layers = 2\nd_model = 64\nnum_heads = 4\nvocab_size = 16777217\n")
                .find("[model] vocab_size = 16777217; must be at most 16777216 (2^24), the largest "
                      "vocabulary paraplan builds"),
            std::string::npos);
  EXPECT_NE(model("num_layers = 2\nd_model = 64\n")
                .find("[model] num_heads is required (attention heads); give it in the file or "
                      "as --model.num_heads N"),
            std::string::npos);
  EXPECT_NE(parse_error(kMinimal, {{"model.seq_len", "0"}})
                .find("[model] seq_len = 0 is invalid; it must be >= 1"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[training]\nwarmup_steps = 200\n"))
                .find("warmup_steps (200) must not exceed total_steps (100)"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[training]\nbeta2 = 1.0\n"))
                .find("[training] beta2 = 1 is invalid; valid range [0, 1)"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\nmemory_constraint = -1\n"))
                .find("[planner] memory_constraint = -1 is invalid; valid range (0, inf)"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\nworld_size = 6\nmesh_col = 4\n"))
                .find("world_size (6) must be a multiple of mesh_row x mesh_col (1 x 4)"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[training]\nmicro_batch_size = 2\n[planner]\nmicro_batch_size = 4\n"))
                .find("[training] micro_batch_size (2) contradicts [planner] micro_batch_size (4)"),
            std::string::npos);
}

TEST(JobConfigTest, LlamaKeysAndTheirDefaults) {
  const JobConfig config = parse_job_config(
      with("[model]\narchitecture = \"llama\"\nnum_kv_heads = 2\nrope_theta = 500000.0\n"));
  EXPECT_EQ(config.model.architecture, schema::Architecture::Llama);
  EXPECT_EQ(config.model.num_kv_heads, 2);
  EXPECT_EQ(config.model.rope_theta, 500000.0);
  // Untied by default; SwiGLU's ffn_size 8/3 d_model rounded up to 256.
  EXPECT_FALSE(config.model.tied_embeddings);
  EXPECT_EQ(config.model.ffn_size, 256);
  EXPECT_EQ(config.model.norm_epsilon(), config.model.rms_norm_eps);
  // Without num_kv_heads: multi-head attention.
  EXPECT_EQ(parse_job_config(with("[model]\narchitecture = \"llama\"\n")).model.num_kv_heads, 4);
  // q/k/v biases only when asked for (Qwen 2).
  EXPECT_FALSE(config.model.qkv_bias);
  EXPECT_TRUE(parse_job_config(with("[model]\narchitecture = \"llama\"\nqkv_bias = true\n"))
                  .model.qkv_bias);
  // gpt2 keeps its defaults.
  const JobConfig gpt = parse_job_config(kMinimal);
  EXPECT_TRUE(gpt.model.tied_embeddings);
  EXPECT_EQ(gpt.model.ffn_size, 256);
}

TEST(JobConfigTest, InvalidLlamaCombinationsNameTheKey) {
  const auto error = [](const std::string& model_lines) {
    return parse_error(with("[model]\n" + model_lines));
  };
  EXPECT_NE(error("architecture = \"llama\"\nnum_kv_heads = 3\n")
                .find("job.toml: [model] num_kv_heads (3) must divide num_heads (4)"),
            std::string::npos);
  EXPECT_NE(error("architecture = \"llama\"\nnum_kv_heads = 0\n")
                .find("[model] num_kv_heads = 0 is invalid; it must be >= 1"),
            std::string::npos);
  // d_model 64 over 32 heads: head_dim 2 is fine; over 64 heads it is 1, odd.
  EXPECT_NE(
      parse_error(with("[model]\narchitecture = \"llama\"\n"), {{"model.num_heads", "64"}})
          .find("[model] num_heads (64) gives head_dim d_model / num_heads = 1, which is odd"),
      std::string::npos);
  EXPECT_NE(error("architecture = \"llama\"\nrope_theta = 0.0\n")
                .find("[model] rope_theta = 0 is invalid; valid range (0, inf)"),
            std::string::npos);
  EXPECT_NE(error("architecture = \"llama\"\nlayernorm_epsilon = 1e-6\n")
                .find("[model] layernorm_epsilon is a gpt2 key; architecture = \"llama\" uses "
                      "RMSNorm: set rms_norm_eps instead"),
            std::string::npos);
  EXPECT_NE(error("num_kv_heads = 2\n")
                .find("[model] num_kv_heads is a llama key; architecture = \"gpt2\""),
            std::string::npos);
  EXPECT_NE(
      error("qkv_bias = true\n").find("[model] qkv_bias is a llama key; architecture = \"gpt2\""),
      std::string::npos);
  EXPECT_NE(error("architecture = \"llama\"\nrope_scaling_factor = 8.0\nrope_low_freq_factor = "
                  "4.0\n")
                .find("[model] rope_low_freq_factor = 4 is invalid; valid range (0, 4)"),
            std::string::npos);
}

TEST(JobConfigTest, SyntaxErrorsGiveLineAndColumn) {
  const std::string message = parse_error("[model]\nseq_len = 64\nd_model = = 3\n");
  EXPECT_EQ(message.rfind("job.toml:3:", 0), 0u) << message;
  EXPECT_NE(message.find("TOML syntax error"), std::string::npos) << message;
}

// Found by fuzz/job_config_fuzzer: TOML's syntax errors and unknown keys
// quoted the file's bytes as they were, control bytes included.
TEST(JobConfigTest, MessagesShowTheFilesBytesPrintably) {
  const std::pair<const char*, const char*> cases[] = {
      {"[planner]\nverbose = tr\x10\n",
       "TOML syntax error: Error while parsing boolean: expected 'true', saw 'tr\\x10'"},
      {"[planner]\n\"bad\\u0007key\" = 1\n", "[planner] unknown key 'bad\\x07key'"},
      {"[model]\ndtype = \"f\\u001b(31m\"\n", "[model] dtype = 'f\\x1b(31m' is not valid"}};
  for (const auto& [text, message] : cases)
    EXPECT_NE(parse_error(with(text)).find(message), std::string::npos) << parse_error(with(text));
}

TEST(JobConfigTest, SequenceParallelIsTrueFalseOrAuto) {
  EXPECT_EQ(parse_job_config(kMinimal).planner.sequence_parallel, std::nullopt);
  EXPECT_EQ(
      parse_job_config(with("[planner]\nsequence_parallel = true\n")).planner.sequence_parallel,
      true);
  EXPECT_EQ(
      parse_job_config(with("[planner]\nsequence_parallel = false\n")).planner.sequence_parallel,
      false);
  EXPECT_EQ(
      parse_job_config(with("[planner]\nsequence_parallel = \"auto\"\n")).planner.sequence_parallel,
      std::nullopt);
  EXPECT_EQ(parse_job_config(kMinimal, "job.toml", {{"planner.sequence_parallel", "true"}})
                .planner.sequence_parallel,
            true);
  EXPECT_NE(parse_error(with("[planner]\nsequence_parallel = \"yes\"\n"))
                .find("[planner] sequence_parallel = 'yes' is not valid; valid values: true, "
                      "false or 'auto'"),
            std::string::npos);
  EXPECT_NE(parse_error(with("[planner]\nsequence_parallel = 2\n"))
                .find("[planner] sequence_parallel must be true, false or 'auto', got an integer"),
            std::string::npos)
      << parse_error(with("[planner]\nsequence_parallel = 2\n"));
}

TEST(JobConfigTest, ZeroLayersPerUnitIsBoundedAndNeedsZeroTwo) {
  EXPECT_EQ(
      parse_job_config(with("[planner]\nzero_layers_per_unit = 2\n")).planner.zero_layers_per_unit,
      2);
  const std::string too_many = parse_error(with("[planner]\nzero_layers_per_unit = 100\n"));
  EXPECT_NE(too_many.find("[planner] zero_layers_per_unit"), std::string::npos) << too_many;
  const std::string below =
      parse_error(with("[planner]\nzero_stage = 1\nzero_layers_per_unit = 2\n"));
  EXPECT_NE(below.find("[planner] zero_layers_per_unit = 2 needs zero_stage 2 or 3"),
            std::string::npos)
      << below;
}

TEST(JobConfigTest, LoadsFilesAndNamesThem) {
  const std::string path =
      ::testing::TempDir() + "job_config_test_" + std::to_string(::getpid()) + ".toml";
  {
    std::ofstream file(path);
    file << with("[planner]\nzero_ngroups = 0\n");
  }
  try {
    load_job_config(path);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(path + ": [planner] zero_ngroups = 0 is invalid"),
              std::string::npos)
        << error.what();
  }
  const JobConfig config = load_job_config(path, {{"planner.zero_ngroups", "2"}});
  EXPECT_EQ(config.planner.zero_ngroups, 2);
  EXPECT_EQ(config.source, path);
  std::remove(path.c_str());
  EXPECT_THROW(load_job_config(path), std::runtime_error);
}

}  // namespace
}  // namespace paraplan
