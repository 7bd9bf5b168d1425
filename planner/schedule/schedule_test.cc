// schedule_test.cc: 1F1B and GPipe generators, hand-checked streams, and the
// verifier on sound and deliberately broken schedules.
#include "planner/schedule/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace paraplan {
namespace {

using schema::OpCode;
using schema::ScheduleKind;

PipelineInstruction load(int mb) {
  return {OpCode::LoadMicroBatch, mb};
}
PipelineInstruction forward(int mb) {
  return {OpCode::Forward, mb};
}
PipelineInstruction backward(int mb) {
  return {OpCode::Backward, mb};
}
PipelineInstruction send_activation(int mb) {
  return {OpCode::SendActivation, mb};
}
PipelineInstruction recv_activation(int mb) {
  return {OpCode::RecvActivation, mb};
}
PipelineInstruction send_gradient(int mb) {
  return {OpCode::SendGradient, mb};
}
PipelineInstruction recv_gradient(int mb) {
  return {OpCode::RecvGradient, mb};
}
const PipelineInstruction kReduce{OpCode::ReduceGradients, -1};
const PipelineInstruction kStep{OpCode::OptimizerStep, -1};

std::string describe(const InstructionStream& stream) {
  std::string text;
  for (const PipelineInstruction& ins : stream) text += format_instruction(ins) + " ";
  return text;
}

int count_op(const InstructionStream& stream, OpCode op) {
  return static_cast<int>(std::count_if(stream.begin(), stream.end(),
                                        [op](const PipelineInstruction& i) { return i.op == op; }));
}

TEST(ScheduleTest, BothGeneratorsVerifyForEveryShape) {
  for (ScheduleKind kind : {ScheduleKind::OneForwardOneBackward, ScheduleKind::GPipe}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        const PipelineSchedule schedule = generate_schedule(kind, p, m);
        ASSERT_EQ(schedule.stages.size(), static_cast<size_t>(p));
        EXPECT_EQ(verify_schedule(schedule), std::nullopt)
            << schema::EnumNameScheduleKind(kind) << " p=" << p << " m=" << m << ": "
            << verify_schedule(schedule).value_or("");
        for (int s = 0; s < p; ++s) {
          const InstructionStream& stream = schedule.stages[s];
          EXPECT_EQ(count_op(stream, OpCode::Forward), m);
          EXPECT_EQ(count_op(stream, OpCode::Backward), m);
          EXPECT_EQ(count_op(stream, OpCode::LoadMicroBatch), s == 0 || s == p - 1 ? m : 0);
          ASSERT_GE(stream.size(), 2u);
          EXPECT_EQ(stream[stream.size() - 2], kReduce);
          EXPECT_EQ(stream.back(), kStep);
        }
      }
    }
  }
}

TEST(ScheduleTest, OneForwardOneBackwardTwoStagesThreeMicroBatches) {
  const PipelineSchedule schedule = generate_one_forward_one_backward(2, 3);
  const InstructionStream stage0 = {
      load(0),          forward(0),  send_activation(0),  // warm-up
      load(1),          forward(1),  send_activation(1), recv_gradient(0),
      backward(0),  // steady
      load(2),          forward(2),  send_activation(2), recv_gradient(1),
      backward(1),                    //
      recv_gradient(2), backward(2),  // cool-down
      kReduce,          kStep};
  const InstructionStream stage1 = {recv_activation(0),
                                    load(0),
                                    forward(0),
                                    backward(0),
                                    send_gradient(0),
                                    recv_activation(1),
                                    load(1),
                                    forward(1),
                                    backward(1),
                                    send_gradient(1),
                                    recv_activation(2),
                                    load(2),
                                    forward(2),
                                    backward(2),
                                    send_gradient(2),
                                    kReduce,
                                    kStep};
  EXPECT_EQ(schedule.stages[0], stage0) << describe(schedule.stages[0]);
  EXPECT_EQ(schedule.stages[1], stage1) << describe(schedule.stages[1]);
}

