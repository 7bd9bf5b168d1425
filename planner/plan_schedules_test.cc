// plan_schedules_test.cc: plans with each schedule kind, written and read
// back: virtual stages in model order, a chunk per instruction, the kind,
// predictions per rank, streams equal to the generator's and valid; the
// report's comparison of the kinds.
#include <gtest/gtest.h>

#include "planner/planner.h"
#include "planner/schedule/schedule.h"
#include "schema/plan_io.h"
#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

using schema::ScheduleKind;

const char* kJob = R"(
[model]
seq_len = 64
num_layers = 8
d_model = 64
num_heads = 4
[training]
global_batch_size = 16
total_steps = 100
)";

PlanOutcome plan_with(const std::string& scheduler, const std::string& chunks = "0") {
  return plan_job(parse_job_config(kJob, "job.toml",
                                   {{"planner.pipeline_nstages", "2"},
                                    {"planner.data_parallel_degree", "1"},
                                    {"planner.tensor_parallel_degree", "1"},
                                    {"training.micro_batch_size", "2"},
                                    {"planner.pipeline_scheduler", scheduler},
                                    {"planner.pipeline_virtual_stages", chunks}}));
}

// The plan's streams are the generator's, chunk included.
void expect_generators_streams(const schema::Plan& plan, const PipelineSchedule& expected) {
  for (int r = 0; r < expected.num_stages; ++r) {
    const auto* stream = plan.schedule()->stages()->Get(r)->instructions();
    ASSERT_EQ(stream->size(), expected.stages[r].size());
    for (size_t i = 0; i < stream->size(); ++i) {
      EXPECT_EQ(stream->Get(i)->op(), expected.stages[r][i].op);
      EXPECT_EQ(stream->Get(i)->chunk(), expected.stages[r][i].chunk);
      EXPECT_EQ(stream->Get(i)->micro_batch(), expected.stages[r][i].micro_batch);
    }
  }
}

std::string problems_of(const std::vector<uint8_t>& bytes) {
  std::string joined;
  for (const std::string& problem : validate_plan(*schema::GetPlan(bytes.data())))
    joined += problem + "\n";
  return joined;
}

TEST(PlanSchedulesTest, InterleavedPlanHoldsVirtualStagesInModelOrder) {
  const PlanOutcome outcome = plan_with("interleaved", "2");
  EXPECT_EQ(problems_of(outcome.plan), "");
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  ASSERT_EQ(plan.schedule()->kind(), ScheduleKind::Interleaved1F1B);
  ASSERT_EQ(plan.schedule()->virtual_stages(), 2);
  // Its streams are placed for sends and receives that never wait.
  EXPECT_EQ(plan.schedule()->transfers(), schema::Transfers::Posted);
  ASSERT_EQ(plan.stages()->size(), 4u);
  ASSERT_EQ(plan.predictions()->stages()->size(), 2u);
  // 8 layers, two ranks, two chunks each: rank r's chunk c is stage c x 2 + r.
  int layers = 0;
  for (int s = 0; s < 4; ++s) {
    const schema::Stage& stage = *plan.stages()->Get(s);
    EXPECT_EQ(stage.first_layer(), layers);
    EXPECT_GE(stage.num_layers(), 1);
    layers += stage.num_layers();
    EXPECT_EQ(stage.has_embedding(), s == 0);
    EXPECT_EQ(stage.has_head(), s == 3);
  }
  EXPECT_EQ(layers, 8);
  expect_generators_streams(plan, generate_interleaved(2, plan.training()->num_micro_batches(), 2));
}

TEST(PlanSchedulesTest, ZeroBubblePlanSplitsBackward) {
  const PlanOutcome outcome = plan_with("zb-h1");
  EXPECT_EQ(problems_of(outcome.plan), "");
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  ASSERT_EQ(plan.schedule()->kind(), ScheduleKind::ZeroBubbleH1);
  EXPECT_EQ(plan.stages()->size(), 2u);
  int inputs = 0, weights = 0, whole = 0;
  for (const schema::Instruction* ins : *plan.schedule()->stages()->Get(0)->instructions()) {
    inputs += ins->op() == schema::OpCode::BackwardInput;
    weights += ins->op() == schema::OpCode::BackwardWeight;
    whole += ins->op() == schema::OpCode::Backward;
  }
  EXPECT_EQ(inputs, plan.training()->num_micro_batches());
  EXPECT_EQ(weights, inputs);
  EXPECT_EQ(whole, 0);
}

TEST(PlanSchedulesTest, ZeroBubbleVPlanHoldsItsChunksInAV) {
  const PlanOutcome outcome = plan_with("zb-v");
  EXPECT_EQ(problems_of(outcome.plan), "");
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  ASSERT_EQ(plan.schedule()->kind(), ScheduleKind::ZeroBubbleV);
  ASSERT_EQ(plan.schedule()->virtual_stages(), 2);
  EXPECT_EQ(plan.schedule()->transfers(), schema::Transfers::Posted);
  ASSERT_EQ(plan.stages()->size(), 4u);
  // Rank 0's chunks are virtual stages 0 and 3 (the embedding and the head),
  // rank 1's are 1 and 2; each chunk takes half of its rank's blocks.
  const int per_rank[2] = {
      plan.stages()->Get(0)->num_layers() + plan.stages()->Get(3)->num_layers(),
      plan.stages()->Get(1)->num_layers() + plan.stages()->Get(2)->num_layers()};
  EXPECT_EQ(per_rank[0] + per_rank[1], 8);
  EXPECT_EQ(plan.stages()->Get(0)->num_layers(), (per_rank[0] + 1) / 2);
  EXPECT_EQ(plan.stages()->Get(1)->num_layers(), (per_rank[1] + 1) / 2);
  EXPECT_TRUE(plan.stages()->Get(3)->has_head());
  // The streams are the generator's; the last rank hands chunk 0's output to
  // its own chunk 1 as a send directly followed by its receive.
  expect_generators_streams(plan, generate_zero_bubble_v(2, plan.training()->num_micro_batches()));
  const auto* last = plan.schedule()->stages()->Get(1)->instructions();
  int hand_offs = 0;
  for (uint32_t i = 0; i + 1 < last->size(); ++i) {
    if (last->Get(i)->op() != schema::OpCode::SendActivation || last->Get(i)->chunk() != 0)
      continue;
    EXPECT_EQ(last->Get(i + 1)->op(), schema::OpCode::RecvActivation);
    EXPECT_EQ(last->Get(i + 1)->chunk(), 1);
    ++hand_offs;
  }
  EXPECT_EQ(hand_offs, plan.training()->num_micro_batches());
}

