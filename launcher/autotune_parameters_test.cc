// autotune_parameters_test.cc: the trial parameters' candidates, pruning
// rules and grid, and a plan's context, without running anything.
#include "launcher/autotune_parameters.h"

#include <gtest/gtest.h>

#include "planner/cost/cost_model.h"
#include "planner/planner.h"

namespace paraplan {
namespace {

// The test job's model (as tests/replay_test.cc's): 2 gpt2 blocks of 12704
// parameters, embeddings 256 x 32 + 16 x 32, the final norm's 64.
constexpr int64_t kTinyElements = 2 * 12704 + 8704 + 64;

std::vector<int64_t> values_of(const std::vector<TrialValue>& candidates) {
  std::vector<int64_t> values;
  for (const TrialValue& c : candidates) values.push_back(c.value);
  return values;
}

TEST(TrialParameters, ABucketAboveTheStageIsOneBucketAndTheSizesComeFromTheStage) {
  // The default 40M elements is one bucket for a model of 34176: 0 is the same,
  // so the sizes scale from a quarter of the stage (four buckets).
  const std::vector<TrialValue> values =
      gradient_bucket_candidates(40'000'000, {0, 2, kTinyElements});
  ASSERT_EQ(values_of(values), (std::vector<int64_t>{40'000'000, 0, 8544, 2136, 4 * 8544}));
  EXPECT_EQ(values[0].skipped, "");  // the job's own value: the base setting
  EXPECT_EQ(values[1].skipped,
            "same as 40000000: both one bucket (the largest stage holds 34176 gradient elements)");
  EXPECT_EQ(values[2].skipped, "");
  EXPECT_EQ(values[3].skipped, "");
  EXPECT_EQ(values[4].skipped.rfind("same as 40000000: both one bucket", 0), 0u)
      << values[4].skipped;
}

TEST(TrialParameters, AJobSizeThatCutsTheStageIsTheBaseAndDuplicatesAreListedOnce) {
  // 10000 cuts 34176 into 4 buckets: it is the base; 4 x 10000 is one bucket, as 0.
  const std::vector<TrialValue> values = gradient_bucket_candidates(10'000, {1, 4, kTinyElements});
  ASSERT_EQ(values_of(values), (std::vector<int64_t>{10'000, 0, 2'500, 40'000}));
  EXPECT_EQ(values[1].skipped, "");
  EXPECT_EQ(values[2].skipped, "");
  EXPECT_EQ(values[3].skipped.rfind("same as 0: both one bucket", 0), 0u) << values[3].skipped;
}

TEST(TrialParameters, TooManyBucketsAreKnownBad) {
  // 1000 elements cut a million into 1000 buckets; the job's own value is the
  // base setting all the same, its quarter and quadruple are pruned.
  const std::vector<TrialValue> values = gradient_bucket_candidates(1'000, {0, 8, 1'000'000});
  ASSERT_EQ(values_of(values), (std::vector<int64_t>{1'000, 0, 250, 4'000}));
  EXPECT_EQ(values[0].skipped, "");
  EXPECT_EQ(values[1].skipped, "");
  EXPECT_EQ(values[2].skipped,
            "4000 buckets a step, over 64: each a collective paying its latency (the largest "
            "stage holds 1000000 gradient elements)");
  EXPECT_NE(values[3].skipped.find("250 buckets a step"), std::string::npos) << values[3].skipped;
}

TEST(TrialParameters, WithoutTheStageSizeOnlyDuplicatesArePruned) {
  const std::vector<TrialValue> values = gradient_bucket_candidates(40'000'000, {0, 2, 0});
  ASSERT_EQ(values_of(values), (std::vector<int64_t>{40'000'000, 0, 10'000'000, 160'000'000}));
  for (const TrialValue& v : values) EXPECT_EQ(v.skipped, "") << v.value;
  // A job bucketing nothing and no stage size: nothing to scale, no grid.
  EXPECT_EQ(values_of(gradient_bucket_candidates(0, {0, 2, 0})), std::vector<int64_t>{0});
}

TEST(TrialParameters, ZeroUnitsSkipThePlannersOwnChoiceAndWholeChunkDuplicates) {
  // The planner chose units of 2 (job value 0): 2 is the base plan's, and on
  // chunks of 3 layers a unit of 4 is one unit per chunk, as 3 would be.
  TrialContext context{3, 2, kTinyElements};
  context.zero_layers_per_unit = 2, context.chunk_layers = 3;
  const std::vector<TrialValue> values = zero_unit_candidates(0, context);
  ASSERT_EQ(values_of(values), (std::vector<int64_t>{0, 1, 2, 4}));
  EXPECT_EQ(values[1].skipped, "");
  EXPECT_EQ(values[2].skipped, "the planner's own choice for this setting (2)");
  EXPECT_EQ(values[3].skipped, "");
  // Chunks of 2 layers: 4 is a unit per chunk, as the job's 2 already is.
  context.chunk_layers = 2;
  const std::vector<TrialValue> fixed = zero_unit_candidates(2, context);
  ASSERT_EQ(values_of(fixed), (std::vector<int64_t>{2, 1, 4}));
  EXPECT_EQ(fixed[1].skipped, "");
  EXPECT_EQ(fixed[2].skipped, "same as 2: one unit per chunk (the largest chunk holds 2 layers)");
  // Only under ZeRO-2 and 3.
  const TrialParameter unit = zero_unit_parameter(0);
  EXPECT_EQ(unit.key, "planner.zero_layers_per_unit");
  EXPECT_NE(not_applicable(unit, {1, 2, kTinyElements}), "");
  EXPECT_EQ(not_applicable(unit, {2, 2, kTinyElements}), "");
}

TEST(TrialParameters, TheBucketAppliesToZeroZeroAndOneWithADataParallelReduction) {
  const TrialParameter bucket = gradient_bucket_parameter(40'000'000);
  EXPECT_EQ(bucket.key, "training.gradient_bucket_size");
  EXPECT_EQ(not_applicable(bucket, {0, 2, kTinyElements}), "");
  EXPECT_EQ(not_applicable(bucket, {1, 4, kTinyElements}), "");
  EXPECT_EQ(not_applicable(bucket, {2, 2, kTinyElements}),
            "bucket matters under ZeRO-0/1 only, not ZeRO-2");
  EXPECT_EQ(not_applicable(bucket, {0, 1, kTinyElements}),
            "bucket not tried: one rank holds each gradient, no data-parallel reduction");
}

TEST(TrialGrid, MeasuredSizesFirstThenTheSkippedWithoutTheBaseSetting) {
  const std::vector<TrialCombination> grid =
      trial_grid({gradient_bucket_parameter(40'000'000)}, {0, 2, kTinyElements}, 4);
  ASSERT_EQ(grid.size(), 4u);
  EXPECT_EQ(grid[0].values, std::vector<int64_t>{8544});
  EXPECT_EQ(grid[1].values, std::vector<int64_t>{2136});
  EXPECT_EQ(grid[0].skipped + grid[1].skipped, "");
  EXPECT_EQ(grid[2].values, std::vector<int64_t>{0});
  EXPECT_EQ(grid[3].values, std::vector<int64_t>{4 * 8544});
  EXPECT_NE(grid[2].skipped, "");
  EXPECT_NE(grid[3].skipped, "");
  // Not applicable: no grid at all.
  EXPECT_TRUE(trial_grid({gradient_bucket_parameter(40'000'000)}, {3, 2, 100}, 4).empty());
  EXPECT_TRUE(trial_grid({gradient_bucket_parameter(40'000'000)}, {0, 1, 100}, 4).empty());
}

// A made-up parameter of three values, one of them pruned.
TrialParameter made_up(const std::string& column, int64_t job_value, std::vector<int> stages) {
  TrialParameter p;
  p.key = "training." + column;
  p.column = column;
  p.zero_stages = std::move(stages);
  p.job_value = job_value;
  p.candidates = [](int64_t job, const TrialContext&) {
    return std::vector<TrialValue>{{job, ""}, {job * 2, ""}, {job * 3, ""}, {job * 4, "too big"}};
  };
  return p;
}

TEST(TrialGrid, TwoParametersMakeAProductBoundedByTheBudget) {
  const std::vector<TrialParameter> parameters = {made_up("a", 1, {0}), made_up("b", 10, {0})};
  const std::vector<TrialCombination> grid = trial_grid(parameters, {0, 2, 0}, 4);
  // 3 x 3 kept values less the base: 8; 4 run, 4 beyond the budget, and each
  // pruned value once with the other parameter at the job's value.
  ASSERT_EQ(grid.size(), 10u);
  int run = 0, beyond = 0;
  for (const TrialCombination& c : grid) {
    run += c.skipped.empty();
    beyond += c.skipped == "beyond the 4 experiments the grid may run per setting";
    EXPECT_NE(c.values, (std::vector<int64_t>{1, 10}));
  }
  EXPECT_EQ(run, 4);
  EXPECT_EQ(beyond, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(grid[i].skipped, "") << i;  // the measured ones first
  EXPECT_EQ(describe_values(parameters, grid[0].values), "a=2, b=10");
  // A parameter that does not apply keeps the job's value.
  const std::vector<TrialCombination> only_a =
      trial_grid({made_up("a", 1, {0}), made_up("b", 10, {3})}, {0, 2, 0}, 4);
  ASSERT_EQ(only_a.size(), 3u);
  EXPECT_EQ(only_a[0].values, (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(only_a[1].values, (std::vector<int64_t>{3, 10}));
  EXPECT_EQ(only_a[2].values, (std::vector<int64_t>{4, 10}));
  EXPECT_EQ(only_a[2].skipped, "too big");
}

JobConfig tiny_job(int pipeline_stages) {
  return parse_job_config(R"([model]
vocab_size = 256
seq_len = 16
num_layers = 2
d_model = 32
num_heads = 4

[training]
global_batch_size = 16
total_steps = 20

[planner]
world_size = 4
tensor_parallel_degree = 1
zero_stage = 1
pipeline_nstages = )" + std::to_string(pipeline_stages) +
                          "\n");
}

TEST(TrialContext, APlanSaysItsStageGroupAndLargestStage) {
  const JobConfig whole = tiny_job(1);
  const PlanOutcome planned = plan_job(whole);
  const TrialContext context = plan_context(*schema::GetPlan(planned.plan.data()), whole);
  EXPECT_EQ(context.zero_stage, 1);
  EXPECT_EQ(context.gradient_replicas, 4);
  EXPECT_EQ(context.stage_gradient_elements, kTinyElements);
  EXPECT_EQ(model_parameters(whole.model), kTinyElements);
  // Two stages: the larger's, a block and the embeddings (wte and wpe) against
  // a block, the final norm and the head's own copy of the tied wte.
  const JobConfig halves = tiny_job(2);
  const TrialContext two = plan_context(*schema::GetPlan(plan_job(halves).plan.data()), halves);
  EXPECT_EQ(two.gradient_replicas, 2);
  EXPECT_EQ(two.stage_gradient_elements, 12704 + 8704);
}

}  // namespace
}  // namespace paraplan
