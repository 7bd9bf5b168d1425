// zero_stage_test.cc: ZeRO stages in the search: ZeRO-2 wins where only it
// fits, not where a lower stage fits as fast; zero_stage = 2 is planned and
// written with its groups, 3 refused (not planned yet); the report's best
// plan per stage.
#include <gtest/gtest.h>

#include "planner/plan_report.h"
#include "planner/planner.h"
#include "planner/planner_test_support.h"
#include "planner/search/plan_search.h"
#include "schema/plan_io.h"
#include "schema/zero_stages.h"

namespace paraplan {
namespace {

using test_jobs::eight_device_job;

// One mesh and micro-batching (pp 1 x dp 8 x tp 1, 1 x 2), every block fully
// recomputed: the ZeRO stage is all the search chooses.
std::vector<ConfigOverride> fixed_setting(std::vector<ConfigOverride> more = {}) {
  std::vector<ConfigOverride> overrides = {{"planner.pipeline_nstages", "1"},
                                           {"planner.tensor_parallel_degree", "1"},
                                           {"training.micro_batch_size", "1"},
                                           {"planner.recompute_modules", "ROOT"}};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return overrides;
}

// The peak memory per rank of the fixed setting under a ZeRO stage.
double peak_gb(int zero_stage) {
  const SearchResult result = search_plans(eight_device_job(fixed_setting(
      {{"planner.zero_stage", std::to_string(zero_stage)}, {"planner.consider_mem", "false"}})));
  return static_cast<double>(result.ranked.front().estimate.peak_memory) / (1 << 30);
}

const PlanCandidate* best_of_stage(const SearchResult& result, int zero_stage) {
  for (const PlanCandidate& candidate : result.best_per_zero_stage)
    if (candidate.setting.zero_stage == zero_stage) return &candidate;
  return nullptr;
}

TEST(ZeroStageTest, ZeroTwoWinsWhereOnlyItFits) {
  const double zero_one = peak_gb(1), zero_two = peak_gb(2);
  ASSERT_LT(zero_two, zero_one);
  ASSERT_LT(zero_one, peak_gb(0));
  const JobConfig config = eight_device_job(
      fixed_setting({{"planner.memory_constraint", std::to_string((zero_one + zero_two) / 2)}}));
  const SearchResult result = search_plans(config);
  EXPECT_EQ(result.space.zero_stages, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(result.ranked.front().setting.zero_stage, 2);
  EXPECT_EQ(best_of_stage(result, 1), nullptr);
  EXPECT_EQ(best_of_stage(result, 0), nullptr);
  const std::string report = format_search_report(config, result, nullptr);
  EXPECT_NE(report.find("ZeRO: stage 2 won; the best plan of each ZeRO stage searched:\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("ZeRO 1: no plan fits memory, e.g. pp 1 x dp 8 x tp 1 micro-batch 1: "),
            std::string::npos)
      << report;
}

TEST(ZeroStageTest, LowerStageWinsWhereItFitsAsFast) {
  // With room to spare ZeRO-2 only adds reduce-scatters: a lower stage wins,
  // and the report says why ZeRO-2 lost.
  const JobConfig config = eight_device_job(fixed_setting());
  const SearchResult result = search_plans(config);
  const PlanCandidate& winner = result.ranked.front();
  EXPECT_LT(winner.setting.zero_stage, 2);
  const PlanCandidate* two = best_of_stage(result, 2);
  ASSERT_NE(two, nullptr);
  EXPECT_GE(two->estimate.prediction.step_seconds, winner.estimate.prediction.step_seconds);
  EXPECT_NE(format_search_report(config, result, nullptr)
                .find("ZeRO 2: slower: the winner's plan under ZeRO 2 runs +"),
            std::string::npos);
  // At an equal step the lower stage ranks first.
  PlanCandidate a = winner, b = winner;
  a.setting.zero_stage = 1;
  b.setting.zero_stage = 2;
  EXPECT_TRUE(ranks_before(a, b));
  EXPECT_FALSE(ranks_before(b, a));
}

TEST(ZeroStageTest, StageTwoIsPlannedAndWrittenWithItsGroups) {
  const PlanOutcome outcome = plan_job(eight_device_job({{"planner.zero_stage", "2"},
                                                         {"planner.zero_ngroups", "2"},
                                                         {"planner.data_parallel_degree", "4"}}));
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  EXPECT_EQ(plan.zero()->stage(), 2);
  EXPECT_EQ(plan.zero()->num_groups(), 2);
  EXPECT_TRUE(validate_plan(plan).empty());
  // Stage 3 is refused, naming the field and the values that run.
  try {
    plan_job(eight_device_job({{"planner.zero_stage", "3"}}));
    ADD_FAILURE() << "zero_stage = 3 was planned";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(
        std::string(error.what())
            .find("[planner] zero_stage = 3 is not supported (ZeRO stage 3 is not planned yet); "
                  "valid values: " +
                  runnable_zero_stages_text()),
        std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace paraplan