// DualPipe-V: ZB-V's V and hand-offs in DualPipe-V's order (m = 8 >= 2p).
TEST(PlanSchedulesTest, DualPipeVPlanRunsTheVInItsOwnOrder) {
  const PlanOutcome outcome = plan_with("dualpipe-v");
  EXPECT_EQ(problems_of(outcome.plan), "");
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  ASSERT_EQ(plan.schedule()->kind(), ScheduleKind::DualPipeV);
  ASSERT_EQ(plan.schedule()->virtual_stages(), 2);
  EXPECT_EQ(plan.header()->schema_version(), kPlanSchemaVersion);
  ASSERT_EQ(plan.stages()->size(), 4u);
  EXPECT_TRUE(plan.stages()->Get(0)->has_embedding());
  EXPECT_TRUE(plan.stages()->Get(3)->has_head());
  const int m = plan.training()->num_micro_batches();
  ASSERT_GE(m, 4);
  expect_generators_streams(plan, generate_dualpipe_v(2, m));
  EXPECT_NE(generate_dualpipe_v(2, m).stages, generate_zero_bubble_v(2, m).stages);
  // Fewer micro-batches than 2p: the planner says what DualPipe-V needs.
  std::string refused;
  try {
    plan_job(parse_job_config(kJob, "job.toml",
                              {{"planner.pipeline_nstages", "4"},
                               {"planner.data_parallel_degree", "1"},
                               {"planner.tensor_parallel_degree", "1"},
                               {"training.micro_batch_size", "4"},
                               {"planner.pipeline_scheduler", "dualpipe-v"}}));
  } catch (const std::exception& error) {
    refused = error.what();
  }
  EXPECT_NE(refused.find("[planner] pipeline_scheduler = 'dualpipe-v' runs at least 2 x pp = 8 "
                         "micro-batches; this setting has 4"),
            std::string::npos)
      << refused;
}

// A hand-edited V plan whose hand-off is not followed by its receive, or
// whose kind runs another chunk count, is refused by field.
TEST(PlanSchedulesTest, ZeroBubbleVPlanChecksItsHandOffs) {
  const int m = 4;
  const auto problems = [&](int virtual_stages, bool swap) {
    test_plans::PlanSpec spec =
        test_plans::make_chunked_plan_spec(2, 2, 8, m, ScheduleKind::ZeroBubbleV, true);
    spec.virtual_stages = virtual_stages;
    const PipelineSchedule schedule = generate_zero_bubble_v(2, m);
    spec.schedule.clear();
    for (int r = 0; r < 2; ++r) {
      std::vector<schema::Instruction> stream;
      for (const PipelineInstruction& ins : schedule.stages[r])
        stream.emplace_back(ins.op, static_cast<uint8_t>(ins.chunk), 0, ins.micro_batch, -1);
      for (size_t i = 0; swap && r == 1 && i + 2 < stream.size(); ++i)
        if (stream[i].op() == schema::OpCode::SendActivation && stream[i].chunk() == 0) {
          std::swap(stream[i + 1], stream[i + 2]);  // something between send and receive
          break;
        }
      spec.schedule.push_back({r, true, stream});
    }
    return problems_of(test_plans::build_plan(spec));
  };
  EXPECT_EQ(problems(2, false), "");
  const std::string swapped = problems(2, true);
  EXPECT_NE(swapped.find("schedule.stages[1].instructions["), std::string::npos) << swapped;
  EXPECT_NE(swapped.find("goes to chunk 1 of the same rank, a local copy: the next instruction "
                         "must be its recv_activation (chunk 1)"),
            std::string::npos)
      << swapped;
  EXPECT_NE(problems(3, false).find("schedule.virtual_stages: 3 with schedule.kind zb-v"),
            std::string::npos);
}

TEST(PlanSchedulesTest, AutoComparesTheKindsInTheReport) {
  const PlanOutcome outcome = plan_with("auto");
  EXPECT_EQ(problems_of(outcome.plan), "");
  const std::string& report = outcome.report;
  EXPECT_NE(report.find(" won; the best plan of each schedule kind:"), std::string::npos) << report;
  for (const char* kind : {"1f1b", "gpipe", "zb-h1", "zb-v", "interleaved v="})
    EXPECT_NE(report.find(kind), std::string::npos) << kind << "\n" << report;
  // The written plan is the winner the report names.
  const schema::Plan& plan = *schema::GetPlan(outcome.plan.data());
  EXPECT_NE(report.find(std::string("schedule: ") + schedule_kind_name(plan.schedule()->kind())),
            std::string::npos)
      << report;
}

}  // namespace
}  // namespace paraplan
