// multi_rank_plan_test.cc: plan_job with every degree fixed produces valid
// multi-rank plans (mesh, stages, recompute, schedule, predictions).
#include <gtest/gtest.h>

#include "planner/planner.h"
#include "planner/schedule/schedule.h"
#include "schema/plan_io.h"

namespace paraplan {
namespace {

const char* kJob = R"(
[model]
seq_len = 64
num_layers = 4
d_model = 64
num_heads = 4
[training]
global_batch_size = 8
total_steps = 100
)";

JobConfig job(const std::vector<ConfigOverride>& overrides) {
  return parse_job_config(kJob, "job.toml", overrides);
}

std::string problems_of(const std::vector<uint8_t>& bytes) {
  std::string joined;
  for (const std::string& problem : validate_plan(*schema::GetPlan(bytes.data())))
    joined += problem + "\n";
  return joined;
}

struct Fixed {
  int pp, dp, tp, zero, ngroups, micro;
};

TEST(MultiRankPlanTest, FixedDegreesGiveValidPlans) {
  for (const Fixed& f :
       {Fixed{2, 1, 2, 0, 1, 2}, Fixed{4, 2, 1, 0, 1, 1}, Fixed{1, 2, 2, 1, 2, 2}}) {
    SCOPED_TRACE(std::to_string(f.pp) + "x" + std::to_string(f.dp) + "x" + std::to_string(f.tp));
    const JobConfig config = job({{"planner.pipeline_nstages", std::to_string(f.pp)},
                                  {"planner.data_parallel_degree", std::to_string(f.dp)},
                                  {"planner.tensor_parallel_degree", std::to_string(f.tp)},
                                  {"planner.zero_stage", std::to_string(f.zero)},
                                  {"planner.zero_ngroups", std::to_string(f.ngroups)},
                                  {"training.micro_batch_size", std::to_string(f.micro)}});
    const PlanOutcome outcome = plan_job(config);
    EXPECT_EQ(problems_of(outcome.plan), "");
    const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
    EXPECT_EQ(plan.mesh()->pipeline_parallel(), f.pp);
    EXPECT_EQ(plan.mesh()->data_parallel(), f.dp);
    EXPECT_EQ(plan.mesh()->tensor_parallel(), f.tp);
    EXPECT_EQ(plan.mesh()->num_nodes(), 1);
    EXPECT_EQ(plan.mesh()->devices_per_node(), f.pp * f.dp * f.tp);
    EXPECT_EQ(plan.training()->micro_batch_size(), f.micro);
    EXPECT_EQ(plan.training()->micro_batch_size() * plan.training()->num_micro_batches() * f.dp, 8);
    EXPECT_EQ(plan.zero()->stage(), f.zero);
    EXPECT_EQ(plan.zero()->num_groups(), f.zero == 1 ? f.ngroups : 1);
    // One stage per virtual stage (pp x the chunks per rank), in model order.
    const int count = f.pp * plan.schedule()->virtual_stages();
    ASSERT_EQ(plan.stages()->size(), static_cast<size_t>(count));
    int layers = 0;
    for (int s = 0; s < count; ++s) {
      const schema::Stage& stage = *plan.stages()->Get(s);
      EXPECT_EQ(stage.first_layer(), layers);
      layers += stage.num_layers();
      EXPECT_EQ(stage.has_embedding(), s == 0);
      EXPECT_EQ(stage.has_head(), s == count - 1);
    }
    EXPECT_EQ(layers, 4);
    EXPECT_GT(plan.predictions()->step_seconds(), 0.0);
    EXPECT_NO_THROW(load_plan_from_bytes("multi.pplan", outcome.plan));
    EXPECT_NE(outcome.report.find("best"), std::string::npos);
  }
}

TEST(MultiRankPlanTest, FourStagesHoldOneBlockEach) {
  // 1F1B's warm-up is what this checks (auto would run ZB-H1 here).
  const PlanOutcome outcome = plan_job(job({{"planner.pipeline_nstages", "4"},
                                            {"planner.pipeline_scheduler", "1f1b"},
                                            {"planner.data_parallel_degree", "2"},
                                            {"planner.tensor_parallel_degree", "1"},
                                            {"training.micro_batch_size", "1"}}));
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  for (int s = 0; s < 4; ++s) EXPECT_EQ(plan.stages()->Get(s)->num_layers(), 1);
  EXPECT_EQ(plan.schedule()->kind(), schema::ScheduleKind::OneForwardOneBackward);
  // Stage 0 warms up with min(p - s - 1, m) = 3 forwards.
  const auto* stream = plan.schedule()->stages()->Get(0)->instructions();
  int leading_forwards = 0;
  for (const schema::Instruction* ins : *stream) {
    if (ins->op() == schema::OpCode::Backward) break;
    if (ins->op() == schema::OpCode::Forward) ++leading_forwards;
  }
  EXPECT_EQ(leading_forwards, 4);  // 3 warm-up + the first steady-state forward
}

TEST(MultiRankPlanTest, RecomputeModulesAndGpipe) {
  const PlanOutcome outcome = plan_job(job({{"planner.pipeline_nstages", "2"},
                                            {"planner.data_parallel_degree", "1"},
                                            {"planner.tensor_parallel_degree", "2"},
                                            {"planner.recompute_modules", "h.1,core_attention"},
                                            {"planner.pipeline_scheduler", "gpipe"}}));
  EXPECT_EQ(problems_of(outcome.plan), "");
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  EXPECT_EQ(plan.schedule()->kind(), schema::ScheduleKind::GPipe);
  std::vector<schema::RecomputeMode> modes;
  for (const schema::Stage* stage : *plan.stages())
    for (schema::RecomputeMode mode : *stage->recompute()) modes.push_back(mode);
  ASSERT_EQ(modes.size(), 4u);
  EXPECT_EQ(modes[1], schema::RecomputeMode::Full);
  for (int i : {0, 2, 3}) EXPECT_EQ(modes[i], schema::RecomputeMode::Selective);
}

TEST(MultiRankPlanTest, TensorParallelMustDivideTheVocabulary) {
  try {
    plan_job(job({{"planner.tensor_parallel_degree", "4"}, {"model.vocab_size", "250"}}));
    FAIL() << "accepted";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("job.toml: [planner] tensor_parallel_degree = 4 does not divide [model] "
                        "vocab_size = 250"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("pad vocab_size to a multiple of 4, e.g. 252"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace paraplan
