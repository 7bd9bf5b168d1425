// plan_files_test.cc: the options that read or write files: save_plan_path and
// load_plan_path (differences named, re-estimation, refusals),
// partition_constraints_path (format, effects, contradictions) and profile_dir
// with re_profile and parallel_profile.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "planner/cost/profile.h"
#include "planner/job/partition_constraints.h"
#include "planner/planner.h"
#include "planner/planner_test_support.h"
#include "planner/search/plan_search.h"
#include "schema/plan_io.h"

namespace paraplan {
namespace {

using test_jobs::eight_device_job;

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const JobConfig& config) {
  try {
    plan_job(config);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

TEST(PlannerReport, NotesAnOptimizerStateCoefficientThatMissesTheRuntime) {
  JobConfig config;
  config.model.dtype = schema::DType::Float32;
  config.planner.opt_resident_coef = 2;  // AutoDist's default: fp32 Adam
  EXPECT_EQ(optimizer_state_note(config), "");
  config.model.dtype = schema::DType::BFloat16;
  const std::string note = optimizer_state_note(config);
  EXPECT_NE(note.find("fp32 master weights"), std::string::npos) << note;
  EXPECT_NE(note.find("set planner.opt_resident_coef = 6"), std::string::npos) << note;
  config.planner.opt_resident_coef = 6;
  EXPECT_EQ(optimizer_state_note(config), "");
}

TEST(PlannerReport, NotesADefaultMemoryConstraintThatLeavesMostOfTheDeviceUnused) {
  // Llama 3 70B's preset: AutoDist's 32 GB default on an 80 GB H100.
  JobConfig h100 = test_jobs::eight_device_job({{"cluster.preset", "h100-sxm"}});
  const std::string note = memory_limit_note(h100);
  EXPECT_NE(note.find("note: planner.memory_constraint is AutoDist's default 32 GB, less than "
                      "half of the 77.6 GB a h100-sxm device offers"),
            std::string::npos)
      << note;
  EXPECT_NE(note.find("set planner.memory_constraint = 77.6 to plan for the whole device"),
            std::string::npos)
      << note;
  apply_override(h100, "planner.memory_constraint", "32");  // said on purpose: no note
  EXPECT_EQ(memory_limit_note(h100), "");
  // The cpu preset's 8 GB device is below the default: nothing to say.
  EXPECT_EQ(memory_limit_note(test_jobs::eight_device_job()), "");
}

TEST(PlanFilesTest, SaveThenLoadTheSamePlan) {
  const std::string path = testing::TempDir() + "saved.pplan";
  const PlanOutcome saved = plan_job(eight_device_job({{"planner.save_plan_path", path}}));
  EXPECT_EQ(load_plan(path).bytes(), saved.plan);
  const PlanOutcome loaded = plan_job(eight_device_job({{"planner.load_plan_path", path}}));
  EXPECT_TRUE(loaded.reused);
  EXPECT_TRUE(loaded.differences.empty());
  EXPECT_EQ(loaded.plan, saved.plan);  // nothing changed: the bytes as saved
  EXPECT_NE(loaded.report.find("the job matches the plan; the plan is used as saved"),
            std::string::npos);
}

TEST(PlanFilesTest, SequenceParallelPlansAreReusedWithIt) {
  const std::string path = testing::TempDir() + "sequence_parallel.pplan";
  const std::vector<ConfigOverride> sequence_parallel = {{"planner.tensor_parallel_degree", "2"},
                                                         {"planner.sequence_parallel", "true"}};
  std::vector<ConfigOverride> save = sequence_parallel, load = sequence_parallel;
  save.push_back({"planner.save_plan_path", path});
  load.push_back({"planner.load_plan_path", path});
  const PlanOutcome saved = plan_job(eight_device_job(save));
  ASSERT_TRUE(schema::GetPlan(saved.plan.data())->mesh()->sequence_parallel());
  // Re-estimated with it: the same prediction, so the bytes as saved.
  const PlanOutcome loaded = plan_job(eight_device_job(load));
  EXPECT_TRUE(loaded.reused);
  EXPECT_EQ(loaded.plan, saved.plan);
  load.push_back({"model.seq_len", "127"});
  EXPECT_NE(error_of(eight_device_job(load))
                .find("the plan's sequence parallelism needs its tensor-parallel degree 2 to "
                      "divide seq_len 127"),
            std::string::npos)
      << error_of(eight_device_job(load));
}

// A V plan (ZB-V, DualPipe-V) is folded back to its ranks by the V, not
// round robin: reloaded, it re-estimates to the plan as saved, with an odd
// layer count so the ranks' chunks differ. A batch too small for the
// plan's schedule is refused saying why.
TEST(PlanFilesTest, VPlansAreReusedByTheirLayout) {
  for (const char* kind : {"zb-v", "dualpipe-v"}) {
    const std::string path = testing::TempDir() + kind + ".pplan";
    std::vector<ConfigOverride> v_plan = {{"model.num_layers", "11"},
                                          {"planner.pipeline_nstages", "2"},
                                          {"planner.data_parallel_degree", "4"},
                                          {"planner.tensor_parallel_degree", "1"},
                                          {"training.micro_batch_size", "1"},
                                          {"planner.pipeline_scheduler", kind}};
    std::vector<ConfigOverride> save = v_plan, load = v_plan;
    save.push_back({"planner.save_plan_path", path});
    load.push_back({"planner.load_plan_path", path});
    const PlanOutcome saved = plan_job(eight_device_job(save));
    const schema::Plan& plan = *schema::GetPlan(saved.plan.data());
    ASSERT_EQ(plan.schedule()->virtual_stages(), 2) << kind;
    // Rank 0 holds stages 0 and 3, rank 1 stages 1 and 2: unequal chunks.
    EXPECT_NE(plan.stages()->Get(2)->num_layers(), plan.stages()->Get(3)->num_layers()) << kind;
    const PlanOutcome loaded = plan_job(eight_device_job(load));
    EXPECT_TRUE(loaded.reused) << kind;
    EXPECT_EQ(loaded.plan, saved.plan) << kind;
  }
  const std::string refused = error_of(
      eight_device_job({{"model.num_layers", "11"},
                        {"training.global_batch_size", "8"},
                        {"planner.load_plan_path", testing::TempDir() + "dualpipe-v.pplan"}}));
  EXPECT_NE(refused.find("the plan's schedule cannot run the job now: [planner] "
                         "pipeline_scheduler = 'dualpipe-v' runs at least 2 x pp = 4 "
                         "micro-batches; this setting has 2"),
            std::string::npos)
      << refused;
}

TEST(PlanFilesTest, LoadedPlansAreReestimatedAndDifferencesNamed) {
  const std::string path = testing::TempDir() + "reestimated.pplan";
  const PlanOutcome saved = plan_job(eight_device_job({{"planner.save_plan_path", path}}));
  const schema::Plan& before = *schema::GetPlan(saved.plan.data());
  // Twice the FLOP/s and another learning rate: same decisions, new predictions.
  const PlanOutcome loaded = plan_job(eight_device_job({{"planner.load_plan_path", path},
                                                        {"cluster.peak_tflops_fp32", "0.2"},
                                                        {"training.learning_rate", "0.001"}}));
  const std::vector<std::string> expected = {"training.learning_rate: plan 0.0006, now 0.001",
                                             "training.min_learning_rate: plan 6e-05, now 0.0001",
                                             "cluster.peak_tflops_fp32: plan 0.1, now 0.2"};
  EXPECT_EQ(loaded.differences, expected);
  const schema::Plan& after = *schema::GetPlan(loaded.plan.data());
  EXPECT_TRUE(validate_plan(after).empty());
  EXPECT_EQ(after.mesh()->pipeline_parallel(), before.mesh()->pipeline_parallel());
  EXPECT_EQ(after.training()->micro_batch_size(), before.training()->micro_batch_size());
  EXPECT_FLOAT_EQ(after.training()->optimizer()->learning_rate(), 0.001f);
  EXPECT_LT(after.predictions()->step_seconds(), before.predictions()->step_seconds());
  // The GEMMs take half as long; the memory-bound work as long as before.
  EXPECT_LT(after.predictions()->stages()->Get(0)->forward_seconds(),
            before.predictions()->stages()->Get(0)->forward_seconds());
  EXPECT_GT(after.predictions()->stages()->Get(0)->forward_seconds(),
            before.predictions()->stages()->Get(0)->forward_seconds() / 2);
  EXPECT_NE(loaded.report.find("cluster.peak_tflops_fp32: plan 0.1, now 0.2"), std::string::npos);

  // Inapplicable: another block count, another world, a stage that no longer fits.
  EXPECT_NE(
      error_of(eight_device_job({{"planner.load_plan_path", path}, {"model.num_layers", "6"}}))
          .find("cannot be reused: the plan's stages hold 8 blocks, the model now has 6"),
      std::string::npos);
  EXPECT_NE(
      error_of(eight_device_job({{"planner.load_plan_path", path}, {"planner.world_size", "4"}}))
          .find("the plan uses 8 devices, the job now has 4"),
      std::string::npos);
  const std::string tight = error_of(
      eight_device_job({{"planner.load_plan_path", path}, {"planner.memory_constraint", "0.001"}}));
  EXPECT_NE(tight.find("stage 0 now needs "), std::string::npos) << tight;
  EXPECT_NE(tight.find("planner.memory_constraint: plan 32, now 0.001"), std::string::npos);
  EXPECT_NE(error_of(eight_device_job(
                {{"planner.load_plan_path", testing::TempDir() + "missing.pplan"}})),
            "");
}

TEST(PlanFilesTest, PartitionConstraintsNarrowTheSearch) {
  const std::string file = write_file("constraints.toml", R"(
[[constraint]]
module = "transformer.h"
tensor_parallel = [1, 2]

[[constraint]]
module = "h.5"
stage = 0

[[constraint]]
module = "transformer.h.0.attn"
recompute = ["none"]
)");
  const SearchResult result =
      search_plans(eight_device_job({{"planner.partition_constraints_path", file},
                                     {"planner.recompute_modules", "h.1"},
                                     {"planner.pipeline_nstages", "2"},
                                     {"planner.max_pipeline_unbalance_ratio", "0"}}));
  ASSERT_FALSE(result.ranked.empty());
  for (const PlanCandidate& plan : result.ranked) {
    EXPECT_LE(plan.setting.shape.tensor_parallel, 2);
    EXPECT_GE(plan.stages[0].num_layers, 6);  // block 5 sits on stage 0
    EXPECT_EQ(plan.stages[0].recompute[0], schema::RecomputeMode::None);
    EXPECT_EQ(plan.stages[0].recompute[1], schema::RecomputeMode::Full);
  }
  // Without the pin the best 2-stage split is even.
  const SearchResult free = search_plans(eight_device_job(
      {{"planner.pipeline_nstages", "2"}, {"planner.max_pipeline_unbalance_ratio", "0"}}));
  EXPECT_LT(free.ranked.front().stages[0].num_layers, 6);
}

TEST(PlanFilesTest, PartitionConstraintErrors) {
  auto error_with = [](const std::string& text, std::vector<ConfigOverride> extra = {}) {
    const std::string file = write_file("bad_constraints.toml", text);
    extra.push_back({"planner.partition_constraints_path", file});
    return error_of(eight_device_job(extra));
  };
  EXPECT_NE(error_with("[[constraint]]\nmodule = \"h\"\ntensor_parallel = [1, 2]\n",
                       {{"planner.tensor_parallel_degree", "4"}})
                .find("constraint 1 (module 'h'): tensor_parallel does not allow 4, contradicting "
                      "job.toml [planner] tensor_parallel_degree = 4"),
            std::string::npos);
  EXPECT_NE(error_with("[[constraint]]\nmodule = \"h.2\"\nstage = 3\n",
                       {{"planner.pipeline_nstages", "2"}})
                .find("stage = 3 contradicts job.toml [planner] pipeline_nstages = 2"),
            std::string::npos);
  EXPECT_NE(error_with("[[constraint]]\nmodule = \"h.2\"\nrecompute = [\"none\"]\n",
                       {{"planner.recompute_modules", "ROOT"}})
                .find("recompute allows at most none for block 2, contradicting job.toml "
                      "[planner] recompute_modules, which asks for full"),
            std::string::npos);
  EXPECT_NE(error_with("[[constraint]]\nmodule = \"decoder\"\n")
                .find("constraint 1 module = "
                      "'decoder' names no module"),
            std::string::npos);
  // Found by fuzz/partition_constraints_fuzzer: the file's bytes went into the
  // message as they were.
  EXPECT_NE(error_with("[[constraint]]\nmodule = \"tran\\u0001sformer\"\n")
                .find("constraint 1 module = 'tran\\x01sformer' names no module"),
            std::string::npos);
  EXPECT_NE(error_with("[[constraint]]\nmodule = \"h\"\nrecompute = [\"none\", \"full\"]\n")
                .find("must be a contiguous run of none < selective < full"),
            std::string::npos);
  EXPECT_NE(error_with("[[constraint]]\nmodule = \"h\"\nshard = 2\n")
                .find("unknown key; valid keys: module, recompute, stage, tensor_parallel"),
            std::string::npos);
  EXPECT_NE(error_with("[[constraint]]\nmodule = \"wte\"\nstage = 1\n")
                .find("the embedding is always on stage 0"),
            std::string::npos);
  EXPECT_NE(
      error_of(eight_device_job({{"planner.partition_constraints_path", "/nonexistent/c.toml"}}))
          .find("[planner] partition_constraints_path: /nonexistent/c.toml: cannot read the "
                "partition constraints file: No such file or directory"),
      std::string::npos);
}

TEST(PlanFilesTest, MeasuredProfileReplacesTheRoofline) {
  const std::string dir = testing::TempDir() + "profile";
  std::filesystem::create_directories(dir);
  write_file("profile/profile.json", R"({
  "format": "paraplan-profile", "version": 1,
  "devices": {"cpu": [
    {"seq_len": 128, "d_model": 256, "num_heads": 8, "vocab_size": 512, "dtype": "float32",
     "tensor_parallel": 1, "micro_batch_size": 2, "parallel": true,
     "block_forward": 0.001, "block_backward": 0.002, "attention_core_forward": 0.0002,
     "head_forward": 0.0005, "head_backward": 0.001},
    {"seq_len": 128, "d_model": 256, "num_heads": 8, "vocab_size": 512, "dtype": "float32",
     "tensor_parallel": 1, "micro_batch_size": 2, "parallel": false,
     "block_forward": 0.003, "block_backward": 0.006,
     "head_forward": 0.0005, "head_backward": 0.001}
  ]}})");
  const std::vector<ConfigOverride> fixed = {{"planner.pipeline_nstages", "1"},
                                             {"planner.tensor_parallel_degree", "1"},
                                             {"training.micro_batch_size", "2"},
                                             {"planner.profile_dir", dir}};
  const std::optional<MeasuredProfile> profile = load_measured_profile(eight_device_job(fixed));
  ASSERT_TRUE(profile.has_value());
  EXPECT_EQ(profile->size(), 2u);
  const PlanCandidate measured = search_plans(eight_device_job(fixed), &*profile).ranked.front();
  EXPECT_DOUBLE_EQ(measured.estimate.stages[0].forward_seconds, 8 * 0.001 + 0.0005);
  EXPECT_DOUBLE_EQ(measured.estimate.stages[0].backward_seconds, 8 * 0.002 + 0.001);
  // plan_job reads it from profile_dir and says so.
  EXPECT_NE(plan_job(eight_device_job(fixed))
                .report.find("measured profile " + dir + "/profile.json (cpu)"),
            std::string::npos);
  // parallel_profile = false prefers the entry measured on one device at a time.
  std::vector<ConfigOverride> sequential = fixed;
  sequential.push_back({"planner.parallel_profile", "false"});
  const std::optional<MeasuredProfile> one_at_a_time =
      load_measured_profile(eight_device_job(sequential));
  EXPECT_DOUBLE_EQ(search_plans(eight_device_job(sequential), &*one_at_a_time)
                       .ranked.front()
                       .estimate.stages[0]
                       .forward_seconds,
                   8 * 0.003 + 0.0005);
  // re_profile = true ignores the stored profile; other micro-batch sizes fall back too.
  std::vector<ConfigOverride> again = fixed;
  again.push_back({"planner.re_profile", "true"});
  EXPECT_FALSE(load_measured_profile(eight_device_job(again)).has_value());
  EXPECT_FALSE(profile->lookup(eight_device_job().model, 1, 4).has_value());
  // A malformed profile is an error naming the file and field.
  write_file("profile/profile.json", R"({"format": "paraplan-profile", "version": 1,
    "devices": {"cpu": [{"seq_len": 128}]}})");
  try {
    load_measured_profile(eight_device_job(fixed));
    FAIL() << "accepted";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(
        std::string(error.what()).find("profile.json: devices.\"cpu\"[0].d_model is required"),
        std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace paraplan
