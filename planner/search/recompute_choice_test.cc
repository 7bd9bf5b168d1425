// recompute_choice_test.cc: the fastest recompute assignment that fits a stage,
// against every assignment with fewer upgrades.
#include "planner/search/recompute_choice.h"

#include <gtest/gtest.h>

#include "planner/job/job_config_test_support.h"

namespace paraplan {
namespace {

using job_config_test::gpt3_175b;
using schema::RecomputeMode;

TEST(StageCostTest, RecomputeChoiceIsTheFastestThatFits) {
  const JobConfig base = gpt3_175b();
  const PlanSetting setting{{8, 16, 8}, {128, 8}, 1, 96, 1, 1, {}};
  // Stage 0 holds 8 micro-batches; give it 12 blocks under limits from loose to tight.
  RecomputeClassCounts free_blocks;
  free_blocks.add({RecomputeMode::None, RecomputeMode::Full}, 12);
  double previous_slot = 0;
  for (double limit : {80.0, 40.0, 30.0, 25.0}) {
    JobConfig config = base;
    config.planner.memory_constraint = limit;
    const StageCostModel costs(config, setting);
    const RecomputeChoice choice = choose_recompute(costs, 0, free_blocks);
    ASSERT_TRUE(choice.fits) << limit;
    EXPECT_LE(choice.memory.total(), limit * (1 << 30));
    EXPECT_GE(choice.slot_seconds, previous_slot);  // tighter limits cost time
    previous_slot = choice.slot_seconds;
    // No assignment with fewer upgrades fits.
    for (int x = 0; x <= 12; ++x)
      for (int y = 0; y <= x; ++y) {
        const RecomputeCounts counts{12 - x, x - y, y};
        if (costs.fits(costs.memory(0, counts))) {
          EXPECT_GE(costs.slot_seconds(0, counts), choice.slot_seconds);
        }
      }
  }
  // At 80 GB selective recompute of a few blocks is enough; at 25 GB blocks recompute fully.
  JobConfig loose = base;
  loose.planner.memory_constraint = 80;
  EXPECT_EQ(choose_recompute(StageCostModel(loose, setting), 0, free_blocks).counts.full, 0);
  JobConfig tight = base;
  tight.planner.memory_constraint = 25;
  EXPECT_GT(choose_recompute(StageCostModel(tight, setting), 0, free_blocks).counts.full, 0);
}

// The search prices (x, y) by the activations alone and rebuilds the
// choice's memory from them: equal to the whole breakdown counted afresh,
// for every schedule kind's in-flight counts and every rank.
TEST(StageCostTest, RecomputeChoiceMemoryIsTheWholeBreakdown) {
  JobConfig config = gpt3_175b();
  config.planner.memory_constraint = 30;
  RecomputeClassCounts blocks;
  blocks.add({RecomputeMode::None, RecomputeMode::Full}, 10);
  blocks.add({RecomputeMode::Selective, RecomputeMode::Full}, 2);
  for (const schema::ScheduleKind kind :
       {schema::ScheduleKind::OneForwardOneBackward, schema::ScheduleKind::Interleaved1F1B,
        schema::ScheduleKind::ZeroBubbleV}) {
    PlanSetting setting{{8, 16, 8}, {128, 8}, 1, 96, 1, 1, {}};
    setting.schedule.kind = kind;
    setting.schedule.virtual_stages = kind == schema::ScheduleKind::OneForwardOneBackward ? 1 : 2;
    const StageCostModel costs(config, setting);
    for (int rank = 0; rank < 8; ++rank) {
      const RecomputeChoice choice = choose_recompute(costs, rank, blocks);
      const MemoryBreakdown recounted = costs.memory(rank, choice.counts);
      EXPECT_EQ(choice.memory.total(), recounted.total()) << rank;
      EXPECT_EQ(choice.memory.activations, recounted.activations) << rank;
      EXPECT_GT(recounted.activations, 0u);
      EXPECT_EQ(costs.activations_of(rank)(choice.counts), recounted.activations);
    }
  }
}

}  // namespace
}  // namespace paraplan
