// schedule_streams_test.cc: the planner's streams of every schedule kind
// (1F1B, GPipe, interleaved 1F1B with two chunks per rank, ZB-H1, ZB-V,
// DualPipe-V, at its 2p micro-batches) run by the executor on every pipeline
// rank under mpirun (2 and 4 ranks): one step
// gives bitwise the whole model's gradients and loss, and each offset
// reported final keeps its gradients (runtime/pipeline/executor_test_support.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/schedule/schedule.h"
#include "planner/schedule/schedule_kinds.h"
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
    stream.emplace_back(ins.op, static_cast<uint8_t>(ins.chunk), 0, ins.micro_batch, -1);
  expect_whole_model_step(stream, virtual_stages, what, kind, micro_batches);
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

// The memory model's micro-batch slots per rank (the catalogue's slots_held,
// read from the generated stream) are what the runtime allocates for the same
// stream (ScheduleExecutor::buffers_needed, chunks summed): exactly for
// every kind but interleaved, at most for it, whose model takes the largest
// rank's. On a grid of p and m; every rank of the job checks it.
TEST(ScheduleStreams, TheMemoryModelsSlotsAreWhatTheRuntimeAllocates) {
  int checked = 0;
  for (const ScheduleKindRow& row : schedule_catalogue()) {
    const int v = row.traits.chunked() ? 2 : 1;
    for (int p = 2; p <= 6; ++p) {
      for (int m = std::max(1, row.fewest_micro_batches_per_stage * p); m <= 3 * p; ++m) {
        const PipelineSchedule schedule = generate_schedule(row.traits.kind, p, m, v);
        test_plans::PlanSpec spec = test_plans::make_plan_spec(p, 1, 1, 2 * p * v, m);
        for (int r = 0; r < p; ++r) {
          spec.schedule[r].instructions.clear();
          for (const PipelineInstruction& ins : schedule.stages[r])
            spec.schedule[r].instructions.emplace_back(ins.op, static_cast<uint8_t>(ins.chunk), 0,
                                                       ins.micro_batch, -1);
        }
        const std::vector<uint8_t> bytes = test_plans::build_plan(spec);
        const auto* stages = schema::GetPlan(bytes.data())->schedule()->stages();
        for (int r = 0; r < p; ++r) {
          int allocated = 0;
          for (const ScheduleExecutor::ChunkBuffers& chunk :
               ScheduleExecutor::buffers_needed(*stages->Get(r), v))
            allocated += chunk.slots;
          const int modelled = row.slots_held(p, m, v, r);
          const std::string where = std::string(row.traits.name) + " p " + std::to_string(p) +
                                    " m " + std::to_string(m) + " rank " + std::to_string(r);
          if (row.traits.chunks == ChunkRule::kChosen) {  // interleaved
            EXPECT_GE(modelled, allocated) << where;
          } else {
            EXPECT_EQ(modelled, allocated) << where;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace paraplan::testing
