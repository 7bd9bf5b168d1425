// world_one_plan_test.cc: plans for one device (what the single-rank planner
// did before the search): recompute module matching, micro-batch choice,
// memory errors and the serialized plan (round trip and validate_plan).
#include <gtest/gtest.h>

#include <map>

#include "planner/job/module_names.h"
#include "planner/plan_writer.h"
#include "planner/planner.h"
#include "planner/schedule/schedule.h"
#include "planner/search/plan_search.h"
#include "schema/plan_io.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

const char* kJob = R"(
[job]
name = "tiny"
[model]
seq_len = 64
num_layers = 4
d_model = 64
num_heads = 4
[training]
global_batch_size = 8
total_steps = 100
warmup_steps = 10
)";

JobConfig job(const std::vector<ConfigOverride>& overrides = {}) {
  return parse_job_config(kJob, "job.toml", overrides);
}

PlanCandidate best(const std::vector<ConfigOverride>& overrides = {}) {
  return search_plans(job(overrides)).ranked.front();
}

std::string plan_error(const std::vector<ConfigOverride>& overrides) {
  try {
    plan_job(job(overrides));
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

TEST(RecomputeModulesTest, SuffixMatchingOnModuleNames) {
  const auto none = RecomputeMode::None, full = RecomputeMode::Full,
             selective = RecomputeMode::Selective;
  using Modes = std::vector<RecomputeMode>;
  EXPECT_EQ(recompute_modes_from_modules("", 3, "job.toml"), Modes(3, none));
  EXPECT_EQ(recompute_modes_from_modules("ROOT", 3, "job.toml"), Modes(3, full));
  EXPECT_EQ(recompute_modes_from_modules("transformer", 3, "job.toml"), Modes(3, full));
  EXPECT_EQ(recompute_modes_from_modules("GPT2Block", 3, "job.toml"), Modes(3, full));
  EXPECT_EQ(recompute_modes_from_modules("h", 3, "job.toml"), Modes(3, full));
  EXPECT_EQ(recompute_modes_from_modules("h.1", 3, "job.toml"), (Modes{none, full, none}));
  EXPECT_EQ(recompute_modes_from_modules("transformer.h.2", 3, "job.toml"),
            (Modes{none, none, full}));
  EXPECT_EQ(recompute_modes_from_modules("core_attention", 3, "job.toml"), Modes(3, selective));
  EXPECT_EQ(recompute_modes_from_modules(" transformer.h.0 , attn.core_attention,", 3, "job.toml"),
            (Modes{full, selective, selective}));
  EXPECT_EQ(recompute_modes_from_modules("h.1.attn.core_attention", 3, "job.toml"),
            (Modes{none, selective, none}));
  // "h.1" is a dotted suffix of transformer.h.1 only, not of transformer.h.11.
  Modes twelve(12, none);
  twelve[1] = full;
  EXPECT_EQ(recompute_modes_from_modules("h.1", 12, "job.toml"), twelve);
}

TEST(RecomputeModulesTest, UnknownModulesAreErrors) {
  for (const char* entry : {"layer", "former", "h.4", "attn", "ROOT.h"}) {
    try {
      recompute_modes_from_modules(entry, 4, "job.toml");
      ADD_FAILURE() << entry << " was accepted";
    } catch (const std::runtime_error& error) {
      EXPECT_NE(std::string(error.what())
                    .find(std::string("job.toml: [planner] recompute_modules entry '") + entry +
                          "' names no module; valid module names"),
                std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find("transformer.h.<i> for i in 0..3"),
                std::string::npos);
    }
  }
}

TEST(WorldOnePlanTest, DefaultsToOneMicroBatchWhenItFits) {
  const PlanCandidate plan = best();
  EXPECT_EQ(plan.setting.shape.pipeline_stages * plan.setting.shape.data_parallel *
                plan.setting.shape.tensor_parallel,
            1);
  // One device: the step is m x slot + tail, equal for every split of the batch;
  // the tie goes to the largest micro-batch.
  EXPECT_EQ(plan.setting.micro_batch_size, 8);
  EXPECT_EQ(plan.setting.num_micro_batches, 1);
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_EQ(plan.stages[0].num_layers, 4);
  EXPECT_TRUE(plan.stages[0].has_embedding);
  EXPECT_TRUE(plan.stages[0].has_head);
  EXPECT_EQ(plan.estimate.prediction.bubble_ratio, 0.0);
  EXPECT_GT(plan.estimate.prediction.tokens_per_second, 0.0);
  EXPECT_GT(plan.estimate.prediction.mfu, 0.0);
  EXPECT_LT(plan.estimate.prediction.mfu, 1.0);
}

TEST(WorldOnePlanTest, MicroBatchingFromConfig) {
  const PlanCandidate fixed = best({{"training.micro_batch_size", "2"}});
  EXPECT_EQ(fixed.setting.micro_batch_size, 2);
  EXPECT_EQ(fixed.setting.num_micro_batches, 4);
  EXPECT_EQ(best({{"planner.micro_batch_size", "4"}}).setting.num_micro_batches, 2);
  const PlanCandidate by_count = best({{"planner.update_freq", "8"}});
  EXPECT_EQ(by_count.setting.micro_batch_size, 1);
  EXPECT_EQ(by_count.setting.num_micro_batches, 8);
  EXPECT_EQ(best({{"planner.update_freq", "2"}, {"planner.micro_batch_size", "4"}})
                .setting.num_micro_batches,
            2);

  EXPECT_NE(plan_error({{"training.micro_batch_size", "3"}})
                .find("job.toml: [training] global_batch_size (8) must be divisible by "
                      "[training] micro_batch_size (3) x data-parallel degree (1)"),
            std::string::npos);
  EXPECT_NE(plan_error({{"planner.update_freq", "3"}})
                .find("must be divisible by [planner] update_freq (3)"),
            std::string::npos);
  EXPECT_NE(plan_error({{"planner.update_freq", "4"}, {"planner.micro_batch_size", "4"}})
                .find("[planner] micro_batch_size (4) x [planner] update_freq (4) x "
                      "data-parallel degree (1) must equal [training] global_batch_size (8)"),
            std::string::npos);
}

TEST(WorldOnePlanTest, ShrinksMicroBatchesToFitMemory) {
  const JobConfig base = job();
  const StageLayout whole{0, 4, true, true, std::vector<RecomputeMode>(4, RecomputeMode::None)};
  const MemoryBreakdown at2 = stage_memory(base.model, base.planner, whole, 0, {}, 2, 4);
  const MemoryBreakdown at4 = stage_memory(base.model, base.planner, whole, 0, {}, 4, 2);
  ASSERT_LT(at2.total(), at4.total());
  // A limit between the two totals admits micro-batches of 2 without recompute
  // (recompute would cost time for nothing).
  const double limit_gb = (at2.total() + at4.total()) / 2.0 / (1024.0 * 1024 * 1024);
  const PlanCandidate plan = best({{"planner.memory_constraint", std::to_string(limit_gb)}});
  EXPECT_EQ(plan.setting.micro_batch_size, 2);
  EXPECT_EQ(plan.setting.num_micro_batches, 4);
  EXPECT_EQ(plan.estimate.stages[0].memory.total(), at2.total());

  const std::string message = plan_error({{"planner.memory_constraint", "0.0001"}});
  EXPECT_NE(message.find("job.toml: no feasible plan for 1 devices (1 node x 1). Memory binds: "
                         "with pp 1 x dp 1 x tp 1, micro-batch 1 x 8, ZeRO 0, stage 0 "
                         "(embedding and head) needs 0.0"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("GB with 4 blocks at micro-batch 1 with full recompute; "
                         "the limit is 0.0001 GB (memory_constraint)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("Raise memory_constraint, add recompute"), std::string::npos) << message;
  // consider_mem = false plans anyway.
  EXPECT_EQ(best({{"planner.memory_constraint", "0.0001"}, {"planner.consider_mem", "false"}})
                .setting.micro_batch_size,
            8);
}

TEST(WorldOnePlanTest, RecomputeReducesMemoryAndAddsBackwardTime) {
  const PlanCandidate plain = best();
  const PlanCandidate full = best({{"planner.recompute_modules", "ROOT"}});
  EXPECT_EQ(full.stages[0].recompute, std::vector<RecomputeMode>(4, RecomputeMode::Full));
  EXPECT_LT(full.estimate.stages[0].memory.activations,
            plain.estimate.stages[0].memory.activations);
  EXPECT_DOUBLE_EQ(full.estimate.stages[0].forward_seconds,
                   plain.estimate.stages[0].forward_seconds);
  EXPECT_GT(full.estimate.stages[0].backward_seconds, plain.estimate.stages[0].backward_seconds);
}

const schema::Plan& read_back(const std::vector<uint8_t>& bytes) {
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  EXPECT_TRUE(schema::VerifyPlanBuffer(verifier));
  EXPECT_TRUE(schema::PlanBufferHasIdentifier(bytes.data()));
  return *schema::GetPlan(bytes.data());
}

TEST(WorldOnePlanTest, FieldsRoundTrip) {
  const JobConfig config = job({{"training.micro_batch_size", "2"},
                                {"planner.recompute_modules", "h.0,core_attention"},
                                {"planner.zero_stage", "1"},
                                {"planner.pipeline_scheduler", "gpipe"},
                                {"model.dtype", "bfloat16"},
                                {"cluster.preset", "h100-sxm"}});
  const PlanCandidate decided = search_plans(config).ranked.front();
  const std::vector<uint8_t> bytes = plan_job(config).plan;
  const schema::Plan& plan = read_back(bytes);

  EXPECT_EQ(plan.header()->schema_version(), kPlanSchemaVersion);
  EXPECT_EQ(plan.header()->task_name()->str(), "tiny");
  EXPECT_EQ(plan.header()->planner_version()->str(), kPlannerVersion);
  std::map<std::string, std::string> options;
  for (const schema::KeyValue* entry : *plan.header()->creation_options())
    options[entry->key()->str()] = entry->value()->str();
  EXPECT_EQ(options.size(), job_config_options(config).size());
  EXPECT_EQ(options["planner.recompute_modules"], "h.0,core_attention");
  EXPECT_EQ(options["planner.memory_constraint"], "32");
  EXPECT_EQ(options["planner.pipeline_nstages"], "auto");

  const schema::Model& model = *plan.model();
  EXPECT_EQ(model.vocab_size(), 256);
  EXPECT_EQ(model.num_layers(), 4);
  EXPECT_EQ(model.ffn_size(), 256);
  EXPECT_EQ(model.dtype(), schema::DType::BFloat16);
  EXPECT_FLOAT_EQ(model.layernorm_epsilon(), 1e-5f);

  const schema::Training& training = *plan.training();
  EXPECT_EQ(training.global_batch_size(), 8);
  EXPECT_EQ(training.micro_batch_size(), 2);
  EXPECT_EQ(training.num_micro_batches(), 4);
  EXPECT_EQ(training.seed(), 1337u);
  EXPECT_FLOAT_EQ(training.optimizer()->min_learning_rate(), 6e-5f);
  EXPECT_EQ(training.optimizer()->warmup_steps(), 10);
  EXPECT_EQ(training.optimizer()->total_steps(), 100);

  EXPECT_EQ(plan.mesh()->pipeline_parallel(), 1);
  EXPECT_EQ(plan.mesh()->num_nodes(), 1);
  EXPECT_EQ(plan.mesh()->devices_per_node(), 1);
  const schema::Stage& stage = *plan.stages()->Get(0);
  EXPECT_EQ(stage.num_layers(), 4);
  const std::vector<RecomputeMode> recompute(stage.recompute()->begin(), stage.recompute()->end());
  EXPECT_EQ(recompute,
            (std::vector<RecomputeMode>{RecomputeMode::Full, RecomputeMode::Selective,
                                        RecomputeMode::Selective, RecomputeMode::Selective}));
  EXPECT_EQ(plan.zero()->stage(), 1);
  EXPECT_EQ(plan.zero()->num_groups(), 1);

  EXPECT_EQ(plan.schedule()->kind(), schema::ScheduleKind::GPipe);
  InstructionStream stream;
  for (const schema::Instruction* ins : *plan.schedule()->stages()->Get(0)->instructions())
    stream.push_back({ins->op(), ins->micro_batch(), ins->chunk()});
  EXPECT_EQ(stream, generate_gpipe(1, 4).stages[0]);

  const schema::Predictions& predictions = *plan.predictions();
  EXPECT_DOUBLE_EQ(predictions.step_seconds(), decided.estimate.prediction.step_seconds);
  EXPECT_DOUBLE_EQ(predictions.mfu(), decided.estimate.prediction.mfu);
  EXPECT_DOUBLE_EQ(predictions.stages()->Get(0)->forward_seconds(),
                   decided.estimate.stages[0].forward_seconds);
  const schema::StageMemory& memory = *predictions.stages()->Get(0)->memory();
  EXPECT_EQ(memory.weights(), 2u * stage_parameters(config.model, decided.stages[0]));
  EXPECT_EQ(memory.total(), decided.estimate.stages[0].memory.total());
  EXPECT_EQ(memory.weights() + memory.gradients() + memory.optimizer_state() +
                memory.activations() + memory.transient(),
            memory.total());
  const schema::Cluster& cluster = *predictions.cluster();
  EXPECT_EQ(cluster.name()->str(), "h100-sxm");
  EXPECT_DOUBLE_EQ(cluster.peak_flops(), 989e12);
  EXPECT_EQ(cluster.device_memory_bytes(), static_cast<uint64_t>(79.6 * (1ull << 30)));
  EXPECT_EQ(cluster.reserved_memory_bytes(), 2ull << 30);
  EXPECT_EQ(allocatable_device_memory_bytes(cluster),
            static_cast<uint64_t>(79.6 * (1ull << 30)) - (2ull << 30));
  EXPECT_DOUBLE_EQ(cluster.intra_node_bandwidth(), 450e9);
}

TEST(WorldOnePlanTest, PlansPassValidatePlan) {
  for (const std::vector<ConfigOverride>& overrides : std::vector<std::vector<ConfigOverride>>{
           {},
           {{"training.micro_batch_size", "1"}},
           {{"planner.update_freq", "4"}, {"planner.pipeline_scheduler", "gpipe"}},
           {{"planner.recompute_modules", "ROOT"}, {"model.tied_embeddings", "false"}}}) {
    const std::vector<uint8_t> bytes = plan_job(job(overrides)).plan;
    const std::vector<std::string> problems = validate_plan(*schema::GetPlan(bytes.data()));
    std::string joined;
    for (const std::string& problem : problems) joined += problem + "\n";
    EXPECT_TRUE(problems.empty()) << joined;
    EXPECT_NO_THROW(load_plan_from_bytes("world-one.pplan", bytes));
  }
}

}  // namespace
}  // namespace paraplan
