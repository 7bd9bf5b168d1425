// zero_stage_test.cc: ZeRO stages in the search: ZeRO-2 wins where only it
// fits, not where a lower stage fits as fast; ZeRO-3 wins where only it
// fits, each rank keeping its parameters gathered where that fits; stages
// 2 and 3 are planned and written with their groups (3 with each rank's
// keep_parameters_gathered); the report's best plan per stage; each model
// chunk of a rank makes its own ZeRO units (the memory model against
// schema/zero_units.h).
#include <gtest/gtest.h>

#include "planner/cost/plan_estimate.h"
#include "planner/cost/zero_memory.h"
#include "planner/cost/zero_test_support.h"
#include "planner/plan_report.h"
#include "planner/plan_writer.h"
#include "planner/planner.h"
#include "planner/planner_test_support.h"
#include "planner/search/plan_search.h"
#include "schema/plan_io.h"
#include "schema/zero_stages.h"
#include "schema/zero_units.h"

namespace paraplan {
namespace {

using test_jobs::eight_device_job;

// One mesh and micro-batching (pp 1 x dp 8 x tp 1, 1 x 2), every block fully
// recomputed, units of one block: the ZeRO stage is all the search chooses.
std::vector<ConfigOverride> fixed_setting(std::vector<ConfigOverride> more = {}) {
  std::vector<ConfigOverride> overrides = {{"planner.pipeline_nstages", "1"},
                                           {"planner.tensor_parallel_degree", "1"},
                                           {"training.micro_batch_size", "1"},
                                           {"planner.recompute_modules", "ROOT"},
                                           {"planner.zero_layers_per_unit", "1"}};
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
  EXPECT_EQ(result.space.zero_stages, (std::vector<int>{0, 1, 2, 3}));
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
}

// A candidate with every rank's keep_parameters_gathered set to `keep`,
// estimated again.
PlanCandidate with_keep(const JobConfig& config, PlanCandidate candidate, bool keep) {
  for (StageLayout& stage : candidate.stages) stage.keep_parameters_gathered = keep;
  candidate.estimate = evaluate_plan(config, candidate.setting, candidate.stages);
  return candidate;
}

double gigabytes(uint64_t bytes) {
  return static_cast<double>(bytes) / (1 << 30);
}

TEST(ZeroStageTest, ZeroThreeWinsWhereOnlyItFits) {
  // ZeRO-3 freeing its parameters holds the least: its shard, the resident
  // embedding and two slots (kept, a slot per block: more than ZeRO-2).
  const JobConfig roomy = eight_device_job(
      fixed_setting({{"planner.zero_stage", "3"}, {"planner.consider_mem", "false"}}));
  const PlanCandidate kept = search_plans(roomy).ranked.front();
  const double freed = gigabytes(with_keep(roomy, kept, false).estimate.peak_memory);
  const double zero_two = peak_gb(2);
  ASSERT_LT(freed, zero_two);
  ASSERT_GT(gigabytes(kept.estimate.peak_memory), zero_two);
  const JobConfig config = eight_device_job(
      fixed_setting({{"planner.memory_constraint", std::to_string((freed + zero_two) / 2)}}));
  const SearchResult result = search_plans(config);
  const PlanCandidate& winner = result.ranked.front();
  EXPECT_EQ(winner.setting.zero_stage, 3);
  EXPECT_FALSE(winner.stages.front().keep_parameters_gathered);
  for (int lower : {0, 1, 2}) EXPECT_EQ(best_of_stage(result, lower), nullptr) << lower;
  const std::string report = format_search_report(config, result, nullptr);
  EXPECT_NE(report.find("ZeRO: stage 3 won; the best plan of each ZeRO stage searched:\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("3/1 freed"), std::string::npos) << report;
  EXPECT_NE(report.find("ZeRO 2: no plan fits memory, e.g. pp 1 x dp 8 x tp 1 micro-batch 1: "),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("ZeRO 3's best plan frees the parameters after each read on every "
                        "pipeline rank"),
            std::string::npos)
      << report;
}

// Two pipeline ranks, ZeRO-3 fixed: with room each keeps its parameters
// gathered (fewer gathers); with a limit between the two ranks' kept
// memory, the first (more micro-batches in flight) frees them and the last
// keeps them, and the plan file says so rank by rank.
TEST(ZeroStageTest, KeepsParametersGatheredWhereItFits) {
  const std::vector<ConfigOverride> setting = {
      {"planner.pipeline_nstages", "2"},       {"planner.pipeline_scheduler", "1f1b"},
      {"planner.tensor_parallel_degree", "1"}, {"training.micro_batch_size", "1"},
      {"planner.recompute_modules", "ROOT"},   {"planner.zero_stage", "3"}};
  std::vector<ConfigOverride> roomy_setting = setting;
  roomy_setting.push_back({"planner.consider_mem", "false"});
  const JobConfig roomy = eight_device_job(roomy_setting);
  const PlanCandidate kept = search_plans(roomy).ranked.front();
  ASSERT_EQ(kept.stages.size(), 2u);
  for (const StageLayout& stage : kept.stages) EXPECT_TRUE(stage.keep_parameters_gathered);
  const PlanCandidate freed = with_keep(roomy, kept, false);
  EXPECT_LT(kept.estimate.prediction.step_seconds, freed.estimate.prediction.step_seconds);
  const uint64_t first = kept.estimate.stages[0].memory.total();
  const uint64_t last = kept.estimate.stages[1].memory.total();
  ASSERT_GT(first, last);
  ASSERT_LT(freed.estimate.stages[0].memory.total(), last);

  std::vector<ConfigOverride> tight_setting = setting;
  tight_setting.push_back(
      {"planner.memory_constraint", std::to_string(gigabytes((first + last) / 2))});
  const JobConfig tight = eight_device_job(tight_setting);
  const PlanCandidate mixed = search_plans(tight).ranked.front();
  ASSERT_EQ(mixed.stages.size(), 2u);
  EXPECT_FALSE(mixed.stages[0].keep_parameters_gathered);
  EXPECT_TRUE(mixed.stages[1].keep_parameters_gathered);
  // Where a rank frees them, keeping them with its recompute would not fit.
  const double limit = tight.planner.memory_constraint * (1 << 30);
  PlanCandidate keep_first = mixed;
  keep_first.stages[0].keep_parameters_gathered = true;
  keep_first.estimate = evaluate_plan(tight, keep_first.setting, keep_first.stages);
  EXPECT_GT(static_cast<double>(keep_first.estimate.stages[0].memory.total()), limit);
  EXPECT_NE(format_search_report(tight, search_plans(tight), nullptr).find("3/1 kept 1 of 2"),
            std::string::npos);

  // Written rank by rank, and read back with the plan: re-estimated for a
  // faster link, each rank's choice stands.
  const std::string path = testing::TempDir() + "zero3-mixed.pplan";
  std::vector<ConfigOverride> save = tight_setting, load = tight_setting;
  save.push_back({"planner.save_plan_path", path});
  load.push_back({"planner.load_plan_path", path});
  load.push_back({"cluster.intra_node_bandwidth_gbps", "50"});
  const PlanOutcome saved = plan_job(eight_device_job(save));
  const PlanOutcome loaded = plan_job(eight_device_job(load));
  EXPECT_TRUE(loaded.reused);
  EXPECT_NE(loaded.plan, saved.plan);
  for (const PlanOutcome* outcome : {&saved, &loaded}) {
    const schema::Plan& plan = *schema::GetPlan(outcome->plan.data());
    EXPECT_EQ(plan.zero()->stage(), 3);
    EXPECT_EQ(plan.zero()->num_groups(), 1);
    ASSERT_EQ(plan.schedule()->stages()->size(), 2u);
    EXPECT_FALSE(plan.schedule()->stages()->Get(0)->keep_parameters_gathered());
    EXPECT_TRUE(plan.schedule()->stages()->Get(1)->keep_parameters_gathered());
    EXPECT_TRUE(validate_plan(plan).empty());
  }
  // The reused plan's memory is the kept / freed split's, as searched.
  EXPECT_EQ(
      schema::GetPlan(loaded.plan.data())->predictions()->stages()->Get(1)->memory()->weights(),
      mixed.estimate.stages[1].memory.weights);
}

TEST(ZeroStageTest, StageThreeIsPlannedWithItsGroups) {
  // A job may fix stage 3; groups as for 1 and 2.
  const PlanOutcome outcome = plan_job(eight_device_job({{"planner.zero_stage", "3"},
                                                         {"planner.zero_ngroups", "2"},
                                                         {"planner.data_parallel_degree", "4"}}));
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  EXPECT_EQ(plan.zero()->stage(), 3);
  EXPECT_EQ(plan.zero()->num_groups(), 2);
  EXPECT_TRUE(validate_plan(plan).empty());
}

// Units of several layers: on tiny CPU blocks (d_model 32, 16 tokens: the
// replay tests' model) a collective costs mostly its latency, so the
// search's larger unit (StageCostModel::larger_zero_unit) beats one layer
// per unit and is written; the report says what it saves against one
// layer each. (The 8-device job's blocks, 8x wider, keep one layer each.)
TEST(ZeroStageTest, LargerUnitsWinWhereCollectivesCostTheirLatency) {
  const JobConfig config = eight_device_job({{"planner.zero_stage", "3"},
                                             {"planner.world_size", "2"},
                                             {"model.d_model", "32"},
                                             {"model.num_heads", "4"},
                                             {"model.seq_len", "16"},
                                             {"model.vocab_size", "256"},
                                             {"planner.pipeline_nstages", "1"},
                                             {"training.micro_batch_size", "4"}});
  const SearchResult result = search_plans(config);
  const PlanCandidate& best = result.ranked.front();
  const int k = best.setting.zero_layers_per_unit;
  const StageCostModel costs(config, best.setting, nullptr);
  std::printf("[ figures  ] units of %d layers: %.3g s per block exposed, one layer: %.3g s\n", k,
              costs.zero_unit_seconds_per_block(k), costs.zero_unit_seconds_per_block(1));
  ASSERT_GT(k, 1);
  EXPECT_LT(costs.zero_unit_seconds_per_block(k), 0.99 * costs.zero_unit_seconds_per_block(1));
  PlanCandidate one = best;
  one.setting.zero_layers_per_unit = 1;
  one.estimate = evaluate_plan(config, one.setting, one.stages);
  EXPECT_LT(best.estimate.prediction.step_seconds, one.estimate.prediction.step_seconds);
  EXPECT_GT(best.estimate.peak_memory, one.estimate.peak_memory);
  const std::string report = format_search_report(config, result, nullptr);
  EXPECT_NE(report.find("ZeRO units: " + std::to_string(k) + " layers each: their gathers"),
            std::string::npos)
      << report;
  const PlanOutcome outcome = plan_job(config);
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  EXPECT_EQ(plan.zero()->layers_per_unit(), k);
  EXPECT_TRUE(validate_plan(plan).empty());
}

// [planner] zero_layers_per_unit fixes the unit, whatever the cost model
// prefers, and the report says it was set.
TEST(ZeroStageTest, AFixedUnitSizeIsWhatThePlanWrites) {
  const JobConfig config =
      eight_device_job({{"planner.zero_stage", "2"}, {"planner.zero_layers_per_unit", "3"}});
  const SearchResult result = search_plans(config);
  for (const PlanCandidate& candidate : result.ranked)
    EXPECT_EQ(candidate.setting.zero_layers_per_unit, 3);
  EXPECT_NE(format_search_report(config, result, nullptr)
                .find("ZeRO units: 3 layers each ([planner] zero_layers_per_unit)"),
            std::string::npos);
  const PlanOutcome outcome = plan_job(config);
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  EXPECT_EQ(plan.zero()->layers_per_unit(), 3);
  EXPECT_TRUE(validate_plan(plan).empty());
}

// A rank of several model chunks: the units, the shard and the largest
// unit are the runtime's, each chunk's units made from the share of the
// blocks the plan writer gives it (an interleaved rank of 6 blocks in 2
// chunks of 3, units of 2, holds 4 units: 2 + 1 each, not 3).
TEST(ZeroStageTest, EveryModelChunkMakesItsOwnUnits) {
  const int64_t block_elements = 1000;
  int cases = 0;
  for (const int z : {1, 4})
    for (const int chunks : {1, 2, 3, 4})
      for (const int per_unit : {1, 2, 3, 8})
        for (int blocks = chunks; blocks <= 4 * chunks + 3; ++blocks) {
          const ZeroTwoGradients gradients =
              zero_two_gradients({}, block_elements, z, true, per_unit, chunks);
          // The plan writer's split of one rank's blocks into its chunks.
          std::vector<StageLayout> rank(2);
          rank[0].num_layers = blocks;
          rank[1].num_layers = chunks;
          for (StageLayout& stage : rank)
            stage.recompute.assign(stage.num_layers, schema::RecomputeMode::None);
          const std::vector<StageLayout> virtual_stages =
              virtual_stage_layouts(rank, chunks,
                                    chunks > 1 ? schema::ScheduleKind::Interleaved1F1B
                                               : schema::ScheduleKind::OneForwardOneBackward);
          int64_t units = 0, shard = 0, largest = 0;
          for (int c = 0; c < chunks; ++c) {
            const int n = virtual_stages[static_cast<size_t>(c) * 2].num_layers;
            const ChunkUnits chunk = chunk_units(false, false, n, false, per_unit);
            units += chunk.layer_units();
            for (int u = 0; u < chunk.layer_units(); ++u) {
              const int64_t padded =
                  zero_test::pad(block_elements * std::min(per_unit, n - u * per_unit), z);
              shard += padded / z;
              largest = std::max(largest, padded);
            }
          }
          const std::string shape = "z " + std::to_string(z) + ", " + std::to_string(chunks) +
                                    " chunks, units of " + std::to_string(per_unit) + ", " +
                                    std::to_string(blocks) + " blocks";
          EXPECT_EQ(gradients.block_units(blocks), units) << shape;
          EXPECT_EQ(gradients.shard_elements(blocks), shard) << shape;
          EXPECT_EQ(gradients.largest_streamed(blocks), largest) << shape;
          EXPECT_EQ(gradients.pool_slots(blocks), std::max<int64_t>(2, units)) << shape;
          ++cases;
        }
  EXPECT_GT(cases, 300);
}

}  // namespace
}  // namespace paraplan
