// schedule_time_test.cc: the step formula per schedule kind (stage_cost.h's
// bubble slots) against the generated streams played out in time
// (pipeline_simulation.h), for uniform stages.
#include <gtest/gtest.h>

#include "planner/cost/stage_cost.h"
#include "planner/schedule/pipeline_simulation.h"
#include "planner/schedule/schedule_kinds.h"

namespace paraplan {
namespace {

using schema::ScheduleKind;

// One step of p uniform stages: forward 1, backward 2 (of which `weight`
// is W), no communication, played out on a device each.
double simulated(ScheduleKind kind, int p, int m, int v, double weight) {
  std::vector<SimulatedStageInput> stages(p);
  for (SimulatedStageInput& stage : stages) {
    stage.forward_work = 1;
    stage.backward_work = 2;
    stage.weight_fraction = weight / 2;
  }
  return simulate_step(generate_schedule(kind, p, m, v), stages, 1, 0).step_seconds;
}

double formula(ScheduleKind kind, int p, int m, int v, double weight) {
  PlanSetting setting;
  setting.shape.pipeline_stages = p;
  setting.num_micro_batches = m;
  setting.schedule = {kind, v, weight / 3};
  return step_seconds(setting, 3.0, 0.0);
}

TEST(ScheduleTimeTest, FormulaIsExactFor1F1BAndALowerBoundForTheOthers) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      EXPECT_DOUBLE_EQ(simulated(ScheduleKind::OneForwardOneBackward, p, m, 1, 0),
                       formula(ScheduleKind::OneForwardOneBackward, p, m, 1, 0));
      EXPECT_DOUBLE_EQ(simulated(ScheduleKind::GPipe, p, m, 1, 0),
                       formula(ScheduleKind::GPipe, p, m, 1, 0));
      for (int v : {2, 4})
        EXPECT_LE(formula(ScheduleKind::Interleaved1F1B, p, m, v, 0),
                  simulated(ScheduleKind::Interleaved1F1B, p, m, v, 0) + 1e-9);
      for (double w : {0.8, 1.0})
        EXPECT_LE(formula(ScheduleKind::ZeroBubbleH1, p, m, 1, w),
                  simulated(ScheduleKind::ZeroBubbleH1, p, m, 1, w) + 1e-9);
    }
  }
}

TEST(ScheduleTimeTest, ThePlayedOutBubbleGivesThePlayedOutStep) {
  for (ScheduleKind kind : {ScheduleKind::Interleaved1F1B, ScheduleKind::ZeroBubbleH1}) {
    for (int p : {2, 4, 8}) {
      for (int m : {p, p + 1, 3 * p, 9 * p + 2}) {
        const int v = kind == ScheduleKind::Interleaved1F1B ? 2 : 1;
        const double weight = kind == ScheduleKind::ZeroBubbleH1 ? 1.0 : 0;
        PlanSetting setting;
        setting.shape.pipeline_stages = p;
        setting.num_micro_batches = m;
        setting.schedule = {kind, v, weight / 3};
        setting.schedule.bubble_slots = played_out_bubble_slots(kind, p, m, v, 2.0, weight / 2);
        EXPECT_NEAR(step_seconds(setting, 3.0, 0.0), simulated(kind, p, m, v, weight), 1e-9)
            << schema::EnumNameScheduleKind(kind) << " p=" << p << " m=" << m;
      }
    }
  }
}

TEST(ScheduleTimeTest, HandCheckedSteps) {
  // p = 4, m = 8, F 1, B 2: 1F1B (8 + 3) x 3 = 33; interleaved v = 2 reaches
  // Megatron's (8 + 3 / 2) x 3 = 28.5 exactly, v = 4 (8 + 3 / 4) x 3.
  EXPECT_DOUBLE_EQ(simulated(ScheduleKind::OneForwardOneBackward, 4, 8, 1, 0), 33.0);
  EXPECT_DOUBLE_EQ(simulated(ScheduleKind::Interleaved1F1B, 4, 8, 2, 0), 28.5);
  EXPECT_DOUBLE_EQ(simulated(ScheduleKind::Interleaved1F1B, 4, 8, 4, 0), 26.25);
  // ZB-H1 with F = B = W = 1 and m = p: the paper's (p - 1)(F + B - W) bubble,
  // 4 x 3 + 3 x 1 = 15 against 1F1B's 21.
  EXPECT_DOUBLE_EQ(simulated(ScheduleKind::ZeroBubbleH1, 4, 4, 1, 1.0), 15.0);
  EXPECT_DOUBLE_EQ(simulated(ScheduleKind::OneForwardOneBackward, 4, 4, 1, 0), 21.0);
  // With more micro-batches too (the paper's order): p = 4, m = 8, 8 x 3 + 3
  // = 27 against 1F1B's 33.
  EXPECT_DOUBLE_EQ(simulated(ScheduleKind::ZeroBubbleH1, 4, 8, 1, 1.0), 27.0);
}

// The bound the search takes for settings it may skip without playing
// their streams out (bubble_slots_lower_bound) is at most the played-out
// bubble of every kind, and equal to it where the published figures are
// exact at F = B_in = W (ZB-H1 p - 1, ZB-V (p - 1) F / 2).
TEST(ScheduleTimeTest, TheBubblesLowerBoundIsOne) {
  int cases = 0;
  for (const ScheduleKindRow& row : schedule_catalogue())
    for (int v : {1, 2, 3, 4}) {
      const ChunkRule chunks = row.traits.chunks;
      if ((chunks == ChunkRule::kOne && v != 1) || (chunks == ChunkRule::kTwoInAV && v != 2) ||
          (chunks == ChunkRule::kChosen && v == 1))
        continue;
      for (int p : {2, 3, 4, 5, 8, 12, 16, 24})
        for (int m : {p, p + 1, 2 * p, 2 * p + 1, 3 * p + 2, 4 * p}) {
          if (m <
              std::max(row.fewest_micro_batches_per_stage, chunks == ChunkRule::kChosen ? 1 : 0) *
                  p)
            continue;
          for (double ratio : {1.0, 1.5, 2.0, 2.5, 3.0})
            for (double weight : {0.0, 0.25, 0.5, 0.6}) {
              if (!row.traits.splits_backward && weight > 0) continue;
              const double played =
                  played_out_bubble_slots(row.traits.kind, p, m, v, ratio, weight);
              const double bound =
                  bubble_slots_lower_bound(row.traits.kind, p, m, v, ratio, weight);
              EXPECT_LE(bound, played + 1e-9)
                  << row.traits.name << " p " << p << " m " << m << " v " << v << " B/F " << ratio
                  << " W/B " << weight;
              ++cases;
            }
        }
    }
  EXPECT_GT(cases, 1500);
  EXPECT_NEAR(bubble_slots_lower_bound(ScheduleKind::ZeroBubbleV, 8, 16, 2, 2.0, 0.5),
              played_out_bubble_slots(ScheduleKind::ZeroBubbleV, 8, 16, 2, 2.0, 0.5), 1e-9);
}

}  // namespace
}  // namespace paraplan
