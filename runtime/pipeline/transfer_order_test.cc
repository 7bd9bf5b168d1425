// transfer_order_test.cc: plans whose pipeline transfers pair the same by
// posting order as by tag pass; hand-edited ones where they would not
// (micro-batches relabelled on one side, chunks reordered between two ranks
// of an interleaved plan) are refused naming the ranks, instructions and
// messages; so are streams that pair but wait on each other, naming each
// stage's blocked instruction.
#include "runtime/pipeline/transfer_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

using schema::Instruction;
using schema::OpCode;
using schema::ScheduleKind;

std::string refusal(const test_plans::PlanSpec& spec) {
  const LoadedPlan loaded = load_plan_from_bytes("edited.pplan", test_plans::build_plan(spec));
  try {
    check_transfer_order(*loaded.plan().schedule(), loaded.path());
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

size_t find(const std::vector<Instruction>& stream, OpCode op, int chunk, int micro_batch) {
  for (size_t i = 0; i < stream.size(); ++i)
    if (stream[i].op() == op && stream[i].chunk() == chunk &&
        stream[i].micro_batch() == micro_batch)
      return i;
  throw std::logic_error("no such instruction in the test stream");
}

TEST(TransferOrder, PlansOfEveryScheduleKindPass) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneForwardOneBackward})
    for (int pp : {2, 4}) EXPECT_EQ(refusal(test_plans::make_plan_spec(pp, 1, 1, 8, 8, kind)), "");
  for (bool split : {false, true})
    EXPECT_EQ(refusal(test_plans::make_chunked_plan_spec(2, 2, 8, 4, ScheduleKind::Interleaved1F1B,
                                                         split)),
              "");
}

TEST(TransferOrder, MicroBatchesRelabelledOnOneSideAreRefused) {
  // Stage 1 takes micro-batches 1 and 0 in the other order: each of its
  // streams is valid, but what stage 0 sends first it would take for
  // micro-batch 1 (with micro-batch 1's targets) under every transport.
  test_plans::PlanSpec spec = test_plans::make_plan_spec(2, 1, 1, 4, 4, ScheduleKind::GPipe);
  for (Instruction& instruction : spec.schedule[1].instructions) {
    const int m = instruction.micro_batch();
    if (m == 0 || m == 1)
      instruction = Instruction(instruction.op(), instruction.chunk(), instruction.unit(), 1 - m,
                                instruction.peer_micro_batch());
  }
  const std::string error = refusal(spec);
  EXPECT_NE(error.find("edited.pplan: schedule: pipeline rank 0's instruction 2 (send_activation) "
                       "sends the activation of virtual stage 0, micro-batch 0 as its message 1 "
                       "to rank 1, but pipeline rank 1's instruction "),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("(recv_activation) receives the activation of virtual stage 0, "
                       "micro-batch 1 there"),
            std::string::npos)
      << error;
}

TEST(TransferOrder, ChunksReorderedBetweenTheSameTwoRanksAreRefused) {
  // Rank 0 forwards chunk 1's micro-batch 0 before chunk 0's micro-batch 3:
  // valid, and under MPI each chunk's link has its own tag, so it would run;
  // NCCL has no tags and would hand chunk 1's activation to chunk 0's receive.
  test_plans::PlanSpec spec =
      test_plans::make_chunked_plan_spec(2, 2, 8, 4, ScheduleKind::Interleaved1F1B, false);
  std::vector<Instruction>& stream = spec.schedule[0].instructions;
  const size_t chunk0 = find(stream, OpCode::LoadMicroBatch, 0, 3),
               chunk1 = find(stream, OpCode::RecvActivation, 1, 0);
  ASSERT_EQ(chunk1, chunk0 + 3);  // load, forward, send; then receive, forward, send
  std::rotate(stream.begin() + chunk0, stream.begin() + chunk1, stream.begin() + chunk1 + 3);
  const std::string error = refusal(spec);
  EXPECT_NE(error.find("sends the activation of virtual stage 2, micro-batch 0 as its message 4 "
                       "to rank 1"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("Make it again with `paraplan plan`"), std::string::npos) << error;
}

TEST(TransferOrder, StreamsThatWaitOnEachOtherAreRefused) {
  // Two ranks of two chunks each, every forward first, then each chunk's
  // backwards in order: each RecvGradient into a chunk's one output-gradient
  // buffer waits for the chunk's last input gradient to be received. Rank 0
  // waits for rank 1 to take virtual stage 2's first input gradient, which
  // rank 1 receives only after all of virtual stage 3's backwards; those
  // wait for rank 0 to take their input gradients. It hung under MPI once
  // messages passed the eager limit (4 ranks, dp 2).
  test_plans::PlanSpec spec =
      test_plans::make_chunked_plan_spec(2, 2, 8, 4, ScheduleKind::Interleaved1F1B, false);
  EXPECT_EQ(refusal(spec), "");  // each chunk's receives posted first, into their own buffers
  for (test_plans::StageScheduleSpec& stage : spec.schedule)
    stage.instructions = test_plans::each_gradient_received_at_its_backward(stage.instructions);
  const std::string error = refusal(spec);
  EXPECT_NE(error.find("edited.pplan: schedule: the pipeline stages' streams wait on each other "
                       "and would hang"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("stage 0 instruction 27 RecvGradient(1, chunk 1) (blocked); stage 1 "
                       "instruction 28 Backward(2, chunk 1) (blocked)."),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("Make it again with `paraplan plan`"), std::string::npos) << error;
}

}  // namespace
}  // namespace paraplan
