// single_rank_planner_test.cc: recompute module matching, micro-batch choice,
// rejections, and the serialized plan (round trip and validate_plan).
#include "planner/single_rank_planner.h"

#include <gtest/gtest.h>

#include <map>

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

std::string plan_error(const std::vector<ConfigOverride>& overrides) {
  try {
    plan_single_rank(job(overrides));
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

TEST(SingleRankPlannerTest, DefaultsToOneMicroBatchWhenItFits) {
  const SingleRankPlan plan = plan_single_rank(job());
  EXPECT_EQ(plan.micro_batch_size, 8);
  EXPECT_EQ(plan.num_micro_batches, 1);
  EXPECT_EQ(plan.stage.num_layers, 4);
  EXPECT_TRUE(plan.stage.has_embedding);
  EXPECT_TRUE(plan.stage.has_head);
  EXPECT_EQ(plan.schedule.stages.size(), 1u);
  EXPECT_EQ(plan.prediction.bubble_ratio, 0.0);
  EXPECT_GT(plan.prediction.tokens_per_second, 0.0);
  EXPECT_GT(plan.prediction.mfu, 0.0);
  EXPECT_LE(plan.prediction.mfu, kComputeEfficiency);
}

TEST(SingleRankPlannerTest, MicroBatchingFromConfig) {
  const SingleRankPlan fixed = plan_single_rank(job({{"training.micro_batch_size", "2"}}));
  EXPECT_EQ(fixed.micro_batch_size, 2);
  EXPECT_EQ(fixed.num_micro_batches, 4);
  const InstructionStream& stream = fixed.schedule.stages[0];
  EXPECT_EQ(stream.size(), 4u * 3 + 2);  // Load, Forward, Backward per micro-batch

  const SingleRankPlan autodist = plan_single_rank(job({{"planner.micro_batch_size", "4"}}));
  EXPECT_EQ(autodist.micro_batch_size, 4);
  EXPECT_EQ(autodist.num_micro_batches, 2);
  const SingleRankPlan by_count = plan_single_rank(job({{"planner.update_freq", "8"}}));
  EXPECT_EQ(by_count.micro_batch_size, 1);
  EXPECT_EQ(by_count.num_micro_batches, 8);
  const SingleRankPlan both =
      plan_single_rank(job({{"planner.update_freq", "2"}, {"planner.micro_batch_size", "4"}}));
  EXPECT_EQ(both.num_micro_batches, 2);

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

TEST(SingleRankPlannerTest, ShrinksMicroBatchesToFitMemory) {
  const JobConfig base = job();
  const MemoryBreakdown at2 =
      stage_memory(base.model, base.planner, plan_single_rank(base).stage, 0, {}, 2, 4);
  const MemoryBreakdown at4 =
      stage_memory(base.model, base.planner, plan_single_rank(base).stage, 0, {}, 4, 2);
  ASSERT_LT(at2.total(), at4.total());
  // A limit between the two totals admits micro-batches of 2 but not 4.
  const double limit_gb = (at2.total() + at4.total()) / 2.0 / (1024.0 * 1024 * 1024);
  const SingleRankPlan plan =
      plan_single_rank(job({{"planner.memory_constraint", std::to_string(limit_gb)}}));
  EXPECT_EQ(plan.micro_batch_size, 2);
  EXPECT_EQ(plan.num_micro_batches, 4);
  EXPECT_EQ(plan.memory.total(), at2.total());

  const std::string message = plan_error({{"planner.memory_constraint", "0.0001"}});
  EXPECT_NE(message.find("job.toml: the job does not fit [planner] memory_constraint = 0.0001 GB "
                         "on one device at micro_batch_size 1 (weights"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("recompute_modules"), std::string::npos);
  // consider_mem = false plans anyway.
  EXPECT_EQ(plan_single_rank(
                job({{"planner.memory_constraint", "0.0001"}, {"planner.consider_mem", "false"}}))
                .micro_batch_size,
            8);
}

TEST(SingleRankPlannerTest, RecomputeReducesMemoryAndAddsBackwardTime) {
  const SingleRankPlan plain = plan_single_rank(job());
  const SingleRankPlan full = plan_single_rank(job({{"planner.recompute_modules", "ROOT"}}));
  EXPECT_EQ(full.stage.recompute, std::vector<RecomputeMode>(4, RecomputeMode::Full));
  EXPECT_LT(full.memory.activations, plain.memory.activations);
  EXPECT_DOUBLE_EQ(full.time.forward_seconds, plain.time.forward_seconds);
  EXPECT_GT(full.time.backward_seconds, plain.time.backward_seconds);
}

TEST(SingleRankPlannerTest, RejectsMultiRankSettings) {
  for (const char* key : {"planner.world_size", "planner.mesh_col", "planner.pipeline_nstages",
                          "planner.tensor_parallel_degree", "planner.data_parallel_degree"}) {
    std::vector<ConfigOverride> overrides = {{key, "2"}};
    if (std::string(key) == "planner.mesh_col") overrides.push_back({"planner.world_size", "2"});
    const std::string message = plan_error(overrides);
    EXPECT_NE(message.find("this planner version plans world size 1 only; multi-rank planning "
                           "arrives with the search"),
              std::string::npos)
        << key << ": " << message;
  }
  EXPECT_NE(plan_error({{"planner.is_train", "false"}}).find("inference plans are not supported"),
            std::string::npos);
}

// The serialized plan, read back through the generated accessors.
const schema::Plan& read_back(const std::vector<uint8_t>& bytes) {
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  EXPECT_TRUE(schema::VerifyPlanBuffer(verifier));
  EXPECT_TRUE(schema::PlanBufferHasIdentifier(bytes.data()));
  return *schema::GetPlan(bytes.data());
}

TEST(SingleRankPlanTest, FieldsRoundTrip) {
  const JobConfig config = job({{"training.micro_batch_size", "2"},
                                {"planner.recompute_modules", "h.0,core_attention"},
                                {"planner.zero_stage", "1"},
                                {"planner.pipeline_scheduler", "gpipe"},
                                {"model.dtype", "bfloat16"},
                                {"cluster.preset", "h100-sxm"}});
  const SingleRankPlan decided = plan_single_rank(config);
  const std::vector<uint8_t> bytes = serialize_single_rank_plan(config, decided);
  const schema::Plan& plan = read_back(bytes);

  EXPECT_EQ(plan.header()->schema_version(), 1u);
  EXPECT_EQ(plan.header()->task_name()->str(), "tiny");
  EXPECT_EQ(plan.header()->planner_version()->str(), "0.1.0");
  std::map<std::string, std::string> options;
  for (const schema::KeyValue* entry : *plan.header()->creation_options())
    options[entry->key()->str()] = entry->value()->str();
  EXPECT_EQ(options.size(), job_config_options(config).size());
  EXPECT_EQ(options["planner.recompute_modules"], "h.0,core_attention");
  EXPECT_EQ(options["planner.memory_constraint"], "32");
  EXPECT_EQ(options["planner.pipeline_nstages"], "auto");

  const schema::Model& model = *plan.model();
  EXPECT_EQ(model.vocab_size(), 256);
  EXPECT_EQ(model.seq_len(), 64);
  EXPECT_EQ(model.num_layers(), 4);
  EXPECT_EQ(model.d_model(), 64);
  EXPECT_EQ(model.num_heads(), 4);
  EXPECT_EQ(model.ffn_size(), 256);
  EXPECT_TRUE(model.tied_embeddings());
  EXPECT_EQ(model.dtype(), schema::DType::BFloat16);
  EXPECT_FLOAT_EQ(model.layernorm_epsilon(), 1e-5f);

  const schema::Training& training = *plan.training();
  EXPECT_EQ(training.global_batch_size(), 8);
  EXPECT_EQ(training.micro_batch_size(), 2);
  EXPECT_EQ(training.num_micro_batches(), 4);
  EXPECT_EQ(training.seed(), 1337u);
  EXPECT_EQ(training.eval_batches(), 8);
  EXPECT_FLOAT_EQ(training.optimizer()->learning_rate(), 6e-4f);
  EXPECT_FLOAT_EQ(training.optimizer()->min_learning_rate(), 6e-5f);
  EXPECT_FLOAT_EQ(training.optimizer()->beta2(), 0.95f);
  EXPECT_EQ(training.optimizer()->warmup_steps(), 10);
  EXPECT_EQ(training.optimizer()->total_steps(), 100);
  EXPECT_EQ(training.optimizer()->decay_style(), schema::LrDecayStyle::Cosine);

  EXPECT_EQ(plan.mesh()->pipeline_parallel(), 1);
  EXPECT_EQ(plan.mesh()->data_parallel(), 1);
  EXPECT_EQ(plan.mesh()->tensor_parallel(), 1);
  EXPECT_EQ(plan.mesh()->num_nodes(), 1);
  EXPECT_EQ(plan.mesh()->devices_per_node(), 1);
  ASSERT_EQ(plan.stages()->size(), 1u);
  const schema::Stage& stage = *plan.stages()->Get(0);
  EXPECT_EQ(stage.first_layer(), 0);
  EXPECT_EQ(stage.num_layers(), 4);
  EXPECT_TRUE(stage.has_embedding());
  EXPECT_TRUE(stage.has_head());
  const std::vector<RecomputeMode> recompute(stage.recompute()->begin(), stage.recompute()->end());
  EXPECT_EQ(recompute,
            (std::vector<RecomputeMode>{RecomputeMode::Full, RecomputeMode::Selective,
                                        RecomputeMode::Selective, RecomputeMode::Selective}));
  EXPECT_EQ(plan.zero()->stage(), 1);
  EXPECT_EQ(plan.zero()->num_groups(), 1);

  EXPECT_EQ(plan.schedule()->kind(), schema::ScheduleKind::GPipe);
  ASSERT_EQ(plan.schedule()->stages()->size(), 1u);
  InstructionStream stream;
  for (const schema::Instruction* ins : *plan.schedule()->stages()->Get(0)->instructions())
    stream.push_back({ins->op(), ins->micro_batch(), ins->peer_micro_batch()});
  EXPECT_EQ(stream, generate_gpipe(1, 4).stages[0]);

  const schema::Predictions& predictions = *plan.predictions();
  EXPECT_DOUBLE_EQ(predictions.step_seconds(), decided.prediction.step_seconds);
  EXPECT_DOUBLE_EQ(predictions.mfu(), decided.prediction.mfu);
  EXPECT_DOUBLE_EQ(predictions.stages()->Get(0)->forward_seconds(), decided.time.forward_seconds);
  const schema::StageMemory& memory = *predictions.stages()->Get(0)->memory();
  EXPECT_EQ(memory.weights(), decided.memory.weights);
  EXPECT_EQ(memory.weights(), 2u * stage_parameters(config.model, decided.stage));
  EXPECT_EQ(memory.activations(), decided.memory.activations);
  EXPECT_EQ(memory.total(), decided.memory.total());
  EXPECT_EQ(memory.weights() + memory.gradients() + memory.optimizer_state() +
                memory.activations() + memory.transient(),
            memory.total());
  const schema::Cluster& cluster = *predictions.cluster();
  EXPECT_EQ(cluster.name()->str(), "h100-sxm");
  EXPECT_DOUBLE_EQ(cluster.peak_flops(), 989e12);
  EXPECT_EQ(cluster.device_memory_bytes(), 80ull << 30);
  EXPECT_DOUBLE_EQ(cluster.intra_node_bandwidth(), 450e9);
  EXPECT_DOUBLE_EQ(cluster.intra_node_latency(), 5e-6);
}

TEST(SingleRankPlanTest, PlansPassValidatePlan) {
  for (const std::vector<ConfigOverride>& overrides : std::vector<std::vector<ConfigOverride>>{
           {},
           {{"training.micro_batch_size", "1"}},
           {{"planner.update_freq", "4"}, {"planner.pipeline_scheduler", "gpipe"}},
           {{"planner.recompute_modules", "ROOT"}, {"model.tied_embeddings", "false"}}}) {
    const std::vector<uint8_t> bytes = build_single_rank_plan(job(overrides));
    const std::vector<std::string> problems = validate_plan(*schema::GetPlan(bytes.data()));
    std::string joined;
    for (const std::string& problem : problems) joined += problem + "\n";
    EXPECT_TRUE(problems.empty()) << joined;
    // The one door into the runtime accepts it as well.
    EXPECT_NO_THROW(load_plan_from_bytes("single-rank.pplan", bytes));
  }
}

}  // namespace
}  // namespace paraplan
