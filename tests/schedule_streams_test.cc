// schedule_streams_test.cc: the planner's streams of every schedule kind
// (1F1B, GPipe, interleaved 1F1B with two chunks per rank, ZB-H1, ZB-V,
// DualPipe-V, at its 2p micro-batches) run by the executor on every pipeline
// rank under mpirun (2 and 4 ranks): one step
// gives bitwise the whole model's gradients and loss, and each offset
// reported final keeps its gradients (runtime/pipeline/executor_test_support.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/schedule/schedule.h"
#include "runtime/pipeline/executor_test_support.h"

namespace paraplan::testing {
namespace {

void expect_schedule_step(schema::ScheduleKind kind, int virtual_stages, const std::string& what,
                          int micro_batches = kMicroBatches) {
  const PipelineSchedule schedule =
      generate_schedule(kind, world_size(), micro_batches, virtual_stages);
  ASSERT_FALSE(verify_schedule(schedule).has_value()) << what;
  std::vector<schema::Instruction> stream;
  for (const PipelineInstruction& ins : schedule.stages[world_rank()])
    stream.emplace_back(ins.op, static_cast<uint8_t>(ins.chunk), ins.micro_batch,
                        ins.peer_micro_batch);
  expect_whole_model_step(stream, virtual_stages, what, schedule.transfers, kind, micro_batches);
}

TEST(ScheduleStreams, EveryKindGivesTheWholeModelsGradientsBitwise) {
  expect_schedule_step(schema::ScheduleKind::OneForwardOneBackward, 1, "1f1b");
  expect_schedule_step(schema::ScheduleKind::GPipe, 1, "gpipe");
  expect_schedule_step(schema::ScheduleKind::Interleaved1F1B, 2, "interleaved v2");
  expect_schedule_step(schema::ScheduleKind::ZeroBubbleH1, 1, "zb-h1");
  expect_schedule_step(schema::ScheduleKind::ZeroBubbleV, 2, "zb-v");
  // DualPipe-V runs 2p micro-batches or more: 8 on 4 ranks.
  expect_schedule_step(schema::ScheduleKind::DualPipeV, 2, "dualpipe-v", 2 * world_size());
}

}  // namespace
}  // namespace paraplan::testing
