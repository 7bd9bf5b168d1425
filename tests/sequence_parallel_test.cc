// sequence_parallel_test.cc: Megatron's sequence parallelism (the norm and
// residual regions sharded along the tokens over the tensor group,
// runtime/model/tensor_parallel.h) trains the tiny GPT-2 and Llama of
// parallel_training_fixture.h to the single-rank losses under mpirun: tp 2
// and 4, with pp 2 (pipeline messages are token shards) and with dp 2 +
// ZeRO-1, fp32 and bf16, recompute selective and full; and to the losses of
// the same plan without it. Each case prints its largest loss differences.
//
// Tolerances are the grid's (parallel_training_test.cc, mixed_precision_test.cc):
// sequence parallelism changes only the order of floating-point sums (the
// norms' weight gradients are summed per rank over its tokens, then over the
// group), while a missing gather, a wrong shard or a norm gradient left
// unsummed moves the loss by 1e-3 or more.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel_training_fixture.h"

namespace {

using namespace paraplan::testing;

constexpr double kBfloat16Tolerance = 1e-3;  // mixed_precision_test.cc's

PlanCase sequence_parallel(PlanCase plan) {
  plan.sequence_parallel = true;
  if (plan.architecture == "llama") plan.tied_embeddings = false;  // Llama's default
  return plan;
}

class SequenceParallelTraining : public ParallelTraining {
 protected:
  // The plan the fixture wrote for the case, as JSON.
  static nlohmann::json plan_json(const PlanCase& plan) {
    const CommandResult inspected = run("inspect --json " + *directory_ / (plan.name + ".pplan"));
    EXPECT_EQ(inspected.exit_code, 0) << inspected.output;
    return nlohmann::json::parse(inspected.output, nullptr, false);
  }

  // Trains plan (sequence parallel) and the same plan without it; expects
  // the first at the single-rank losses and at the second's, and the plan
  // files to say which is which.
  static void expect_same_losses_with_and_without(const PlanCase& plan, double tolerance) {
    const std::vector<double>& single =
        single_rank_losses(plan.dtype, plan.tied_embeddings, plan.architecture);
    PlanCase plain = plan;
    plain.name = plan.name + "_without";
    plain.sequence_parallel = false;
    const std::vector<double> with = train(plan), without = train(plain);
    EXPECT_EQ(plan_json(plan)["mesh"]["sequence_parallel"], true) << plan.name;
    EXPECT_EQ(plan_json(plain)["mesh"]["sequence_parallel"], false) << plain.name;
    ASSERT_EQ(with.size(), static_cast<size_t>(kSteps)) << plan.name;
    ASSERT_EQ(single.size(), with.size()) << plan.name;
    ASSERT_EQ(without.size(), with.size()) << plain.name;
    double from_single = 0, from_plain = 0;
    for (size_t i = 0; i < with.size(); ++i) {
      EXPECT_NEAR(with[i], single[i], tolerance) << plan.name << " step " << i + 1;
      EXPECT_NEAR(with[i], without[i], tolerance) << plan.name << " step " << i + 1;
      from_single = std::max(from_single, std::fabs(with[i] - single[i]));
      from_plain = std::max(from_plain, std::fabs(with[i] - without[i]));
    }
    std::cout << "sequence-parallel grid: " << plan.name << " (" << plan.architecture << ", pp "
              << plan.pipeline << " x dp " << plan.data << " x tp " << plan.tensor
              << ", micro-batch " << plan.micro_batch_size << (plan.zero_stage ? ", ZeRO-1" : "")
              << (plan.recompute_modules.empty() ? "" : ", recompute " + plan.recompute_modules)
              << ", " << plan.dtype << ") max |loss - single-rank| = " << from_single
              << ", max |loss - same plan without SP| = " << from_plain << std::endl;
  }
};

TEST_F(SequenceParallelTraining, Gpt2PlansMatchSingleRankAndPlainTensorParallel) {
  for (const PlanCase& plan : {
           sequence_parallel({.name = "sp_tp2", .tensor = 2, .micro_batch_size = 6}),
           // 16 tokens over 4 ranks: 4 positions of each sequence per rank.
           sequence_parallel({.name = "sp_tp4", .tensor = 4, .micro_batch_size = 3}),
           // Pipeline messages are [B*T/t, C] shards.
           sequence_parallel({.name = "sp_pp2_tp2",
           .pipeline = 2,
           .tensor = 2,
           .micro_batch_size = 3,
           .recompute_modules = "core_attention"}),
           sequence_parallel({.name = "sp_dp2_tp2_zero1",
           .data = 2,
           .tensor = 2,
           .micro_batch_size = 2,
           .zero_stage = 1,
           .recompute_modules = "transformer.h"}),
       })
    expect_same_losses_with_and_without(plan, kLossTolerance);
}

TEST_F(SequenceParallelTraining, LlamaPlansMatchSingleRankAndPlainTensorParallel) {
  for (const PlanCase& plan : {
           sequence_parallel({.name = "sp_llama_tp2",
          .tensor = 2,
          .micro_batch_size = 6,
          .architecture = "llama"}),
           sequence_parallel({.name = "sp_llama_pp2_tp2",
           .pipeline = 2,
           .tensor = 2,
           .micro_batch_size = 3,
           .recompute_modules = "ROOT",
           .architecture = "llama"}),
       })
    expect_same_losses_with_and_without(plan, kLossTolerance);
}

TEST_F(SequenceParallelTraining, Bfloat16PlansMatchSingleRankAndPlainTensorParallel) {
  for (const PlanCase& plan : {
           sequence_parallel({.name = "sp_bf16_tp4",
          .tensor = 4,
          .micro_batch_size = 3,
          .recompute_modules = "core_attention",
          .dtype = "bfloat16"}),
           sequence_parallel({.name = "sp_llama_bf16_dp2_tp2_zero1",
           .data = 2,
           .tensor = 2,
           .micro_batch_size = 2,
           .zero_stage = 1,
           .dtype = "bfloat16",
           .architecture = "llama"}),
       })
    expect_same_losses_with_and_without(plan, kBfloat16Tolerance);
}

}  // namespace
