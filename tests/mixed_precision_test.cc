// mixed_precision_test.cc: bf16 mixed precision end to end on the CPU
// backend's bf16 storage (rounded exactly as the GPU rounds), under mpirun:
// plans train to the single-rank bf16 losses within a bf16 tolerance; what
// must be exact stays bitwise (recomputation, gradient buckets, ZeRO-1 against
// plain data parallelism); fp32 master weights survive a checkpoint resume
// bitwise; and the bf16 run tracks the fp32 run of the same job.
//
// Tolerance: unlike fp32, a plan changes where bf16 roundings happen (a
// data-parallel rank rounds its half of the micro-batches' gradient sum
// before the all-reduce; tensor parallelism rounds partial products before
// their all-reduce), each worth up to 2^-9 relative. Measured over 5 steps:
// the losses of dp2, tp2, pp2 and pp2 x dp2 x tp2 + ZeRO-1 differ from the
// single-rank bf16 run by at most 1.5e-4 (losses ~5.5; fp32 plans: 2.2e-8).
// kBfloat16Tolerance = 1e-3 keeps a 6x margin, at the size by which a real
// bug (a missing reduction, a wrong shard, a dropped micro-batch) moves the
// loss; the bitwise tests below hold the rest to exactness.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "parallel_training_fixture.h"

namespace {

using namespace paraplan::testing;

constexpr double kBfloat16Tolerance = 1e-3;

PlanCase bf16(PlanCase plan) {
  plan.dtype = "bfloat16";
  return plan;
}

TEST_F(ParallelTraining, Bfloat16TracksFloat32) {
  const std::vector<double>& fp32 = single_rank_losses("float32");
  const std::vector<double>& mixed = single_rank_losses("bfloat16");
  ASSERT_EQ(mixed.size(), fp32.size());
  double largest = 0;
  for (size_t i = 0; i < fp32.size(); ++i)
    largest = std::max(largest, std::fabs(mixed[i] - fp32[i]));
  // Training, not just running: the loss falls as in fp32.
  EXPECT_LT(mixed.back(), mixed.front() - 0.3);
  EXPECT_LT(largest, 5e-3);  // measured 2.1e-4
  EXPECT_GT(largest, 0.0) << "bf16 gave the fp32 losses bitwise: nothing was rounded";
}

TEST_F(ParallelTraining, Bfloat16PlansMatchTheSingleRankRun) {
  for (const PlanCase& plan : {bf16({.name = "bf16_dp2", .data = 2, .micro_batch_size = 3}),
                               bf16({.name = "bf16_tp2", .tensor = 2, .micro_batch_size = 6}),
                               bf16({.name = "bf16_pp2", .pipeline = 2, .micro_batch_size = 3}),
                               bf16({.name = "bf16_pp2_dp2_tp2_zero1",
                               .pipeline = 2,
                               .data = 2,
                               .tensor = 2,
                               .micro_batch_size = 2,
                               .zero_stage = 1})})
    expect_same_losses(plan, kBfloat16Tolerance);
}

TEST_F(ParallelTraining, Bfloat16ExactnessThatMustSurvive) {
  // ZeRO-1's reduce-scatter gives bitwise the slice of the all-reduce, and
  // its sharded fp32 master weights update exactly as the whole ones; buckets
  // and recomputation change no arithmetic at all.
  const PlanCase plain = bf16({.name = "bf16_dp2_plain", .data = 2, .micro_batch_size = 3});
  PlanCase zero = plain;
  zero.name = "bf16_dp2_zero1_buckets_recompute";
  zero.zero_stage = 1;
  zero.gradient_bucket_size = 1000;
  zero.recompute_modules = "transformer.h";
  expect_same_checkpoints(plain, "", zero, "");
}

TEST_F(ParallelTraining, Bfloat16ResumeIsBitwise) {
  // The checkpoint holds the fp32 master weights, not their bf16 copy: a run
  // stopped after step 2 and resumed ends bitwise where the uninterrupted
  // run ends.
  const PlanCase whole = bf16({.name = "bf16_whole", .data = 2, .micro_batch_size = 3});
  PlanCase split = whole;
  split.name = "bf16_split";
  const std::string whole_dir = *directory_ / "bf16_whole_checkpoints";
  const std::string split_dir = *directory_ / "bf16_split_checkpoints";
  const std::vector<double> expected = train(whole, "--checkpoint-dir " + whole_dir);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(train(split, "--checkpoint-dir " + split_dir, nullptr, "", 2).size(), 2u);
  const std::vector<double> resumed =
      train(split, "--checkpoint-dir " + split_dir + " --resume", nullptr, "", kSteps);
  ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps));  // the log holds both halves
  for (size_t i = 0; i < resumed.size(); ++i)
    EXPECT_EQ(resumed[i], expected[i]) << "step " << i + 1;
  // Every tensor bitwise, whichever files hold them (each data rank writes one).
  expect_same_files(whole.name, last_checkpoint(whole_dir), split.name, last_checkpoint(split_dir));
}

// ---- the CUDA backend in bf16 against the CPU backend in bf16 (skipped without a GPU) ------
//
// Both round every stored tensor at the same points; cuBLAS and the CUDA
// kernels sum in other orders than OpenBLAS and the CPU loops, which moves a
// value across a bf16 rounding boundary now and then. Not measured yet (no
// GPU in the sessions so far): 5e-3 is five times the plan tolerance above,
// still below what a missing reduction or a dropped micro-batch does.
constexpr double kCudaBfloat16Tolerance = 5e-3;

TEST_F(ParallelTraining, CudaBfloat16MatchesTheCpuBfloat16Run) {
  if (paraplan::kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: the CUDA bf16 grid needs a GPU";
  const std::vector<double>& expected = single_rank_losses("bfloat16");
  for (const auto& [plan, transport] :
       {std::pair{bf16({.name = "cuda_bf16_single"}), std::string("nccl")},
        std::pair{
            bf16(
                {.name = "cuda_bf16_dp2_zero1", .data = 2, .micro_batch_size = 3, .zero_stage = 1}),
            std::string("auto")},
        std::pair{
            bf16({.name = "cuda_bf16_pp2_tp2", .pipeline = 2, .tensor = 2, .micro_batch_size = 3}),
            std::string("auto")}}) {
    CommandResult result;
    const std::vector<double> losses =
        train(plan, "--backend cuda --transport " + transport, &result);
    ASSERT_EQ(losses.size(), expected.size()) << plan.name << "\n" << result.output;
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], expected[i], kCudaBfloat16Tolerance) << plan.name << " step " << i + 1;
  }
}

}  // namespace
