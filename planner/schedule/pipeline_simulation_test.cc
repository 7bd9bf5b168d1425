// pipeline_simulation_test.cc: steps played out by hand: a pipeline on
// devices of its own (the closed form), every rank sharing the cores all the
// time, a pipeline whose stages share one core only while both compute (and
// copy their messages), and stages that keep their cores.
#include "planner/schedule/pipeline_simulation.h"

#include <gtest/gtest.h>

namespace paraplan {
namespace {

SimulatedStageInput stage(double forward, double backward) {
  return {.forward_work = forward,
          .backward_work = backward,
          .reduction_work = 0.5,
          .optimizer_work = 0.25};
}

TEST(PipelineSimulation, OwnDevicesGiveTheOneForwardOneBackwardClosedForm) {
  // p 2, m 4, forward 1, backward 2 on every stage: (m + p - 1)(f + b), then
  // the first stage's reduction and the optimizer step.
  const PipelineSchedule schedule = generate_one_forward_one_backward(2, 4);
  const SimulatedStep step = simulate_step(schedule, {stage(1, 2), stage(1, 2)}, 1, 0);
  EXPECT_DOUBLE_EQ(step.step_seconds, 5 * 3 + 0.5 + 0.25);
  EXPECT_DOUBLE_EQ(step.stages[0].forward_wall, 1);
  EXPECT_DOUBLE_EQ(step.stages[1].backward_wall, 2);
  // Each stage is busy 4 x 3 + 0.5 + 0.25: the rest is its bubble.
  EXPECT_DOUBLE_EQ(step.stages[0].waiting_seconds, 3);
  EXPECT_DOUBLE_EQ(step.stages[1].waiting_seconds, 3);
}

TEST(PipelineSimulation, GroupWaitsAreWallTimeAfterTheCollectivesAndCountAsWaiting) {
  // One stage of 2 ranks on 1 core, m 2: compute (1 forward, 2 backward) and
  // the collectives (0.25 each way) at half speed, the group waits (0.5
  // after each forward, 0.25 after each backward) as they are.
  SimulatedStageInput in = stage(1, 2);
  in.reduction_work = in.optimizer_work = 0;
  in.forward_collectives = in.backward_collectives = 0.25;
  in.forward_group_waits = 0.5, in.backward_group_waits = 0.25;
  const SimulatedStep step = simulate_step(generate_one_forward_one_backward(1, 2), {in}, 2, 1);
  EXPECT_NEAR(step.step_seconds, 2 * (3.5 / 0.5 + 0.75), 1e-12);
  EXPECT_NEAR(step.stages[0].forward_wall, 2, 1e-12);  // the compute alone
  // Busy 2 x 3.5 of work: the rest, the core's sharing and the group waits, is waiting.
  EXPECT_NEAR(step.stages[0].waiting_seconds, 2 * (3.5 + 0.75), 1e-12);
}

TEST(PipelineSimulation, RanksAlwaysComputingTogetherGetTheirShareOfTheCores) {
  // One stage of 4 ranks on 2 cores: everything, the tensor-parallel
  // collectives (0.25 forward, 0.5 backward) and the reduction included,
  // works at half speed.
  const PipelineSchedule schedule = generate_one_forward_one_backward(1, 2);
  SimulatedStageInput input = stage(1, 2);
  input.forward_collectives = 0.25;
  input.backward_collectives = 0.5;
  const SimulatedStep step = simulate_step(schedule, {input}, 4, 2);
  EXPECT_DOUBLE_EQ(step.stages[0].forward_wall, 2);
  EXPECT_DOUBLE_EQ(step.stages[0].backward_wall, 4);
  EXPECT_DOUBLE_EQ(step.stages[0].optimizer_wall, 0.5);
  EXPECT_DOUBLE_EQ(step.step_seconds, 2 * (2 * 3.75 + 0.5 + 0.25));
  // Busy with 2 x 3.75 of work, 0.5 reducing and 0.25 of optimizer work:
  // the rest it waits for a core.
  EXPECT_DOUBLE_EQ(step.stages[0].waiting_seconds, 16.5 - (7.5 + 0.5 + 0.25));
}

// p 2, m 1, forward 1 and backward 2 on each stage, 0.1 of transfer per
// message, the first stage's reduction 0.5, on `cores` (0: a device each).
SimulatedStep two_stages_one_micro_batch(double cores) {
  SimulatedStageInput first = stage(1, 2), second = stage(1, 2);
  first.p2p_seconds = second.p2p_seconds = 0.1;
  second.reduction_work = 0;
  return simulate_step(generate_one_forward_one_backward(2, 1), {first, second}, 1, cores);
}

TEST(PipelineSimulation, AStageAloneComputesAtFullSpeedAndTransfersAreBothEndsCopies) {
  // p 2, m 1, one core: the first stage's forward, then the second's forward
  // and backward, then the first's backward run alone at full speed; both
  // optimizer steps together at half. A transfer of 0.1 per message: on the
  // shared core each end copies the message (0.1 of work each): the sender
  // as it posts the send, the receiver after the compute it fed.
  const SimulatedStep step = two_stages_one_micro_batch(1);
  // F0 [0, 1]; act 0: stage 0 copies it [1, 1.2] at half speed beside F0',
  // which goes on alone [1.2, 2.1], then its copy [2.1, 2.2]; B0' [2.2,
  // 4.2]; grad 0: stage 1 copies it [4.2, 4.4] beside B0, which goes on
  // alone [4.4, 6.3] (2.1 of wall), then its copy [6.3, 6.4]; reduction
  // [6.4, 6.9], both optimizers [6.9, 7.4].
  EXPECT_DOUBLE_EQ(step.step_seconds, 7.4);
  EXPECT_DOUBLE_EQ(step.stages[0].forward_wall, 1);
  EXPECT_DOUBLE_EQ(step.stages[0].backward_wall, 2.1);
  EXPECT_DOUBLE_EQ(step.stages[0].optimizer_wall, 0.5);
  // Each stage copied two messages (one sent, one received).
  EXPECT_NEAR(step.stages[0].transfer_seconds, 0.2, 1e-12);
  EXPECT_NEAR(step.stages[1].transfer_seconds, 0.2, 1e-12);
  // Stage 0 is busy with 1 + 2 of work, its copies (0.2), its reduction
  // (0.5) and 0.25 of optimizer work: the rest it waits (for stage 1, then
  // for the core while copying and during the optimizer step).
  EXPECT_NEAR(step.stages[0].waiting_seconds, 7.4 - (3 + 0.2 + 0.5 + 0.25), 1e-12);
  EXPECT_NEAR(step.stages[1].waiting_seconds, 7.4 - (3 + 0.2 + 0.25), 1e-12);
}

TEST(PipelineSimulation, OnDevicesATransferIsItsSecondsAfterTheLaterPost) {
  // As above on devices of their own: a message arrives 0.1 after both ends
  // are posted and costs neither device any work.
  const SimulatedStep step = two_stages_one_micro_batch(0);
  // F0 [0, 1], act 0 [1, 1.1], F0' [1.1, 2.1], B0' [2.1, 4.1], grad 0 [4.1,
  // 4.2], B0 [4.2, 6.2], reduction [6.2, 6.7], optimizers [6.7, 6.95].
  EXPECT_DOUBLE_EQ(step.step_seconds, 6.95);
  EXPECT_NEAR(step.stages[0].transfer_seconds, 0.1, 1e-12);  // its one send
  EXPECT_NEAR(step.stages[0].waiting_seconds, 6.95 - (3 + 0.1 + 0.5 + 0.25), 1e-12);
}

TEST(PipelineSimulation, ARankKeepsItsCoreSoTwoStagesOnOneCoreShareItWhileTheOtherCoreIsFree) {
  // p 3, m 1, one rank per stage on 2 cores: stages 0 and 2 on core 0,
  // stage 1 on core 1. The micro-batch runs stage after stage at full speed
  // (F0 [0, 1], act copies [1, 1.1], F1 [1.1, 2.1], [2.1, 2.2], F2 [2.2,
  // 3.2], B2 [3.2, 5.2], [5.2, 5.3], B1 [5.3, 7.3], [7.3, 7.4], B0 [7.4,
  // 9.4], stage 0's reduction [9.4, 9.9]); then the three optimizer steps
  // (0.25 each): stage 1 alone on its core [9.9, 10.15], stages 0 and 2 at
  // half speed on theirs [9.9, 10.4]. (Sharing both cores among all three,
  // each at 2/3, would end the step at 10.275.)
  SimulatedStageInput first = stage(1, 2), middle = stage(1, 2), last = stage(1, 2);
  first.p2p_seconds = middle.p2p_seconds = last.p2p_seconds = 0.1;
  middle.reduction_work = last.reduction_work = 0;
  const SimulatedStep step =
      simulate_step(generate_one_forward_one_backward(3, 1), {first, middle, last}, 1, 2);
  EXPECT_NEAR(step.step_seconds, 10.4, 1e-12);
  EXPECT_NEAR(step.stages[0].optimizer_wall, 0.5, 1e-12);
  EXPECT_NEAR(step.stages[1].optimizer_wall, 0.25, 1e-12);
  EXPECT_NEAR(step.stages[2].optimizer_wall, 0.5, 1e-12);
  EXPECT_NEAR(step.stages[1].forward_wall, 1, 1e-12);
}

}  // namespace
}  // namespace paraplan
