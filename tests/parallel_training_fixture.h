// parallel_training_fixture.h: the fixture of the multi-rank training tests
// (parallel_training_test.cc, mixed_precision_test.cc, llama_training_test.cc):
// a tiny GPT-2 or Llama job file per plan case, planned and trained with
// `paraplan launch` under mpirun, returning per-step losses, and
// checkpoint-byte comparisons between runs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <compare>
#include <map>
#include <string>
#include <vector>

#include "command_runner.h"
#include "runtime/checkpoint/tensor_file_set.h"

namespace paraplan::testing {

constexpr double kLossTolerance = 1e-6;
constexpr int kSteps = 5;

struct PlanCase {
  std::string name;
  int pipeline = 1, data = 1, tensor = 1;
  int micro_batch_size = 12;  // global batch is 12 sequences
  int zero_stage = 0, zero_groups = 1;
  std::string recompute_modules;
  std::string scheduler = "1f1b";
  int64_t gradient_bucket_size = -1;  // -1: the default (one bucket for this model)
  std::string dtype = "float32";      // model.dtype: float32, or bfloat16 (mixed precision)
  bool tied_embeddings = true;        // model.tied_embeddings: the head is the embedding
  // "gpt2", or "llama": the same sizes with 2 KV heads (grouped-query
  // attention), SwiGLU ffn_size 64, RMSNorm and rotary positions.
  std::string architecture = "gpt2";
  bool qkv_bias = false;  // llama: [model] qkv_bias (Qwen 2's q, k and v biases)
  // [planner] sequence_parallel (Megatron's, with tensor > 1).
  bool sequence_parallel = false;
  int world() const { return pipeline * data * tensor; }
};

// The model every case of one architecture, dtype and tying trains.
struct ModelKey {
  std::string architecture, dtype;
  bool tied_embeddings;
  bool qkv_bias = false;
  auto operator<=>(const ModelKey&) const = default;
};

inline std::string job_toml(const PlanCase& plan) {
  std::string toml = R"([job]
name = ")" + plan.name +
                     R"("

[model]
architecture = ")" + plan.architecture +
                     R"("
vocab_size = 256
seq_len = 16
num_layers = 4
d_model = 32
num_heads = 4
dtype = ")" + plan.dtype +
                     R"("
tied_embeddings = )" +
                     (plan.tied_embeddings ? "true" : "false") +
                     (plan.architecture == "llama" ? "\nnum_kv_heads = 2\nffn_size = 64\n" : "\n") +
                     (plan.qkv_bias ? "qkv_bias = true\n" : "") +
                     R"(
[training]
global_batch_size = 12
learning_rate = 3e-3
warmup_steps = 2
total_steps = 20
seed = 5
eval_batches = 1

)";
  if (plan.gradient_bucket_size >= 0)
    toml += "gradient_bucket_size = " + std::to_string(plan.gradient_bucket_size) + "\n";
  toml += "\n[planner]\n";
  toml += "pipeline_nstages = " + std::to_string(plan.pipeline) + "\n";
  toml += "data_parallel_degree = " + std::to_string(plan.data) + "\n";
  toml += "tensor_parallel_degree = " + std::to_string(plan.tensor) + "\n";
  toml += "micro_batch_size = " + std::to_string(plan.micro_batch_size) + "\n";
  toml += "zero_stage = " + std::to_string(plan.zero_stage) + "\n";
  toml += "zero_ngroups = " + std::to_string(plan.zero_groups) + "\n";
  toml += "recompute_modules = \"" + plan.recompute_modules + "\"\n";
  toml += "pipeline_scheduler = \"" + plan.scheduler + "\"\n";
  toml += std::string("sequence_parallel = ") + (plan.sequence_parallel ? "true" : "false") + "\n";
  toml += "world_size = " + std::to_string(plan.world()) + "\n";
  return toml;
}

class ParallelTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Test machines often run as root, where Open MPI wants explicit consent.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    directory_ = new TemporaryDirectory("parallel");
    std::string corpus;
    for (int i = 0; i < 300; ++i)
      // UTF-8 puts bytes >= 128 in the data, so every vocabulary shard of a
      // tensor-parallel embedding sees tokens.
      corpus += "sample " + std::to_string(i * 7919 % 1000) + " of a small corpus, line " +
                std::to_string(i) + " \u00e9t\u00e9 \u65e5\u672c \u00fcber\n";
    write_file(*directory_ / "corpus.txt", corpus);
    ASSERT_EQ(
        run("tokenize --input " + *directory_ / "corpus.txt" + " --output " + *directory_ / "data")
            .exit_code,
        0);
  }
  static void TearDownTestSuite() { delete directory_; }

  // Plans the case, trains `steps` (in all: a resumed run continues to it)
  // under mpirun, returns the per-step losses the log holds.
  static std::vector<double> train(const PlanCase& plan, const std::string& extra = "",
                                   CommandResult* result_out = nullptr,
                                   const std::string& environment = "", int steps = kSteps) {
    const std::string job = *directory_ / (plan.name + ".toml");
    const std::string plan_file = *directory_ / (plan.name + ".pplan");
    write_file(job, job_toml(plan));
    CommandResult planned = run("plan --config " + job + " --output " + plan_file);
    EXPECT_EQ(planned.exit_code, 0) << planned.output;
    return train_plan_file(plan_file, plan.name, extra, result_out, environment, steps);
  }

  // Trains an existing plan file (its log named after name) as train() does.
  static std::vector<double> train_plan_file(const std::string& plan_file, const std::string& name,
                                             const std::string& extra = "",
                                             CommandResult* result_out = nullptr,
                                             const std::string& environment = "",
                                             int steps = kSteps) {
    const std::string log = *directory_ / (name + ".jsonl");
    // Started as users start it: `paraplan launch` builds the mpirun command.
    const CommandResult trained =
        run_command(environment + " " + PARAPLAN_BINARY + " launch --plan " + plan_file +
                    " -- train --data " + *directory_ / "data/train.bin" + " --steps " +
                    std::to_string(steps) + " --log-json " + log + " " + extra);
    if (result_out) *result_out = trained;
    if (environment.empty()) {
      EXPECT_EQ(trained.exit_code, 0) << trained.output;
    }
    std::vector<double> losses;
    for (const auto& line : read_json_lines(log)) losses.push_back(line["loss"].get<double>());
    return losses;
  }

  // The single-rank run of the same model (trained once per test program).
  static const std::vector<double>& single_rank_losses(const std::string& dtype = "float32",
                                                       bool tied_embeddings = true,
                                                       const std::string& architecture = "gpt2",
                                                       bool qkv_bias = false) {
    static std::map<ModelKey, std::vector<double>> losses;
    const ModelKey model{architecture, dtype, tied_embeddings, qkv_bias};
    auto found = losses.find(model);
    if (found == losses.end())
      found = losses
                  .emplace(model, train(PlanCase{.name = "single_" + architecture + "_" + dtype +
                                                         (tied_embeddings ? "" : "_untied") +
                                                         (qkv_bias ? "_qkv_bias" : ""),
                                                 .dtype = dtype,
                                                 .tied_embeddings = tied_embeddings,
                                                 .architecture = architecture,
                                                 .qkv_bias = qkv_bias}))
                  .first;
    return found->second;
  }

  // The largest difference of plan's losses from the single-rank run's, each
  // step within tolerance.
  static double expect_same_losses(const PlanCase& plan, double tolerance = kLossTolerance) {
    const std::vector<double>& expected =
        single_rank_losses(plan.dtype, plan.tied_embeddings, plan.architecture, plan.qkv_bias);
    EXPECT_EQ(expected.size(), static_cast<size_t>(kSteps));
    const std::vector<double> losses = train(plan);
    EXPECT_EQ(losses.size(), expected.size()) << plan.name;
    if (losses.size() != expected.size()) return INFINITY;
    double largest = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], expected[i], tolerance) << plan.name << " step " << i + 1;
      largest = std::max(largest, std::fabs(losses[i] - expected[i]));
    }
    return largest;
  }

  // Trains the case on the CUDA backend (strict fp32 GEMMs) with `transport`
  // and expects the CPU run's losses within tolerance.
  static void expect_cuda_losses(const PlanCase& plan, const std::string& transport,
                                 const std::vector<double>& expected, double tolerance) {
    CommandResult result;
    const std::vector<double> losses =
        train(plan, "--backend cuda --transport " + transport, &result, "PARAPLAN_CUDA_TF32=0");
    EXPECT_EQ(result.exit_code, 0) << result.output;
    ASSERT_EQ(losses.size(), expected.size()) << plan.name << "\n" << result.output;
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], expected[i], tolerance) << plan.name << " step " << i + 1;
  }

  // Trains both for kSteps with a checkpoint at the end, and expects the
  // parameters and optimizer moments bitwise equal: the losses alone would
  // hide differences in the last bits.
  static void expect_same_checkpoints(const PlanCase& a, const std::string& a_extra,
                                      const PlanCase& b, const std::string& b_extra) {
    std::map<std::string, std::string> files[2];
    for (int which = 0; which < 2; ++which) {
      const PlanCase& plan = which == 0 ? a : b;
      const std::string checkpoints = *directory_ / (plan.name + "_checkpoints");
      const std::string extra = which == 0 ? a_extra : b_extra;
      ASSERT_EQ(train(plan, "--checkpoint-dir " + checkpoints + " " + extra).size(),
                static_cast<size_t>(kSteps))
          << plan.name;
      files[which] = last_checkpoint(checkpoints);
    }
    expect_same_files(a.name, files[0], b.name, files[1]);
  }

  // The parameters and optimizer moments of the checkpoint at step kSteps,
  // each tensor's F32 bits by "model:" or "optimizer:" and its name: which
  // files hold a tensor depends on the plan that saved it (one per writing
  // stage and tensor rank), its values must not.
  static std::map<std::string, std::string> last_checkpoint(const std::string& checkpoints) {
    const std::string step_dir = checkpoints + "/step_0000000" + std::to_string(kSteps);
    std::map<std::string, std::string> tensors;
    for (const char* base : {"model", "optimizer"}) {
      const TensorFileSet files = TensorFileSet::open(step_dir, base);
      for (const std::string& name : files.names()) {
        size_t elements = 1;
        for (int64_t dim : files.shape(name)) elements *= static_cast<size_t>(dim);
        std::string bits(elements * sizeof(float), '\0');
        files.read(name, reinterpret_cast<float*>(bits.data()), files.shape(name));
        tensors[std::string(base) + ":" + name] = std::move(bits);
      }
    }
    return tensors;
  }

  // The largest difference between two checkpoints' tensors (last_checkpoint),
  // relative to each tensor's largest value (the second moments are ~1e-8);
  // fails unless both hold the same tensors of the same sizes.
  static double largest_relative_difference(const std::map<std::string, std::string>& a,
                                            const std::map<std::string, std::string>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0.0;
    for (const auto& [name, bits] : a) {
      const auto other = b.find(name);
      if (other == b.end() || other->second.size() != bits.size()) {
        ADD_FAILURE() << name << " is missing or of another size";
        continue;
      }
      const float* x = reinterpret_cast<const float*>(bits.data());
      const float* y = reinterpret_cast<const float*>(other->second.data());
      double difference = 0.0, scale = 0.0;
      for (size_t k = 0; k < bits.size() / sizeof(float); ++k) {
        difference = std::max(difference, std::fabs(static_cast<double>(x[k]) - y[k]));
        scale = std::max(scale, std::fabs(static_cast<double>(x[k])));
      }
      if (scale > 0) worst = std::max(worst, difference / scale);
    }
    return worst;
  }

  static void expect_same_files(const std::string& a,
                                const std::map<std::string, std::string>& a_files,
                                const std::string& b,
                                const std::map<std::string, std::string>& b_files) {
    EXPECT_EQ(a_files.size(), b_files.size()) << a << " vs " << b << ": tensor counts differ";
    for (const auto& [tensor, bytes] : a_files) {
      EXPECT_FALSE(bytes.empty()) << a << " " << tensor;
      const auto other = b_files.find(tensor);
      ASSERT_NE(other, b_files.end()) << b << " lacks " << tensor;
      EXPECT_TRUE(bytes == other->second) << a << " vs " << b << ": " << tensor << " differs";
    }
  }

  inline static TemporaryDirectory* directory_ = nullptr;
};

}  // namespace paraplan::testing