TEST(ScheduleTest, OneForwardOneBackwardFourStagesEightMicroBatches) {
  const PipelineSchedule schedule = generate_one_forward_one_backward(4, 8);
  // Stage 0: 3 warm-up forwards, 5 steady 1F1B steps, 3 cool-down backwards.
  const InstructionStream stage0 = {load(0),
                                    forward(0),
                                    send_activation(0),
                                    load(1),
                                    forward(1),
                                    send_activation(1),
                                    load(2),
                                    forward(2),
                                    send_activation(2),
                                    load(3),
                                    forward(3),
                                    send_activation(3),
                                    recv_gradient(0),
                                    backward(0),
                                    load(4),
                                    forward(4),
                                    send_activation(4),
                                    recv_gradient(1),
                                    backward(1),
                                    load(5),
                                    forward(5),
                                    send_activation(5),
                                    recv_gradient(2),
                                    backward(2),
                                    load(6),
                                    forward(6),
                                    send_activation(6),
                                    recv_gradient(3),
                                    backward(3),
                                    load(7),
                                    forward(7),
                                    send_activation(7),
                                    recv_gradient(4),
                                    backward(4),
                                    recv_gradient(5),
                                    backward(5),
                                    recv_gradient(6),
                                    backward(6),
                                    recv_gradient(7),
                                    backward(7),
                                    kReduce,
                                    kStep};
  // Stage 3 (last): no warm-up; each backward's gradient comes from its own loss.
  InstructionStream stage3 = {recv_activation(0)};
  for (int mb = 0; mb < 8; ++mb) {
    for (const PipelineInstruction& ins : {load(mb), forward(mb), backward(mb)})
      stage3.push_back(ins);
    stage3.push_back(send_gradient(mb));
    if (mb < 7) stage3.push_back(recv_activation(mb + 1));
  }
  stage3.push_back(kReduce);
  stage3.push_back(kStep);
  EXPECT_EQ(schedule.stages[0], stage0) << describe(schedule.stages[0]);
  EXPECT_EQ(schedule.stages[3], stage3) << describe(schedule.stages[3]);
  // A middle stage: every message once per micro-batch, each receive right
  // before its consumer.
  for (const OpCode op :
       {OpCode::SendActivation, OpCode::RecvActivation, OpCode::SendGradient, OpCode::RecvGradient})
    EXPECT_EQ(count_op(schedule.stages[2], op), 8) << schema::EnumNameOpCode(op);
  EXPECT_EQ(std::vector<int>(max_slots_held(schedule, 2)), std::vector<int>{2});
}

TEST(ScheduleTest, FewerMicroBatchesThanStagesIsAllWarmUp) {
  const PipelineSchedule schedule = generate_one_forward_one_backward(4, 2);
  // Stage 0 warm-up = min(3, 2) = 2: no steady state.
  const InstructionStream stage0 = {load(0),          forward(0),  send_activation(0),
                                    load(1),          forward(1),  send_activation(1),
                                    recv_gradient(0), backward(0), recv_gradient(1),
                                    backward(1),      kReduce,     kStep};
  EXPECT_EQ(schedule.stages[0], stage0) << describe(schedule.stages[0]);
}

TEST(ScheduleTest, GPipeRunsAllForwardsThenAllBackwards) {
  const PipelineSchedule schedule = generate_gpipe(2, 2);
  const InstructionStream stage0 = {load(0),          forward(0),  send_activation(0),
                                    load(1),          forward(1),  send_activation(1),
                                    recv_gradient(0), backward(0), recv_gradient(1),
                                    backward(1),      kReduce,     kStep};
  const InstructionStream stage1 = {
      recv_activation(0), load(0),          forward(0),  recv_activation(1), load(1), forward(1),
      backward(0),        send_gradient(0), backward(1), send_gradient(1),   kReduce, kStep};
  EXPECT_EQ(schedule.kind, ScheduleKind::GPipe);
  EXPECT_EQ(schedule.stages[0], stage0) << describe(schedule.stages[0]);
  EXPECT_EQ(schedule.stages[1], stage1) << describe(schedule.stages[1]);
}

TEST(ScheduleTest, SingleStageHasNoCommunication) {
  const PipelineSchedule schedule = generate_one_forward_one_backward(1, 2);
  const InstructionStream stage0 = {load(0),    forward(0),  backward(0), load(1),
                                    forward(1), backward(1), kReduce,     kStep};
  EXPECT_EQ(schedule.stages[0], stage0) << describe(schedule.stages[0]);
}

