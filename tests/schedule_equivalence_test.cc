// schedule_equivalence_test.cc: every pipeline schedule the planner generates
// (1F1B, GPipe, interleaved 1F1B with two chunks per rank, ZB-H1 with split
// backward, ZB-V's two chunks in a V) trained under mpirun with `paraplan launch ... train` gives
// the single-rank losses, combined with tensor and data parallelism and ZeRO-1, for GPT-2 (tied
// embeddings: with chunks, the embedding on rank 0's first chunk and the head on the last rank's
// last one) and Llama; and bitwise 1F1B's weights and optimizer moments on the same pipeline width
// (GPipe and ZB-H1: only the order of independent work differs; interleaved: also the gradient
// norm's order of addition, which rounds to the same factor here).
//
// The plans are written here (schema/plan_test_support.h) around the
// planner's own schedules (planner/schedule/schedule.h, checked by its verifier), so
// each case differs from its 1F1B twin in nothing but the schedule and the
// layers' placement; the run validates them as any plan.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "schedule_plan_fixture.h"

namespace paraplan::testing {
namespace {

using schema::ScheduleKind;

class ScheduleEquivalence : public SchedulePlanTraining {};

const ScheduleCase kOneF1BPp2{.name = "1f1b_pp2", .pipeline = 2};
const ScheduleCase kOneF1BPp4{.name = "1f1b_pp4", .pipeline = 4};

TEST_F(ScheduleEquivalence, GPipeAndZeroBubbleGiveOneF1BsWeightsBitwise) {
  // Same layers on the same ranks; every gradient is summed micro-batch by
  // micro-batch in the same order: only independent work moved.
  const ScheduleCase gpipe{.name = "gpipe_pp2", .kind = ScheduleKind::GPipe, .pipeline = 2};
  const ScheduleCase zb2{.name = "zbh1_pp2", .kind = ScheduleKind::ZeroBubbleH1, .pipeline = 2};
  const ScheduleCase zb4{.name = "zbh1_pp4", .kind = ScheduleKind::ZeroBubbleH1, .pipeline = 4};
  for (const ScheduleCase& c : {kOneF1BPp2, gpipe, zb2, kOneF1BPp4, zb4})
    expect_single_rank_losses(c);
  expect_same_weights(kOneF1BPp2, gpipe);
  expect_same_weights(kOneF1BPp2, zb2);
  expect_same_weights(kOneF1BPp4, zb4);
}

TEST_F(ScheduleEquivalence, InterleavedGivesTheSingleRankLosses) {
  const ScheduleCase pp2{.name = "interleaved_pp2_v2",
                         .kind = ScheduleKind::Interleaved1F1B,
                         .pipeline = 2,
                         .virtual_stages = 2};
  const ScheduleCase pp4{.name = "interleaved_pp4_v2",
                         .kind = ScheduleKind::Interleaved1F1B,
                         .pipeline = 4,
                         .virtual_stages = 2};
  expect_single_rank_losses(pp2);
  expect_single_rank_losses(pp4);
  // Other ranks hold the layers than under 1F1B, but each gradient is still
  // summed micro-batch by micro-batch in the same order. Only the gradient
  // norm's sum of squares (in double, per rank, then over the world) adds in
  // another order; here it rounds to the same clip factor, so the weights
  // are bitwise 1F1B's (deterministic: the same every run).
  expect_same_weights(kOneF1BPp2, pp2);
  expect_same_weights(kOneF1BPp4, pp4);
}

TEST_F(ScheduleEquivalence, SchedulesCombineWithTensorDataParallelismAndZeroOne) {
  expect_single_rank_losses({.name = "interleaved_pp2_v2_dp2_zero1",
                             .kind = ScheduleKind::Interleaved1F1B,
                             .pipeline = 2,
                             .virtual_stages = 2,
                             .data = 2,
                             .zero_stage = 1});
  expect_single_rank_losses({.name = "interleaved_pp2_v2_tp2",
                             .kind = ScheduleKind::Interleaved1F1B,
                             .pipeline = 2,
                             .virtual_stages = 2,
                             .tensor = 2});
  expect_single_rank_losses(
      {.name = "zbh1_pp2_tp2", .kind = ScheduleKind::ZeroBubbleH1, .pipeline = 2, .tensor = 2});
  expect_single_rank_losses({.name = "zbh1_pp2_dp2_zero1",
                             .kind = ScheduleKind::ZeroBubbleH1,
                             .pipeline = 2,
                             .data = 2,
                             .zero_stage = 1});
}

// Split backward keeps copies of what later backwards overwrite: with
// sequence parallelism also the gathered inputs of column-parallel linears.
TEST_F(ScheduleEquivalence, SchedulesCombineWithSequenceParallelism) {
  expect_single_rank_losses({.name = "zbh1_pp2_tp2_sp",
                             .kind = ScheduleKind::ZeroBubbleH1,
                             .pipeline = 2,
                             .tensor = 2,
                             .sequence_parallel = true});
  expect_single_rank_losses({.name = "llama_interleaved_pp2_v2_tp2_sp",
                             .kind = ScheduleKind::Interleaved1F1B,
                             .pipeline = 2,
                             .virtual_stages = 2,
                             .tensor = 2,
                             .architecture = "llama",
                             .sequence_parallel = true});
}

// ZB-V's V: rank 0 holds the embedding and the tied head (their gradients
// summed on the rank), the last rank hands its chunk 0's output to its own
// chunk 1.
TEST_F(ScheduleEquivalence, ZeroBubbleVGivesTheSingleRankLosses) {
  const auto zbv = [](std::string name) {
    return ScheduleCase{.name = std::move(name),
                        .kind = ScheduleKind::ZeroBubbleV,
                        .pipeline = 2,
                        .virtual_stages = 2};
  };
  expect_single_rank_losses(zbv("zbv_pp2"));
  ScheduleCase pp4 = zbv("zbv_pp4");
  pp4.pipeline = 4;
  expect_single_rank_losses(pp4);
  ScheduleCase zero = zbv("zbv_pp2_dp2_zero1");
  zero.data = 2, zero.zero_stage = 1;
  expect_single_rank_losses(zero);
  ScheduleCase sequence = zbv("zbv_pp2_tp2_sp");
  sequence.tensor = 2, sequence.sequence_parallel = true;
  expect_single_rank_losses(sequence);
  ScheduleCase llama = zbv("llama_zbv_pp2_tp2");
  llama.tensor = 2, llama.architecture = "llama";
  expect_single_rank_losses(llama);
  // Evaluation runs the V too: rank 0's two chunks, the last rank's hand-off.
  ScheduleCase evaluated = zbv("zbv_pp4_eval");
  evaluated.pipeline = 4, evaluated.eval_interval = 2;
  const Run& single = run({.name = "single_gpt2_eval", .eval_interval = 2});
  const Run& mine = run(evaluated);
  ASSERT_EQ(single.validation_losses.size(), 3u);  // steps 2, 4 and the last
  ASSERT_EQ(mine.validation_losses.size(), single.validation_losses.size());
  for (size_t i = 0; i < mine.validation_losses.size(); ++i)
    EXPECT_NEAR(mine.validation_losses[i], single.validation_losses[i], kLossTolerance)
        << "evaluation " << i + 1;
}

// DualPipe-V runs ZB-V's V in its own order, whole backwards beside deferred
// weight gradients: pp 2 and 4 (m 8), with data parallelism and ZeRO-1
// (m 4 = 2p), and Llama with tensor parallelism.
TEST_F(ScheduleEquivalence, DualPipeVGivesTheSingleRankLosses) {
  const auto dualpipe = [](std::string name) {
    return ScheduleCase{.name = std::move(name),
                        .kind = ScheduleKind::DualPipeV,
                        .pipeline = 2,
                        .virtual_stages = 2};
  };
  expect_single_rank_losses(dualpipe("dualpipev_pp2"));
  ScheduleCase pp4 = dualpipe("dualpipev_pp4");
  pp4.pipeline = 4;
  expect_single_rank_losses(pp4);
  ScheduleCase zero = dualpipe("dualpipev_pp2_dp2_zero1");
  zero.data = 2, zero.zero_stage = 1;
  expect_single_rank_losses(zero);
  ScheduleCase llama = dualpipe("llama_dualpipev_pp2_tp2");
  llama.tensor = 2, llama.architecture = "llama";
  expect_single_rank_losses(llama);
}

// A checkpoint crosses between ZB-V and one rank both ways: ZB-V saves the
// tied embedding once (rank 0's head copy left out) and loads it into both
// copies. Two more steps from each step-5 checkpoint, under the other plan,
// give the losses of the single rank going on from its own.
TEST_F(ScheduleEquivalence, ZeroBubbleVCheckpointsResumeUnderOtherPlans) {
  const ScheduleCase zbv{
      .name = "zbv_pp4", .kind = ScheduleKind::ZeroBubbleV, .pipeline = 4, .virtual_stages = 2};
  const ScheduleCase single{.name = "single_gpt2"};
  ASSERT_EQ(run(zbv).losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(run(single).losses.size(), static_cast<size_t>(kSteps));
  const std::vector<double> reference = resumed(single, single);
  ASSERT_EQ(reference.size(), 2u);
  for (const auto& [from, under] : {std::pair{zbv, single}, std::pair{single, zbv}}) {
    const std::vector<double> losses = resumed(from, under);
    ASSERT_EQ(losses.size(), reference.size()) << from.name << " -> " << under.name;
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], reference[i], kLossTolerance)
          << from.name << " -> " << under.name << " step " << kSteps + 1 + i;
  }
}

// Each stage's tensor ranks write whole tensors to files of their own
// (distributed_checkpoint.h), and each rank reads back only its slice (Llama's
// linear weights straight from the file: rows, or a segment of every row;
// GPT-2's Conv1D weights, stored transposed, whole). A pp 2 x tp 2
// checkpoint goes on under one rank and back with the single rank's losses.
TEST_F(ScheduleEquivalence, TensorParallelCheckpointsCrossToOneRankAndBack) {
  for (const std::string architecture : {"llama", "gpt2"}) {
    const ScheduleCase sharded{.name = architecture + "_pp2_tp2_crossing",
                               .pipeline = 2,
                               .tensor = 2,
                               .architecture = architecture};
    const ScheduleCase single{.name = architecture + "_single_crossing",
                              .architecture = architecture};
    expect_checkpoints_cross(sharded, single);
  }
}

TEST_F(ScheduleEquivalence, LlamaUnderInterleavedAndZeroBubble) {
  expect_single_rank_losses({.name = "llama_interleaved_pp2_v2",
                             .kind = ScheduleKind::Interleaved1F1B,
                             .pipeline = 2,
                             .virtual_stages = 2,
                             .architecture = "llama"});
  expect_single_rank_losses({.name = "llama_zbh1_pp2_tp2",
                             .kind = ScheduleKind::ZeroBubbleH1,
                             .pipeline = 2,
                             .tensor = 2,
                             .architecture = "llama"});
}

// Streams written by hand, not by the planner: GPipe's order over two chunks
// on pp 2 x dp 2. With each chunk's gradient receives posted first, each
// into its own buffer, they train to the single-rank losses. Under MPI each
// 4 KiB message is above the eager limit, so it moves only once matched:
// this hung while posted receives were matched only at their waits. With
// each receive moved to its backward, into the chunk's one buffer, the
// ranks would wait on each other: refused at once on every rank, naming the
// blocked instructions.
TEST_F(ScheduleEquivalence, HandWrittenStreamsTrainOrAreRefusedButNeverHang) {
  const ScheduleCase c{.name = "gpipe_order_pp2_v2_dp2",
                       .kind = ScheduleKind::Interleaved1F1B,
                       .pipeline = 2,
                       .virtual_stages = 2,
                       .data = 2};
  test_plans::PlanSpec spec = plan_spec(c);
  const auto write_plan = [&](const std::string& name) {
    const std::string plan_file = *directory_ / (name + ".pplan");
    const std::vector<uint8_t> bytes = test_plans::build_plan(spec);
    write_file(plan_file, std::string(bytes.begin(), bytes.end()));
    return plan_file;
  };
  const std::vector<double> losses = train_plan_file(write_plan(c.name), c.name);
  const std::vector<double>& expected = run({.name = "single_gpt2"}).losses;
  ASSERT_EQ(losses.size(), expected.size());
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], expected[i], kLossTolerance) << "step " << i + 1;

  for (test_plans::StageScheduleSpec& stage : spec.schedule)
    stage.instructions = test_plans::each_gradient_received_at_its_backward(stage.instructions);
  const auto start = std::chrono::steady_clock::now();
  const CommandResult refused =
      run_command(std::string(PARAPLAN_BINARY) + " launch --plan " + write_plan(c.name + "_hangs") +
                  " -- train --data " + *directory_ / "data/train.bin" + " --steps 1");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("gpipe_order_pp2_v2_dp2_hangs.pplan: schedule: the pipeline "
                                "stages' streams wait on each other and would hang"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("stage 0 instruction 27 RecvGradient(1, chunk 1) (blocked)"),
            std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace paraplan::testing
