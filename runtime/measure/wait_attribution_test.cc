// wait_attribution_test.cc: waits told from transfers by hand-made durations:
// collectives (the last arriver's work is the transfer), pipeline transfers
// matched across neighbouring stages, a CPU rank's
// work its CPU time.
#include "runtime/measure/wait_attribution.h"

#include <gtest/gtest.h>

#include "plan_generated.h"

namespace paraplan {
namespace {

using schema::OpCode;

// Devices' records: all of an instruction's time is its work.
std::vector<std::vector<TransferRecord>> on_devices(
    std::vector<std::vector<TransferRecord>> ranks) {
  for (std::vector<TransferRecord>& records : ranks)
    for (TransferRecord& record : records) record.work = record.seconds;
  return ranks;
}

TEST(WaitAttribution, ACollectiveWaitsForItsLastMemberAndTransfersTheRest) {
  // Three calls; the group's least work 1, 2 and 5 ms.
  const TransferAndWait split =
      split_collective_calls({0.004, 0.002, 0.005}, {0.001, 0.002, 0.005}, {true, true, true});
  EXPECT_DOUBLE_EQ(split.transfer, 0.008);
  EXPECT_DOUBLE_EQ(split.wait, 0.003);
  // A call that does not synchronize (collecting deferred work) is transfer.
  const TransferAndWait pending = split_collective_calls({0.004}, {0.001}, {false});
  EXPECT_DOUBLE_EQ(pending.transfer, 0.004);
  EXPECT_DOUBLE_EQ(pending.wait, 0);
  EXPECT_THROW(split_collective_calls({0.1}, {}, {true}), std::logic_error);
}

TEST(WaitAttribution, APipelineTransferWaitsForTheNeighbourCarryingItsMessage) {
  // pp 2 x dp 1 x tp 1. Stage 0 sends activation 0 and waits 9 ms for stage 1
  // to post its receive (10 ms against 1 ms); later stage 1 sends the
  // gradient of 0 while stage 0 is still computing (stage 1 waits 5 ms).
  std::vector<std::vector<TransferRecord>> ranks(2);
  ranks[0] = {{int(OpCode::SendActivation), 0, 1, 0.010}, {int(OpCode::RecvGradient), 0, 1, 0.002}};
  ranks[1] = {{int(OpCode::RecvActivation), 0, 1, 0.001}, {int(OpCode::SendGradient), 0, 1, 0.007}};
  const std::vector<TransferAndWait> split = split_pipeline_transfers(on_devices(ranks), 2, 1, 1);
  EXPECT_DOUBLE_EQ(split[0].transfer, 0.001 + 0.002);
  EXPECT_DOUBLE_EQ(split[0].wait, 0.009);
  EXPECT_DOUBLE_EQ(split[1].transfer, 0.001 + 0.002);
  EXPECT_DOUBLE_EQ(split[1].wait, 0.005);
}

TEST(WaitAttribution, ChunksPairWithTheirNeighbourVirtualStages) {
  // pp 2, 2 chunks: virtual stages 0 (rank 0 chunk 0), 1 (rank 1 chunk 0),
  // 2 (rank 0 chunk 1), 3 (rank 1 chunk 1). Rank 1 chunk 0 sends activation 0
  // to rank 0 chunk 1 (the wrap); rank 0's chunk 0 send to rank 1 is another
  // message of the same micro-batch, matched with rank 1's chunk 0 receive.
  std::vector<std::vector<TransferRecord>> ranks(2);
  ranks[0] = {{int(OpCode::SendActivation), 0, 1, 0.004, 0},
              {int(OpCode::RecvActivation), 0, 1, 0.009, 1}};
  ranks[1] = {{int(OpCode::RecvActivation), 0, 1, 0.001, 0},
              {int(OpCode::SendActivation), 0, 1, 0.002, 0}};
  const std::vector<TransferAndWait> split =
      split_pipeline_transfers(on_devices(ranks), 2, 1, 1, 2);
  // 4 ms against its partner's 1 ms; 9 ms against the wrap's 2 ms.
  EXPECT_DOUBLE_EQ(split[0].transfer, 0.001 + 0.002);
  EXPECT_DOUBLE_EQ(split[0].wait, 0.003 + 0.007);
  EXPECT_DOUBLE_EQ(split[1].transfer, 0.001 + 0.002);
  EXPECT_DOUBLE_EQ(split[1].wait, 0);
}

TEST(WaitAttribution, TransfersMatchOnlyTheSameStepAndReplica) {
  // pp 2 x dp 2: rank r of stage 0 pairs with rank r + 2. Stage 0 sends
  // activation 1, stage 1 receives it, in steps 1 and 2 on replica 0 and in
  // step 1 on replica 1. Step 2's records and the other replica's are not
  // matched with step 1's.
  std::vector<std::vector<TransferRecord>> ranks(4);
  ranks[0] = {{int(OpCode::SendActivation), 1, 1, 0.006},
              {int(OpCode::SendActivation), 1, 2, 0.003}};
  ranks[1] = {{int(OpCode::SendActivation), 1, 1, 0.0005}};
  ranks[2] = {{int(OpCode::RecvActivation), 1, 1, 0.002},
              {int(OpCode::RecvActivation), 1, 2, 0.004}};
  ranks[3] = {{int(OpCode::RecvActivation), 1, 1, 0.008}};
  const std::vector<TransferAndWait> split = split_pipeline_transfers(on_devices(ranks), 2, 2, 1);
  EXPECT_DOUBLE_EQ(split[0].transfer, 0.002 + 0.003);
  EXPECT_DOUBLE_EQ(split[0].wait, 0.004);
  EXPECT_DOUBLE_EQ(split[1].transfer, 0.0005);
  EXPECT_DOUBLE_EQ(split[1].wait, 0);
  EXPECT_DOUBLE_EQ(split[2].transfer, 0.002 + 0.003);
  EXPECT_DOUBLE_EQ(split[2].wait, 0.001);
  EXPECT_DOUBLE_EQ(split[3].transfer, 0.0005);
  EXPECT_DOUBLE_EQ(split[3].wait, 0.0075);
}

TEST(WaitAttribution, ACpuRankCountsTheCpuTimeItGotAsTheTransfer) {
  // pp 2 on the CPU backend. Stage 0's send takes 10 ms of which it worked
  // 0.5 ms (the rest asleep between polls until stage 1 posted its receive);
  // stage 1's receive took 3 ms, working 1 ms of them (the rest waiting for
  // stage 0 to wake and hand over the message): the transfer is 0.5 ms.
  std::vector<std::vector<TransferRecord>> ranks(2);
  ranks[0] = {{int(OpCode::SendActivation), 0, 1, 0.010, 0, 0.0005}};
  ranks[1] = {{int(OpCode::RecvActivation), 0, 1, 0.003, 0, 0.001}};
  const std::vector<TransferAndWait> split = split_pipeline_transfers(ranks, 2, 1, 1);
  EXPECT_DOUBLE_EQ(split[0].transfer, 0.0005);
  EXPECT_DOUBLE_EQ(split[0].wait, 0.0095);
  EXPECT_DOUBLE_EQ(split[1].transfer, 0.0005);
  EXPECT_DOUBLE_EQ(split[1].wait, 0.0025);
}

}  // namespace
}  // namespace paraplan