TEST(ScheduleTest, RejectsEmptyShapes) {
  EXPECT_THROW(generate_one_forward_one_backward(0, 4), std::invalid_argument);
  EXPECT_THROW(generate_gpipe(2, 0), std::invalid_argument);
}

TEST(ScheduleVerifierTest, ABackwardBeforeItsActivationIsSentDeadlocks) {
  PipelineSchedule schedule = generate_gpipe(2, 1);
  // Stage 0 now waits for a gradient before sending the activation that produces it.
  InstructionStream& stage0 = schedule.stages[0];
  ASSERT_EQ(stage0[2], send_activation(0));
  stage0.erase(stage0.begin() + 2);
  stage0.insert(stage0.begin() + 4, send_activation(0));
  const auto problem = verify_schedule(schedule);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("deadlock"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("stage 0 instruction 3 Backward(0)"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("stage 1 instruction 2 Forward(0)"), std::string::npos) << *problem;
}

// Posted transfers never wait: a neighbour's send and receive may come in
// either order (under the retired rendezvous model, both sides receiving
// first, or both sending first, deadlocked).
TEST(ScheduleVerifierTest, SendsAndReceivesRunInEitherOrder) {
  PipelineSchedule receive_first = generate_one_forward_one_backward(2, 3);
  std::swap(receive_first.stages[0][5], receive_first.stages[0][6]);
  ASSERT_EQ(receive_first.stages[0][5], recv_gradient(0));
  std::swap(receive_first.stages[1][4], receive_first.stages[1][5]);
  ASSERT_EQ(receive_first.stages[1][4], recv_activation(1));
  EXPECT_EQ(verify_schedule(receive_first), std::nullopt)
      << verify_schedule(receive_first).value_or("");
}

TEST(ScheduleVerifierTest, DroppedReceiveIsCaught) {
  PipelineSchedule schedule = generate_gpipe(2, 2);
  // Drop stage 1's RecvActivation(1).
  InstructionStream& stage1 = schedule.stages[1];
  stage1.erase(std::find(stage1.begin(), stage1.end(), recv_activation(1)));
  const auto problem = verify_schedule(schedule);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("stage 1: micro-batch 1 is never received from the previous stage; "
                          "stage 1 must recv_activation once before each forward"),
            std::string::npos)
      << *problem;

  PipelineSchedule no_gradient = generate_gpipe(2, 1);
  InstructionStream& stage0 = no_gradient.stages[0];
  stage0.erase(std::find(stage0.begin(), stage0.end(), recv_gradient(0)));
  EXPECT_NE(verify_schedule(no_gradient)
                .value_or("")
                .find("stage 0: micro-batch 0 is never given its gradient by the next stage"),
            std::string::npos)
      << verify_schedule(no_gradient).value_or("");
}

TEST(ScheduleVerifierTest, DroppedSendLeavesUnmatchedReceive) {
  PipelineSchedule schedule = generate_gpipe(2, 1);
  // Stage 1 never sends the gradient back; it finishes while stage 0 waits for it.
  InstructionStream& stage1 = schedule.stages[1];
  stage1.erase(std::find(stage1.begin(), stage1.end(), send_gradient(0)));
  const auto problem = verify_schedule(schedule);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("stage 1: micro-batch 0 is never sent back to the previous stage"),
            std::string::npos)
      << *problem;
}

TEST(ScheduleVerifierTest, DuplicatedSendIsCaught) {
  PipelineSchedule schedule = generate_gpipe(2, 1);
  schedule.stages[0].insert(schedule.stages[0].begin() + 3, send_activation(0));
  const auto problem = verify_schedule(schedule);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("stage 0: micro-batch 0 is sent to the next stage more than once"),
            std::string::npos)
      << *problem;
}

