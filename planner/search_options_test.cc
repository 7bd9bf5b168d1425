// search_options_test.cc: every option group changes the search's result the
// way the option mapping in planner/README.md says; fixed degrees, filters,
// topk, nproc, solver and verbose; bad input and infeasible jobs get errors
// naming the field and the binding constraint.
#include <gtest/gtest.h>

#include "planner/cost/model_counts.h"
#include "planner/plan_report.h"
#include "planner/planner.h"
#include "planner/planner_test_support.h"
#include "planner/search/plan_search.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

using test_jobs::eight_device_job;

SearchResult search(const std::vector<ConfigOverride>& overrides = {}) {
  return search_plans(eight_device_job(overrides));
}

std::string error_of(const std::vector<ConfigOverride>& overrides) {
  try {
    plan_job(eight_device_job(overrides));
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

const PlanCandidate& best(const SearchResult& result) {
  return result.ranked.front();
}

TEST(SearchOptionsTest, MemoryConstraintBindsAndConsiderMemLiftsIt) {
  const SearchResult loose = search();
  EXPECT_EQ(recompute_summary(best(loose)), "none");
  // A limit below the plan's peak forces recompute, smaller micro-batches or more
  // model parallelism, and every stage fits it.
  const double limit_gb = best(loose).estimate.peak_memory * 0.3 / (1 << 30);
  const SearchResult tight = search({{"planner.memory_constraint", std::to_string(limit_gb)}});
  for (const PlanCandidate& plan : tight.ranked)
    for (const StageEstimate& stage : plan.estimate.stages)
      EXPECT_LE(stage.memory.total(), limit_gb * (1 << 30));
  EXPECT_GT(best(tight).estimate.prediction.step_seconds,
            best(loose).estimate.prediction.step_seconds);
  // consider_mem = false ignores any limit.
  const SearchResult ignored =
      search({{"planner.memory_constraint", "0.00001"}, {"planner.consider_mem", "false"}});
  EXPECT_DOUBLE_EQ(best(ignored).estimate.prediction.step_seconds,
                   best(loose).estimate.prediction.step_seconds);
}

TEST(SearchOptionsTest, MemoryCoefficientsAndGranularity) {
  const std::vector<ConfigOverride> fixed = {{"planner.zero_stage", "0"},
                                             {"planner.tensor_parallel_degree", "1"},
                                             {"planner.pipeline_nstages", "1"},
                                             {"training.micro_batch_size", "2"}};
  auto memory = [&](std::vector<ConfigOverride> extra) {
    extra.insert(extra.end(), fixed.begin(), fixed.end());
    return best(search(extra)).estimate.stages[0].memory;
  };
  const MemoryBreakdown base = memory({});
  EXPECT_EQ(base.optimizer_state, 2 * base.weights);  // opt_resident_coef = 2
  EXPECT_EQ(memory({{"planner.opt_resident_coef", "6"}}).optimizer_state, 6 * base.weights);
  EXPECT_EQ(memory({{"planner.opt_transient_coef", "2"}}).optimizer_transient, 2 * base.weights);
  EXPECT_EQ(memory({{"planner.transient_mem_coef", "4"}}).transient, 2 * base.transient);
  // Without the op-output estimate, the stage's gradient scratch remains.
  const JobConfig job = eight_device_job(fixed);
  EXPECT_EQ(memory({{"planner.transient_mem_coef", "0"}}).transient,
            static_cast<uint64_t>(stage_workspace_bytes(job.model, 2, 1, true)));
  const MemoryBreakdown rounded = memory({{"planner.memory_granularity", "1048576"}});
  for (uint64_t part : {rounded.weights, rounded.gradients, rounded.optimizer_state,
                        rounded.activations, rounded.transient})
    EXPECT_EQ(part % 1048576, 0u);
  EXPECT_GE(rounded.total(), base.total());
  // is_train = false: inference memory, no gradients, optimizer state or kept activations.
  const MemoryBreakdown inference = memory({{"planner.is_train", "false"}});
  EXPECT_EQ(inference.gradients + inference.optimizer_state + inference.activations, 0u);
  EXPECT_EQ(inference.weights, base.weights);
  // ignore_small_tensor_threshold: tensors below it are not split by TP.
  const MemoryBreakdown split =
      best(search({{"planner.tensor_parallel_degree", "2"}, {"planner.pipeline_nstages", "1"}}))
          .estimate.stages[0]
          .memory;
  const MemoryBreakdown whole =
      best(search({{"planner.tensor_parallel_degree", "2"},
                   {"planner.pipeline_nstages", "1"},
                   {"planner.ignore_small_tensor_threshold", "1000000000"}}))
          .estimate.stages[0]
          .memory;
  EXPECT_EQ(whole.weights, base.weights);  // nothing split: tp 2 holds the whole model
  EXPECT_LT(split.weights, whole.weights);
}

TEST(SearchOptionsTest, RecomputeModulesForceRecomputeWhereNamed) {
  const SearchResult result = search({{"planner.recompute_modules", "h.1, h.6.attn.core_attention"},
                                      {"planner.pipeline_nstages", "2"}});
  for (const PlanCandidate& plan : result.ranked) {
    std::vector<RecomputeMode> modes;
    for (const StageLayout& stage : plan.stages)
      modes.insert(modes.end(), stage.recompute.begin(), stage.recompute.end());
    EXPECT_EQ(modes[1], RecomputeMode::Full);
    EXPECT_NE(modes[6], RecomputeMode::None);
  }
}

TEST(SearchOptionsTest, ZeroStageAndGroups) {
  // Unset, the search tries both; with room to spare ZeRO-1 only adds communication.
  const SearchResult searched = search();
  bool saw_zero = false;
  for (const PlanCandidate& plan : searched.ranked) saw_zero |= plan.setting.zero_stage == 1;
  EXPECT_TRUE(saw_zero);
  for (const PlanCandidate& plan : search({{"planner.zero_stage", "0"}}).ranked)
    EXPECT_EQ(plan.setting.zero_stage, 0);
  const SearchResult grouped = search({{"planner.zero_stage", "1"},
                                       {"planner.zero_ngroups", "2"},
                                       {"planner.data_parallel_degree", "4"}});
  for (const PlanCandidate& plan : grouped.ranked) {
    EXPECT_EQ(plan.setting.zero_ngroups, 2);
    // The state is sharded over 4 / 2 = 2 ranks.
    const StageEstimate& stage = plan.estimate.stages[0];
    EXPECT_EQ(stage.memory.optimizer_state, stage.memory.weights);  // 2 x weights / 2
  }
  EXPECT_NE(error_of({{"planner.zero_ngroups", "3"}, {"planner.data_parallel_degree", "4"}})
                .find("job.toml: [planner] zero_ngroups = 3 does not divide [planner] "
                      "data_parallel_degree = 4"),
            std::string::npos);
}

TEST(SearchOptionsTest, PipelineOptions) {
  for (const PlanCandidate& plan : search({{"planner.pipeline_nstages", "4"}}).ranked)
    EXPECT_EQ(plan.setting.shape.pipeline_stages, 4);
  // Pivots: a stage may begin only at block 3 or 6.
  for (const PlanCandidate& plan : search({{"planner.pipeline_pivots", "h.3, transformer.h.6"},
                                           {"planner.pipeline_nstages", "2"},
                                           {"planner.max_pipeline_unbalance_ratio", "0"}})
                                       .ranked) {
    const int boundary = plan.stages[1].first_layer;
    EXPECT_TRUE(boundary == 3 || boundary == 6) << boundary;
  }
  EXPECT_NE(error_of({{"planner.pipeline_pivots", "h.9"}})
                .find("job.toml: [planner] pipeline_pivots entry 'h.9' names no module"),
            std::string::npos);
  // GPipe keeps every micro-batch in flight: more activation memory than 1F1B.
  const std::vector<ConfigOverride> two_stages = {{"planner.pipeline_nstages", "2"},
                                                  {"planner.data_parallel_degree", "1"},
                                                  {"training.micro_batch_size", "1"}};
  std::vector<ConfigOverride> gpipe = two_stages;
  gpipe.push_back({"planner.pipeline_scheduler", "gpipe"});
  EXPECT_GT(best(search(gpipe)).estimate.stages[1].memory.activations,
            best(search(two_stages)).estimate.stages[1].memory.activations);
  // max_pipeline_bubble_ratio = 0 leaves only plans without a pipeline; each
  // refusal states the formula of its kind's value (ZB-V: interleaved's at v 2).
  const SearchResult no_bubble = search({{"planner.max_pipeline_bubble_ratio", "0"}});
  for (const PlanCandidate& plan : no_bubble.ranked)
    EXPECT_EQ(plan.setting.shape.pipeline_stages, 1);
  int v_shaped = 0;
  for (const SettingRejection& rejection : no_bubble.rejections)
    if (rejection.setting.schedule.kind == schema::ScheduleKind::ZeroBubbleV) {
      EXPECT_NE(rejection.reason.find("= ((p - 1) / v) / (m + (p - 1) / v) exceeds"),
                std::string::npos)
          << rejection.reason;
      ++v_shaped;
    }
  EXPECT_GT(v_shaped, 0);
  // max_pipeline_unbalance_ratio: every ranked pipeline is at least that balanced.
  for (const char* ratio : {"0.5", "0.9"})
    for (const PlanCandidate& plan :
         search({{"planner.max_pipeline_unbalance_ratio", ratio}}).ranked)
      if (plan.setting.shape.pipeline_stages > 1) {
        EXPECT_GE(plan.estimate.unbalance_ratio, std::stod(ratio));
      }
}

TEST(SearchOptionsTest, SequenceParallelAutoTrueAndFalse) {
  // 'auto' (the default): every tp > 1 mesh twice, with and without.
  const SearchResult automatic = search({{"planner.topk", "1000"}});
  int with = 0, without_tp = 0;
  for (const ParallelShape& shape : automatic.space.meshes) {
    with += shape.sequence_parallel;
    without_tp += shape.tensor_parallel > 1 && !shape.sequence_parallel;
    EXPECT_TRUE(!shape.sequence_parallel || shape.tensor_parallel > 1);
  }
  EXPECT_GT(with, 0);
  EXPECT_EQ(with, without_tp);
  bool ranked_with = false;
  for (const PlanCandidate& plan : automatic.ranked)
    ranked_with |= plan.setting.shape.sequence_parallel;
  EXPECT_TRUE(ranked_with);
  for (const PlanCandidate& plan : search({{"planner.sequence_parallel", "false"}}).ranked)
    EXPECT_FALSE(plan.setting.shape.sequence_parallel);
  for (const PlanCandidate& plan : search({{"planner.sequence_parallel", "true"}}).ranked)
    EXPECT_EQ(plan.setting.shape.sequence_parallel, plan.setting.shape.tensor_parallel > 1);
  // The plan file says it.
  const PlanOutcome written = plan_job(eight_device_job(
      {{"planner.sequence_parallel", "true"}, {"planner.tensor_parallel_degree", "2"}}));
  EXPECT_TRUE(schema::GetPlan(written.plan.data())->mesh()->sequence_parallel());
  // Sequence parallelism saves activation memory where memory binds: a limit
  // the plain tp 8 plans cannot meet leaves sequence-parallel ones.
  const std::vector<ConfigOverride> tight = {{"planner.tensor_parallel_degree", "8"},
                                             {"training.micro_batch_size", "16"},
                                             {"planner.recompute_modules", "ROOT"}};
  std::vector<ConfigOverride> plain = tight;
  plain.push_back({"planner.sequence_parallel", "false"});
  const double plain_memory = static_cast<double>(best(search(plain)).estimate.peak_memory);
  std::vector<ConfigOverride> limited = tight;
  limited.push_back({"planner.memory_constraint", std::to_string(plain_memory * 0.9 / (1 << 30))});
  const SearchResult saved = search(limited);
  ASSERT_FALSE(saved.ranked.empty());
  EXPECT_TRUE(best(saved).setting.shape.sequence_parallel);
  // tp must divide seq_len (128): tp 3 does not exist here, so ask on a model
  // whose seq_len 4 devices cannot divide.
  EXPECT_NE(
      error_of({{"planner.sequence_parallel", "true"}, {"planner.tensor_parallel_degree", "1"}})
          .find("job.toml: [planner] sequence_parallel = true contradicts [planner] "
                "tensor_parallel_degree = 1"),
      std::string::npos);
  const std::string excluded = error_of({{"planner.sequence_parallel", "true"},
                                         {"planner.tensor_parallel_degree", "8"},
                                         {"model.seq_len", "100"}});
  EXPECT_NE(excluded.find("tp 8: [planner] sequence_parallel = true, but tp does not divide "
                          "seq_len 100"),
            std::string::npos)
      << excluded;
}

TEST(SearchOptionsTest, MeshAndFixedDegrees) {
  const SearchResult mesh = search({{"planner.mesh_row", "2"}, {"planner.mesh_col", "4"}});
  EXPECT_EQ(mesh.space.layout.num_nodes, 2);
  EXPECT_EQ(mesh.space.layout.devices_per_node, 4);
  for (const PlanCandidate& plan : mesh.ranked) EXPECT_LE(plan.setting.shape.tensor_parallel, 4);
  const SearchResult scaled = search({{"planner.world_size", "16"}, {"planner.mesh_col", "4"}});
  EXPECT_EQ(scaled.space.layout.num_nodes, 4);
  for (const PlanCandidate& plan : search({{"planner.tensor_parallel_degree", "2"}}).ranked)
    EXPECT_EQ(plan.setting.shape.tensor_parallel, 2);
  for (const PlanCandidate& plan : search({{"planner.data_parallel_degree", "4"}}).ranked)
    EXPECT_EQ(plan.setting.shape.data_parallel, 4);
  // Without mesh_row / mesh_col the cluster's nodes of 8 hold the world.
  const SearchResult cluster = search({{"planner.world_size", "16"}});
  EXPECT_EQ(cluster.space.layout.num_nodes, 2);
  EXPECT_EQ(cluster.space.layout.devices_per_node, 8);
}

TEST(SearchOptionsTest, TopkNprocSolverAndVerbose) {
  const SearchResult three = search({{"planner.topk", "3"}});
  ASSERT_EQ(three.ranked.size(), 3u);
  const SearchResult twenty = search();
  EXPECT_EQ(twenty.ranked.size(), 20u);
  // The top 3 of a top-20 search are the top-3 search's.
  for (size_t i = 0; i < 3; ++i)
    EXPECT_DOUBLE_EQ(three.ranked[i].estimate.prediction.step_seconds,
                     twenty.ranked[i].estimate.prediction.step_seconds);
  const SearchResult threaded = search({{"planner.nproc", "4"}});
  ASSERT_EQ(threaded.ranked.size(), twenty.ranked.size());
  for (size_t i = 0; i < twenty.ranked.size(); ++i)
    EXPECT_DOUBLE_EQ(threaded.ranked[i].estimate.prediction.step_seconds,
                     twenty.ranked[i].estimate.prediction.step_seconds);
  const SearchResult ilp = search({{"planner.solver", "ilp"}, {"planner.topk", "3"}});
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(ilp.ranked[i].estimate.prediction.step_seconds,
                three.ranked[i].estimate.prediction.step_seconds,
                1e-9 * three.ranked[i].estimate.prediction.step_seconds);
  EXPECT_TRUE(twenty.log.empty());
  const SearchResult verbose = search({{"planner.verbose", "true"}});
  EXPECT_GE(verbose.log.size(), static_cast<size_t>(verbose.statistics.settings));
  EXPECT_NE(verbose.log.front().find("pp 1 x dp 8 x tp 1, micro-batch 2 x 1, ZeRO 0: "),
            std::string::npos)
      << verbose.log.front();
  const std::string report = plan_job(eight_device_job({{"planner.verbose", "true"}})).report;
  EXPECT_NE(report.find("best partition: step"), std::string::npos);
}

// Sizes no plan can hold are refused by name before anything is built for
// them, and no message shows an overflowed number.
TEST(SearchOptionsTest, HostileSizesAreRefusedBeforeAnythingIsBuilt) {
  const std::string micro_batches = error_of({{"training.global_batch_size", "16777216"},
                                              {"training.micro_batch_size", "1"},
                                              {"planner.data_parallel_degree", "8"}});
  EXPECT_NE(micro_batches.find("job.toml: [training] global_batch_size = 16777216 with [training] "
                               "micro_batch_size = 1 and data-parallel degree 8 makes 2097152 "
                               "micro-batches per step, more than the 16384 a plan may hold; "
                               "raise the micro-batch size"),
            std::string::npos)
      << micro_batches;
  const std::string layers = error_of({{"model.num_layers", "2147483647"},
                                       {"planner.pipeline_nstages", "16"},
                                       {"planner.world_size", "16"}});
  EXPECT_NE(layers.find("job.toml: [model] num_layers = 2147483647; must be at most 4096"),
            std::string::npos)
      << layers;
  EXPECT_EQ(layers.find("-2147483647"), std::string::npos) << layers;
  // ffn_size is left to its default, 4 x d_model, which would not fit an int.
  const std::string width = error_of({{"model.d_model", "536870912"}});
  EXPECT_NE(width.find("job.toml: [model] d_model = 536870912; must be at most 16777216 (2^24)"),
            std::string::npos)
      << width;
  EXPECT_EQ(width.find("ffn_size"), std::string::npos) << width;
  const std::pair<std::vector<ConfigOverride>, const char*> refusals[] = {
      {{{"model.ffn_size", "2147483647"}},
       "[model] ffn_size = 2147483647; must be at most 16777216"},
      {{{"training.micro_batch_size", "67108864"}, {"model.seq_len", "64"}},
       "[training] micro_batch_size = 67108864; [training] micro_batch_size x [model] seq_len = "
       "67108864 x 64 = 4294967296 rows"},
      {{{"planner.update_freq", "100000"}},
       "[planner] update_freq = 100000 is invalid; at most 16384"},
      {{{"job.name", "bad\xc3("}},
       "[job] name: byte 0x28 at offset 4 is not valid UTF-8; give UTF-8 text"}};
  for (const auto& [overrides, message] : refusals)
    EXPECT_NE(error_of(overrides).find(message), std::string::npos) << error_of(overrides);
}

TEST(SearchOptionsTest, BadInputNamesTheField) {
  EXPECT_NE(error_of({{"planner.tensor_parallel_degree", "3"}, {"planner.world_size", "3"}})
                .find("job.toml: [planner] tensor_parallel_degree = 3 does not divide [model] "
                      "num_heads = 8"),
            std::string::npos);
  EXPECT_NE(error_of({{"planner.pipeline_nstages", "3"}})
                .find("job.toml: [planner] pipeline_nstages = 3 does not divide the world size 8"),
            std::string::npos);
  EXPECT_NE(error_of({{"planner.pipeline_nstages", "2"},
                      {"planner.tensor_parallel_degree", "2"},
                      {"planner.data_parallel_degree", "1"}})
                .find("pipeline_nstages x tensor_parallel_degree x data_parallel_degree = 4 does "
                      "not equal the world size 8"),
            std::string::npos);
  EXPECT_NE(error_of({{"planner.data_parallel_degree", "8"}, {"training.global_batch_size", "12"}})
                .find("[training] global_batch_size = 12 is not divisible by [planner] "
                      "data_parallel_degree = 8"),
            std::string::npos);
  EXPECT_NE(error_of({{"planner.tensor_parallel_degree", "8"}, {"model.vocab_size", "500"}})
                .find("pad vocab_size to a multiple of 8, e.g. 504"),
            std::string::npos);
  EXPECT_NE(error_of({{"planner.mesh_col", "16"}, {"planner.world_size", "16"}})
                .find("[planner] mesh_col = 16 exceeds [cluster] devices_per_node = 8"),
            std::string::npos);
  EXPECT_NE(error_of({{"planner.pipeline_nstages", "16"}, {"planner.world_size", "16"}})
                .find("[planner] pipeline_nstages = 16 exceeds [model] num_layers + 2 = 10"),
            std::string::npos);
  for (const char* field : {"model.num_layers", "model.d_model", "training.global_batch_size"}) {
    try {
      eight_device_job({{field, "-1"}});
      ADD_FAILURE() << field;
    } catch (const std::runtime_error& error) {
      EXPECT_NE(std::string(error.what()).find("-1 is invalid"), std::string::npos) << error.what();
    }
  }
}

TEST(SearchOptionsTest, AStageLeftWithoutBlocksIsNamedWithWhatWouldHelp) {
  // A narrow GPT-2 with its 50304-token head: the head alone outweighs two
  // of the four blocks, so two 1F1B stages leave the head's without one.
  const JobConfig config = parse_job_config("", "narrow.toml",
                                            {{"model.num_layers", "4"},
                                             {"model.d_model", "64"},
                                             {"model.num_heads", "4"},
                                             {"model.seq_len", "64"},
                                             {"model.vocab_size", "50304"},
                                             {"model.ffn_size", "3072"},
                                             {"model.dtype", "bfloat16"},
                                             {"cluster.preset", "h100-sxm"},
                                             {"cluster.devices_per_node", "1"},
                                             {"training.global_batch_size", "4"},
                                             {"training.micro_batch_size", "1"},
                                             {"training.total_steps", "10"},
                                             {"planner.world_size", "2"},
                                             {"planner.pipeline_nstages", "2"},
                                             {"planner.pipeline_scheduler", "1f1b"}});
  try {
    plan_job(config);
    FAIL() << "planned";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("every pipeline stage needs a block; the best partition gives pipeline "
                        "stage 1 none (the embedding or head alone outweighs a stage of blocks): "
                        "fewer pipeline stages, or more layers"),
              std::string::npos)
        << error.what();
  }
}

TEST(SearchOptionsTest, InfeasibleJobsNameTheBindingConstraint) {
  // GPT-3 175B on one node of 8 A100s cannot fit any way.
  const JobConfig config = parse_job_config("", "gpt3.toml",
                                            {{"model.num_layers", "96"},
                                             {"model.d_model", "12288"},
                                             {"model.num_heads", "96"},
                                             {"model.seq_len", "2048"},
                                             {"model.vocab_size", "51200"},
                                             {"model.dtype", "bfloat16"},
                                             {"training.global_batch_size", "8"},
                                             {"training.total_steps", "10"},
                                             {"cluster.preset", "a100-80g"},
                                             {"planner.world_size", "8"},
                                             {"planner.memory_constraint", "80"},
                                             {"planner.opt_resident_coef", "6"},
                                             {"planner.max_pipeline_bubble_ratio", "1"},
                                             // The message of 1F1B's closest setting.
                                             {"planner.pipeline_scheduler", "1f1b"}});
  try {
    plan_job(config);
    FAIL() << "planned";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    // The most memory-friendly setting: micro-batch 1, all 8 devices on one model copy.
    EXPECT_NE(message.find("gpt3.toml: no feasible plan for 8 devices (1 node x 8). Memory binds: "
                           "with pp 8 x dp 1 x tp 1, micro-batch 1 x 8, ZeRO 0, stage 0 "
                           "(embedding) needs "),
              std::string::npos)
        << message;
    // memory_constraint 80 is above what the device offers: the device binds,
    // and the message says so instead of asking for a larger constraint.
    EXPECT_NE(message.find(" GB with 12 of the 96 blocks at micro-batch 1 with full recompute; "
                           "the limit is 78 GB (device_memory_gb 80 less reserved_memory_gb 2)"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("The device's memory binds, so raising memory_constraint cannot "
                           "help: add recompute or ZeRO-1"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("Raise memory_constraint"), std::string::npos) << message;
  }
  // Filters are named too: no pipeline may have a bubble, and one device per stage is not enough.
  const std::string filtered =
      error_of({{"planner.max_pipeline_bubble_ratio", "0"}, {"planner.memory_constraint", "0.01"}});
  EXPECT_NE(filtered.find("max_pipeline_bubble_ratio = 0"), std::string::npos) << filtered;
  EXPECT_NE(filtered.find("Memory binds"), std::string::npos) << filtered;
}

TEST(SearchOptionsTest, LlamaTensorParallelismKeepsWholeKvHeads) {
  // 8 query heads over 2 KV heads on 8 devices: the search tries only tensor
  // degrees that divide the KV heads; a fixed one that does not is refused.
  const std::vector<ConfigOverride> llama = {{"model.architecture", "llama"},
                                             {"model.num_kv_heads", "2"}};
  const SearchResult result = search(llama);
  ASSERT_FALSE(result.ranked.empty());
  for (const PlanCandidate& plan : result.ranked)
    EXPECT_LE(plan.setting.shape.tensor_parallel, 2) << plan.setting.shape.tensor_parallel;
  std::vector<ConfigOverride> fixed = llama;
  fixed.push_back({"planner.tensor_parallel_degree", "4"});
  EXPECT_NE(error_of(fixed).find("does not divide [model] num_kv_heads = 2 (each tensor-parallel "
                                 "rank holds whole KV heads)"),
            std::string::npos)
      << error_of(fixed);
}

}  // namespace
}  // namespace paraplan
