// llama_training_test.cc: the project's main oracle for the Llama
// architecture. A tiny Llama (4 blocks, d_model 32, 4 query heads over 2 KV
// heads, SwiGLU 64, RMSNorm, rotary positions, untied head) trains under a
// grid of plans (pipeline stages, tensor parallelism splitting query and KV
// heads, data parallelism with ZeRO-1 and gradient buckets, all at once on 8
// ranks, the tied variant across stages) to the single-rank losses, under
// mpirun; recomputation is bitwise invisible; bf16 plans stay within the bf16
// tolerance (measured: 5.4e-4 for pp2 x dp2 x tp2, of which tp2 alone 5.1e-4,
// dp2 1.5e-4, pp2 1.7e-4: rounding where partial sums are rounded to bf16
// before their reduction); on a GPU, the CUDA backend gives the CPU's losses.
// Each case prints its largest loss difference.
//
// Tolerances are parallel_training_test.cc's and mixed_precision_test.cc's:
// plans change only the order of floating-point sums (fp32: last bits; the
// measured differences are printed), while a missing reduction, a wrong head
// shard or a dropped micro-batch moves the loss by 1e-3 or more.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "parallel_training_fixture.h"

namespace {

using namespace paraplan::testing;

constexpr double kBfloat16Tolerance = 1e-3;
// CUDA against the CPU run, strict fp32 GEMMs: parallel_training_test.cc's
// kCudaLossTolerance (orders of sums inside kernels).
constexpr double kCudaLossTolerance = 1e-4;

PlanCase llama(PlanCase plan) {
  plan.architecture = "llama";
  plan.tied_embeddings = false;  // Llama's default
  return plan;
}

void report(const PlanCase& plan, double largest) {
  std::cout << "llama grid: " << plan.name << " (pp " << plan.pipeline << " x dp " << plan.data
            << " x tp " << plan.tensor << ", micro-batch " << plan.micro_batch_size
            << (plan.zero_stage ? ", ZeRO-" + std::to_string(plan.zero_stage) : std::string())
            << (plan.sequence_parallel ? ", sp" : "") << (plan.qkv_bias ? ", q/k/v biases" : "")
            << ", " << plan.dtype << ") max |loss - single-rank loss| = " << largest << std::endl;
}

TEST_F(ParallelTraining, LlamaSingleRankLossFalls) {
  const std::vector<double>& losses = single_rank_losses("float32", false, "llama");
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(losses[0], std::log(256.0), 0.1);
  EXPECT_LT(losses.back(), losses.front() - 0.3);
}

TEST_F(ParallelTraining, LlamaPlansMatchTheSingleRankRun) {
  for (const PlanCase& plan : {
           llama({.name = "llama_pp2", .pipeline = 2, .micro_batch_size = 3}),
           // Each rank: 2 query heads and their KV head.
           llama({.name = "llama_tp2", .tensor = 2, .micro_batch_size = 6}),
           llama({.name = "llama_dp2_zero1", .data = 2, .micro_batch_size = 3, .zero_stage = 1}),
           llama({.name = "llama_pp2_tp2", .pipeline = 2, .tensor = 2, .micro_batch_size = 3}),
           llama({.name = "llama_pp2_dp2_tp2_zero1_buckets",
           .pipeline = 2,
           .data = 2,
           .tensor = 2,
           .micro_batch_size = 2,
           .zero_stage = 1,
           .gradient_bucket_size = 999}),
       })
    report(plan, expect_same_losses(plan));
}

TEST_F(ParallelTraining, LlamaTiedEmbeddingsAcrossStages) {
  // The head on the last stage is a copy of the first stage's embedding,
  // kept identical by summing the two gradients.
  PlanCase tied =
      llama({.name = "llama_pp2_tp2_tied", .pipeline = 2, .tensor = 2, .micro_batch_size = 3});
  tied.tied_embeddings = true;
  report(tied, expect_same_losses(tied));
}

TEST_F(ParallelTraining, LlamaRecomputationIsBitwiseInvisible) {
  const PlanCase base =
      llama({.name = "llama_pp2_tp2_none", .pipeline = 2, .tensor = 2, .micro_batch_size = 2});
  const std::vector<double> none = train(base);
  ASSERT_EQ(none.size(), static_cast<size_t>(kSteps));
  PlanCase full = base;
  full.name = "llama_pp2_tp2_full";
  full.recompute_modules = "ROOT";
  PlanCase selective = base;
  selective.name = "llama_pp2_tp2_selective";
  selective.recompute_modules = "self_attn.core_attention";
  EXPECT_EQ(train(full), none);
  EXPECT_EQ(train(selective), none);
}

TEST_F(ParallelTraining, LlamaBfloat16PlansMatchTheSingleRankRun) {
  PlanCase plan = llama({.name = "llama_bf16_pp2_dp2_tp2_zero1",
                         .pipeline = 2,
                         .data = 2,
                         .tensor = 2,
                         .micro_batch_size = 2,
                         .zero_stage = 1});
  plan.dtype = "bfloat16";
  report(plan, expect_same_losses(plan, kBfloat16Tolerance));
}

// Qwen 2's q, k and v biases: column-parallel with their weights (each
// tensor rank adds its heads' own), reduced over data ranks and ZeRO's
// shards like any parameter, and gathered by ZeRO-3.
TEST_F(ParallelTraining, QkvBiasPlansMatchTheSingleRankRun) {
  const std::vector<double>& biased = single_rank_losses("float32", false, "llama", true);
  const std::vector<double>& plain = single_rank_losses("float32", false, "llama");
  ASSERT_EQ(biased.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(plain.size(), biased.size());
  // The biases start at zero, so the first step is the plain model's; from
  // the second on they have moved and the model is another.
  EXPECT_EQ(biased[0], plain[0]);
  EXPECT_GT(std::fabs(biased.back() - plain.back()), 1e-5);
  const auto qwen = [](PlanCase plan) {
    plan = llama(plan);
    plan.qkv_bias = true;
    return plan;
  };
  for (const PlanCase& plan : {
           qwen({.name = "qwen_tp2", .tensor = 2, .micro_batch_size = 6}),
           qwen({.name = "qwen_pp2_dp2_tp2_zero1",
           .pipeline = 2,
           .data = 2,
           .tensor = 2,
           .micro_batch_size = 2,
           .zero_stage = 1}),
           qwen({.name = "qwen_dp2_tp2_sp_zero3",
           .data = 2,
           .tensor = 2,
           .micro_batch_size = 3,
           .zero_stage = 3,
           .sequence_parallel = true}),
       })
    report(plan, expect_same_losses(plan));
}

TEST_F(ParallelTraining, LlamaOnCudaMatchesTheCpuRun) {
  if (paraplan::kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: the CUDA Llama runs need a GPU";
  const std::vector<double>& expected = single_rank_losses("float32", false, "llama");
  for (const PlanCase& plan :
       {llama({.name = "llama_cuda_single"}),
        llama({.name = "llama_cuda_tp2", .tensor = 2, .micro_batch_size = 6}),
        llama({.name = "llama_cuda_pp2_dp2", .pipeline = 2, .data = 2, .micro_batch_size = 2})})
    expect_cuda_losses(plan, "auto", expected, kCudaLossTolerance);
}

TEST_F(ParallelTraining, LlamaKvHeadsNotDividingTheTensorDegreeAreRefused) {
  // 2 KV heads cannot be split 4 ways: the plan is refused naming why.
  PlanCase plan = llama({.name = "llama_tp4_refused", .tensor = 4, .micro_batch_size = 12});
  write_file(*directory_ / "llama_tp4.toml", job_toml(plan));
  const CommandResult planned = run("plan --config " + *directory_ / "llama_tp4.toml" +
                                    " --output " + *directory_ / "llama_tp4.pplan");
  EXPECT_NE(planned.exit_code, 0);
  EXPECT_NE(planned.output.find("num_kv_heads = 2"), std::string::npos) << planned.output;
  EXPECT_NE(planned.output.find("each tensor-parallel rank holds whole KV heads"),
            std::string::npos)
      << planned.output;
}

}  // namespace