TEST(ScheduleVerifierTest, MessagesOutOfOrderAreCaught) {
  PipelineSchedule schedule = generate_gpipe(2, 2);
  // Stage 1 posts micro-batch 1's receive first, each before its forward:
  // sound on its own, but posting order would pair it with activation 0.
  InstructionStream& stage1 = schedule.stages[1];
  stage1.erase(std::find(stage1.begin(), stage1.end(), recv_activation(1)));
  stage1.insert(stage1.begin(), recv_activation(1));
  const auto problem = verify_schedule(schedule);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("messages matched out of order: pipeline rank 0's instruction 2 "
                          "(send_activation) sends the activation of virtual stage 0, micro-batch "
                          "0 as its message 1 to rank 1, but pipeline rank 1's instruction 0 "
                          "(recv_activation) receives the activation of virtual stage 0, "
                          "micro-batch 1 there"),
            std::string::npos)
      << *problem;
}

TEST(ScheduleVerifierTest, DuplicatedBackwardIsCaught) {
  PipelineSchedule schedule = generate_one_forward_one_backward(2, 3);
  InstructionStream& stage1 = schedule.stages[1];
  auto it = std::find(stage1.begin(), stage1.end(), backward(1));
  stage1.insert(it + 1, backward(1));
  const auto problem = verify_schedule(schedule);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("stage 1"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("backwarded more than once"), std::string::npos) << *problem;
}

TEST(ScheduleVerifierTest, MissingStepAndMisplacedOpsAreCaught) {
  PipelineSchedule no_step = generate_one_forward_one_backward(1, 2);
  no_step.stages[0].pop_back();  // drop OptimizerStep
  EXPECT_NE(verify_schedule(no_step).value_or("").find(
                "stage 0: 0 optimizer_step instructions; each stage needs exactly one"),
            std::string::npos)
      << verify_schedule(no_step).value_or("");

  PipelineSchedule early_reduce = generate_one_forward_one_backward(1, 2);
  InstructionStream& stream = early_reduce.stages[0];
  std::rotate(stream.begin(), stream.end() - 2, stream.end() - 1);  // ReduceGradients first
  EXPECT_NE(verify_schedule(early_reduce)
                .value_or("")
                .find("stage 0 instruction 0 ReduceGradients: reduce_gradients comes before the "
                      "backward at instructions[6]"),
            std::string::npos)
      << verify_schedule(early_reduce).value_or("");

  PipelineSchedule middle_load = generate_gpipe(3, 1);
  middle_load.stages[1].insert(middle_load.stages[1].begin() + 1, load(0));
  EXPECT_NE(verify_schedule(middle_load)
                .value_or("")
                .find("stage 1 instruction 1 LoadMicroBatch(0): load_micro_batch on stage 1, "
                      "which holds neither the embedding nor the head"),
            std::string::npos)
      << verify_schedule(middle_load).value_or("");

  PipelineSchedule no_load = generate_gpipe(1, 1);
  no_load.stages[0].erase(no_load.stages[0].begin());
  EXPECT_NE(verify_schedule(no_load).value_or("").find("stage 0: micro-batch 0 is never loaded"),
            std::string::npos)
      << verify_schedule(no_load).value_or("");
}

TEST(ScheduleVerifierTest, FormatsInstructions) {
  EXPECT_EQ(format_instruction(send_activation(3)), "SendActivation(3)");
  EXPECT_EQ(format_instruction(forward(2)), "Forward(2)");
  EXPECT_EQ(format_instruction(kStep), "OptimizerStep");
}

// The search asks for a shape again after dozens of others (its settings go
// in the order of their bounds): the shape is still the one made first, and
// equal to a freshly generated one.
TEST(ScheduleTest, SharedSchedulesOutliveManyOtherShapes) {
  const auto first = shared_schedule(schema::ScheduleKind::Interleaved1F1B, 4, 9, 2);
  for (int p = 2; p < 40; ++p) shared_schedule(schema::ScheduleKind::OneForwardOneBackward, p, p);
  const auto again = shared_schedule(schema::ScheduleKind::Interleaved1F1B, 4, 9, 2);
  EXPECT_EQ(first.get(), again.get());
  const PipelineSchedule fresh = generate_schedule(schema::ScheduleKind::Interleaved1F1B, 4, 9, 2);
  ASSERT_EQ(again->stages.size(), fresh.stages.size());
  for (size_t r = 0; r < fresh.stages.size(); ++r) EXPECT_EQ(again->stages[r], fresh.stages[r]);
}

}  // namespace
}  // namespace paraplan
