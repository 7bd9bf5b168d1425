// stream_check_test.cc: the stream checker's three questions on plans'
// streams written by hand (schema/plan_test_support.h): what a transfer
// instruction moves, the links' order, and the streams played together.
// The planner's generated streams are checked through verify_schedule
// (planner/schedule/), the validator's wording in plan_validate_*_test.
#include "schema/stream_check.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

using schema::OpCode;
using test_plans::instruction;

std::vector<StreamOps> gpipe_streams(int p, int m) {
  std::vector<StreamOps> streams;
  for (int s = 0; s < p; ++s) {
    const std::vector<schema::Instruction> stream =
        test_plans::gpipe_stream(s, p, m, s == 0 || s == p - 1);
    StreamOps ops;
    for (const schema::Instruction& ins : stream)
      ops.push_back({ins.op(), ins.micro_batch(), ins.chunk()});
    streams.push_back(ops);
  }
  return streams;
}

TEST(StreamCheck, AMessageIsNamedByItsVirtualStages) {
  // Interleaved, 2 ranks x 2 chunks: rank 1's chunk 0 is virtual stage 1.
  const PipelineLayout round_robin(2, 2, false);
  const auto sent = message_of(round_robin, 1, {OpCode::SendActivation, 3, 0});
  ASSERT_TRUE(sent.has_value());
  EXPECT_TRUE(sent->activation && sent->is_send);
  EXPECT_EQ(sent->from_virtual_stage, 1);
  EXPECT_EQ(sent->to_virtual_stage, 2);
  EXPECT_FALSE(sent->local);
  const auto gradient = message_of(round_robin, 0, {OpCode::RecvGradient, 2, 1});
  ASSERT_TRUE(gradient.has_value());
  EXPECT_EQ(gradient->from_virtual_stage, 3);
  EXPECT_EQ(gradient->to_virtual_stage, 2);
  // The V's turn on the last rank is a hand-off; virtual stage 0 receives nothing.
  const PipelineLayout v(2, 2, true);
  EXPECT_TRUE(message_of(v, 1, {OpCode::SendActivation, 0, 0})->local);
  EXPECT_FALSE(message_of(v, 0, {OpCode::RecvActivation, 0, 0}).has_value());
  EXPECT_FALSE(message_of(v, 0, {OpCode::Forward, 0, 0}).has_value());
}

TEST(StreamCheck, SoundStreamsPassAllThreeQuestions) {
  for (int p : {1, 2, 4}) {
    const PipelineLayout layout(p, 1, false);
    const std::vector<StreamOps> streams = gpipe_streams(p, 3);
    for (int s = 0; s < p; ++s) EXPECT_TRUE(check_stream(layout, s, 3, streams[s]).empty());
    EXPECT_EQ(check_link_order(layout, streams), std::nullopt);
    EXPECT_EQ(check_streams_finish(layout, streams), std::nullopt);
  }
}

TEST(StreamCheck, ALinkPairingTheWrongMessagesIsNamed) {
  const PipelineLayout layout(2, 1, false);
  std::vector<StreamOps> streams = gpipe_streams(2, 2);
  // Rank 1 posts micro-batch 1's receive first.
  StreamOps& receiver = streams[1];
  receiver.erase(receiver.begin() + 3);  // RecvActivation(1)
  receiver.insert(receiver.begin(), {OpCode::RecvActivation, 1, 0});
  EXPECT_EQ(check_link_order(layout, streams),
            "pipeline rank 0's instruction 2 (send_activation) sends the activation of virtual "
            "stage 0, micro-batch 0 as its message 1 to rank 1, but pipeline rank 1's "
            "instruction 0 (recv_activation) receives the activation of virtual stage 0, "
            "micro-batch 1 there");
  // A message one side never posts.
  std::vector<StreamOps> dropped = gpipe_streams(2, 2);
  dropped[1].erase(dropped[1].begin() + 3);  // RecvActivation(1)
  EXPECT_EQ(check_link_order(layout, dropped),
            "pipeline rank 0 sends 2 message(s) to rank 1, which receives 1 from it");
}

TEST(StreamCheck, StreamsThatWaitForEachOtherDeadlockAtTheirBlockedInstructions) {
  const PipelineLayout layout(2, 1, false);
  std::vector<StreamOps> streams = gpipe_streams(2, 1);
  // Rank 0 sends its activation only after the backward that needs its gradient.
  StreamOps& first = streams[0];
  ASSERT_EQ(first[2], (StreamOp{OpCode::SendActivation, 0, 0}));
  first.erase(first.begin() + 2);
  first.insert(first.begin() + 4, {OpCode::SendActivation, 0, 0});
  EXPECT_EQ(check_streams_finish(layout, streams),
            "deadlock:\n  stage 0 instruction 3 Backward(0) (blocked)\n  stage 1 instruction 2 "
            "Forward(0) (blocked)");
}

}  // namespace
}  // namespace paraplan
