// zero_three_test.cc: ZeRO-3 (parameters sharded too, each unit gathered
// and freed where the plan's stream says: one unit ahead of the reads, or
// kept gathered for the step: schema/zero_units.h) trained
// under mpirun gives the single-rank losses: over 2 and 4 data-parallel
// ranks, with tensor and sequence parallelism, under every pipeline
// schedule kind (recomputation and split backward read the parameters
// again), for GPT-2 and Llama, fp32 and bf16; and its checkpoints resume
// under a ZeRO-1 plan of another mesh and back with the straight run's
// losses. Tolerances as zero_two_test.cc's: the sums are ZeRO-2's, in its
// fp32 gradient shard (bf16_zero3_dp2: 5.4e-4 from the single-rank bf16
// run with a bf16 shard, 4.4e-4 with the fp32 one; why the bound stays is
// there).
#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "schedule_plan_fixture.h"

namespace paraplan::testing {
namespace {

using schema::ScheduleKind;

constexpr double kBfloat16Tolerance = 1e-3;
// fp32 on CUDA against the CPU (context_parallel_test.cc's bound).
constexpr double kCudaLossTolerance = 1e-4;

class ZeroThree : public SchedulePlanTraining {
 protected:
  // The peak memory a run logs (rank 0's), in bytes.
  static double logged_peak_memory(const std::string& name) {
    double peak = 0;
    for (const auto& line : read_json_lines(*directory_ / (name + ".jsonl")))
      peak = std::max(peak, line["memory_bytes"].get<double>());
    return peak;
  }
};

ScheduleCase zero_three(std::string name, ScheduleKind kind, int pipeline, int virtual_stages,
                        int data, bool keep_gathered = false) {
  return ScheduleCase{.name = std::move(name),
                      .kind = kind,
                      .pipeline = pipeline,
                      .virtual_stages = virtual_stages,
                      .data = data,
                      .zero_stage = 3,
                      .keep_parameters_gathered = keep_gathered};
}

TEST_F(ZeroThree, DataParallelGivesTheSingleRankLosses) {
  const ScheduleKind one_f1b = ScheduleKind::OneForwardOneBackward;
  expect_single_rank_losses(zero_three("zero3_dp2", one_f1b, 1, 1, 2));
  expect_single_rank_losses(zero_three("zero3_dp4", one_f1b, 1, 1, 4));
  expect_single_rank_losses(zero_three("zero3_dp2_kept", one_f1b, 1, 1, 2, true));
  ScheduleCase groups = zero_three("zero3_dp4_g2", one_f1b, 1, 1, 4);
  groups.zero_groups = 2;
  expect_single_rank_losses(groups);
  ScheduleCase tensor = zero_three("zero3_dp2_tp2_sp", one_f1b, 1, 1, 2);
  tensor.tensor = 2, tensor.sequence_parallel = true;
  expect_single_rank_losses(tensor);
}

// Evaluation between steps reads the parameters outside the step's stream:
// each unit gathered on demand with the next one's gather started ahead
// (sharded_parameters.h). Its validation losses are the single rank's, over
// dp 2 and with a pipeline of 2.
TEST_F(ZeroThree, EvaluationGivesTheSingleRankValidationLosses) {
  const Run& single = run({.name = "single_gpt2_eval", .eval_interval = 2});
  ASSERT_EQ(single.validation_losses.size(), 3u);  // steps 2, 4 and the last
  ScheduleCase data = zero_three("zero3_dp2_eval", ScheduleKind::OneForwardOneBackward, 1, 1, 2);
  ScheduleCase pipelined =
      zero_three("zero3_pp2_dp2_eval", ScheduleKind::OneForwardOneBackward, 2, 1, 2);
  for (ScheduleCase* c : {&data, &pipelined}) {
    c->eval_interval = 2;
    const Run& mine = run(*c);
    ASSERT_EQ(mine.validation_losses.size(), single.validation_losses.size()) << c->name;
    for (size_t i = 0; i < mine.validation_losses.size(); ++i)
      EXPECT_NEAR(mine.validation_losses[i], single.validation_losses[i], kLossTolerance)
          << c->name << " evaluation " << i + 1;
  }
}

// Against ZeRO-2 on the same 4 ranks, the parameters are what the rank
// keeps of them: its shard (110400 / 4 of the 8-block model's 110400
// fp32 parameters), the embedding's unit whole (8704: the tied head reads
// it at both ends of the step) and two gathered blocks (2 x 12704), in
// place of the whole buffer (110400 + 31 elements of ZeRO-2's padding).
TEST_F(ZeroThree, ParametersTakeTheShardAndTwoGatheredBlocks) {
  const ScheduleCase zero3 = zero_three("zero3_dp4", ScheduleKind::OneForwardOneBackward, 1, 1, 4);
  ScheduleCase zero2 = zero3;
  zero2.name = "zero2_dp4", zero2.zero_stage = 2;
  ASSERT_EQ(run(zero3).losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(run(zero2).losses.size(), static_cast<size_t>(kSteps));
  const double saved = logged_peak_memory(zero2.name) - logged_peak_memory(zero3.name);
  std::cout << "ZeRO-3 against ZeRO-2, dp 4: peak memory " << saved << " bytes less" << std::endl;
  EXPECT_EQ(saved, 4.0 * ((110400 + 31) - (110400 / 4 + 8704 + 2 * 12704)));
}

TEST_F(ZeroThree, EverySchedulePipelinedGivesTheSingleRankLosses) {
  expect_single_rank_losses(
      zero_three("zero3_1f1b_pp2_dp2", ScheduleKind::OneForwardOneBackward, 2, 1, 2));
  expect_single_rank_losses(zero_three("zero3_gpipe_pp2_dp2_kept", ScheduleKind::GPipe, 2, 1, 2,
                                       /*keep_gathered=*/true));
  expect_single_rank_losses(
      zero_three("zero3_interleaved_pp2_v2_dp2", ScheduleKind::Interleaved1F1B, 2, 2, 2));
  expect_single_rank_losses(zero_three("zero3_zbh1_pp2_dp2", ScheduleKind::ZeroBubbleH1, 2, 1, 2));
  expect_single_rank_losses(zero_three("zero3_zbv_pp2_dp2", ScheduleKind::ZeroBubbleV, 2, 2, 2));
  expect_single_rank_losses(
      zero_three("zero3_dualpipev_pp2_dp2", ScheduleKind::DualPipeV, 2, 2, 2));
}

// Units of several layers (zero.layers_per_unit; the 8-block model's
// stages hold 4 blocks each under pp 2): gathered, released and
// reduce-scattered as one, with the last unit holding what is left.
TEST_F(ZeroThree, UnitsOfSeveralLayersGiveTheSingleRankLosses) {
  ScheduleCase two = zero_three("zero3_units2_dp2", ScheduleKind::OneForwardOneBackward, 1, 1, 2);
  two.zero_layers_per_unit = 2;
  expect_single_rank_losses(two);
  ScheduleCase three = zero_three("zero3_units3_zbh1_pp2_dp2", ScheduleKind::ZeroBubbleH1, 2, 1, 2);
  three.zero_layers_per_unit = 3;
  expect_single_rank_losses(three);
  ScheduleCase interleaved =
      zero_three("zero3_units3_interleaved_pp2_v2_dp2_kept", ScheduleKind::Interleaved1F1B, 2, 2, 2,
                 /*keep_gathered=*/true);
  interleaved.zero_layers_per_unit = 3;
  expect_single_rank_losses(interleaved);
  ScheduleCase zero2 = two;
  zero2.name = "zero2_units3_1f1b_pp2_dp2", zero2.zero_stage = 2, zero2.pipeline = 2;
  zero2.zero_layers_per_unit = 3;
  expect_single_rank_losses(zero2);
}

TEST_F(ZeroThree, LlamaAndBfloat16GiveTheSingleRankLosses) {
  ScheduleCase llama = zero_three("llama_zero3_dp2", ScheduleKind::OneForwardOneBackward, 1, 1, 2);
  llama.architecture = "llama";
  expect_single_rank_losses(llama);
  ScheduleCase piped = zero_three("llama_zero3_zbh1_pp2_dp2", ScheduleKind::ZeroBubbleH1, 2, 1, 2);
  piped.architecture = "llama";
  expect_single_rank_losses(piped);
  ScheduleCase bf16 = zero_three("bf16_zero3_dp2", ScheduleKind::OneForwardOneBackward, 1, 1, 2);
  bf16.dtype = schema::DType::BFloat16;
  expect_single_rank_losses(bf16, kBfloat16Tolerance);
}

// A ZeRO-3 plan written before the streams listed their unit ops (schema
// version 9) gets them at load, as the planner writes them now: the same
// losses, bitwise, kept gathered or not.
TEST_F(ZeroThree, APlanWrittenBeforeItsUnitOpsTrainsExactlyAsOneWithThem) {
  for (const bool kept : {false, true}) {
    const ScheduleCase now = zero_three(kept ? "zero3_zbh1_kept_v10" : "zero3_zbh1_v10",
                                        ScheduleKind::ZeroBubbleH1, 2, 1, 2, kept);
    ScheduleCase before = now;
    before.name = kept ? "zero3_zbh1_kept_v9" : "zero3_zbh1_v9", before.schema_version = 9;
    ASSERT_EQ(run(now).losses.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(run(before).losses, run(now).losses) << before.name;
  }
}

// On a GPU (the device check's tests phase): ZeRO-2 and ZeRO-3 plans, fp32
// and bf16, trained by ranks sharing the GPU through the staged transport
// give the CPU's losses: the unit ops' gathers, releases and reduce-scatters
// and the fp32 gradient shard's CUDA ops.
TEST_F(ZeroThree, CudaRanksSharingOneGpuGiveTheCpuLosses) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: ZeRO's CUDA ops need a GPU";
  const ScheduleCase zero3 = zero_three("zero3_dp2", ScheduleKind::OneForwardOneBackward, 1, 1, 2);
  ScheduleCase zero2 = zero3;
  zero2.name = "zero2_dp2", zero2.zero_stage = 2;
  const ScheduleCase piped = zero_three("zero3_zbh1_pp2_dp2", ScheduleKind::ZeroBubbleH1, 2, 1, 2);
  ScheduleCase bf16 = zero3;
  bf16.name = "bf16_zero3_dp2", bf16.dtype = schema::DType::BFloat16;
  for (const ScheduleCase& c : {zero3, zero2, piped}) expect_cuda_losses(c, kCudaLossTolerance);
  expect_cuda_losses(bf16, kBfloat16Tolerance);
}

TEST_F(ZeroThree, CheckpointsResumeUnderZeroOnePlansOfOtherMeshes) {
  const ScheduleCase zero3 = zero_three("zero3_dp4", ScheduleKind::OneForwardOneBackward, 1, 1, 4);
  ScheduleCase zero1 =
      zero_three("zero1_1f1b_pp2_dp2", ScheduleKind::OneForwardOneBackward, 2, 1, 2);
  zero1.zero_stage = 1;
  expect_checkpoints_cross(zero3, zero1);
  // Units of several layers shard differently; the checkpoint is the whole
  // model's all the same.
  // (Another name for the ZeRO-1 run: its resumed runs' logs are by name.)
  ScheduleCase units = zero3;
  units.name = "zero3_units3_dp4", units.zero_layers_per_unit = 3;
  zero1.name = "zero1_1f1b_pp2_dp2_again";
  expect_checkpoints_cross(units, zero1);
}

}  // namespace
}  // namespace paraplan::testing
