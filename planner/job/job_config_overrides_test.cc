// job_config_overrides_test.cc: dotted overrides (typed by their field, split
// out of a command line) and the option dump written into the plan header.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "planner/job/job_config.h"
#include "planner/job/job_config_test_support.h"

namespace paraplan {
namespace {

using job_config_test::kMinimal;
using job_config_test::parse_error;

TEST(JobConfigTest, OverridesAreTypedByTheirField) {
  // TOML-level overrides may supply required keys and replace file values.
  const JobConfig config = parse_job_config(
      "[model]\nseq_len = 64\nnum_layers = 2\nd_model = 64\n[training]\ntotal_steps = 5\n",
      "job.toml",
      {{"model.num_heads", "8"},
       {"training.global_batch_size", "16"},
       {"planner.memory_constraint", "40.5"},
       {"planner.pipeline_nstages", "auto"},
       {"planner.consider_mem", "false"},
       {"model.num_layers", "6"}});
  EXPECT_EQ(config.model.num_heads, 8);
  EXPECT_EQ(config.model.num_layers, 6);
  EXPECT_EQ(config.training.global_batch_size, 16);
  EXPECT_DOUBLE_EQ(config.planner.memory_constraint, 40.5);
  EXPECT_EQ(config.planner.pipeline_nstages, 0);
  EXPECT_FALSE(config.planner.consider_mem);

  JobConfig edited = parse_job_config(kMinimal);
  apply_override(edited, "planner.memory_constraint", "40");
  apply_override(edited, "planner.pipeline_nstages", "2");
  apply_override(edited, "model.d_model", "128");
  apply_override(edited, "training.learning_rate", "1e-3");
  EXPECT_DOUBLE_EQ(edited.planner.memory_constraint, 40);
  EXPECT_EQ(edited.planner.pipeline_nstages, 2);
  EXPECT_EQ(edited.model.ffn_size, 512);                      // re-derived from d_model
  EXPECT_DOUBLE_EQ(edited.training.min_learning_rate, 1e-4);  // re-derived from the LR
  EXPECT_TRUE(edited.was_set("planner.memory_constraint"));

  auto override_error = [&](const std::string& key, const std::string& value) {
    JobConfig copy = edited;
    try {
      apply_override(copy, key, value);
    } catch (const std::runtime_error& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_NE(override_error("planner.memory_constraint", "lots")
                .find("job.toml (override --planner.memory_constraint): [planner] "
                      "memory_constraint must be a number, got 'lots'"),
            std::string::npos);
  EXPECT_NE(override_error("planner.memory_constrant", "4")
                .find("[planner] unknown key 'memory_constrant'; valid keys:"),
            std::string::npos);
  EXPECT_NE(override_error("memory_constraint", "4").find("must have the form section.key"),
            std::string::npos);
  EXPECT_NE(override_error("model.num_heads", "5").find("is not divisible by num_heads 5"),
            std::string::npos);
  // A rejected override leaves the config as it was.
  EXPECT_THROW(apply_override(edited, "model.num_heads", "5"), std::runtime_error);
  EXPECT_EQ(edited.model.num_heads, 4);
  EXPECT_NE(parse_error(kMinimal, {{"planner.zero_stage", "one"}})
                .find("[planner] zero_stage must be an integer, got 'one'"),
            std::string::npos);
}

TEST(JobConfigTest, SplitsOverrideArguments) {
  std::vector<std::string> rest;
  const auto overrides =
      parse_override_arguments({"--config", "job.toml", "--planner.memory_constraint", "40",
                                "--model.dtype=bfloat16", "--output", "x.pplan"},
                               &rest);
  ASSERT_EQ(overrides.size(), 2u);
  EXPECT_EQ(overrides[0].key, "planner.memory_constraint");
  EXPECT_EQ(overrides[0].value, "40");
  EXPECT_EQ(overrides[1].key, "model.dtype");
  EXPECT_EQ(overrides[1].value, "bfloat16");
  EXPECT_EQ(rest, (std::vector<std::string>{"--config", "job.toml", "--output", "x.pplan"}));
  EXPECT_THROW(parse_override_arguments({"--planner.topk"}), std::runtime_error);
}

TEST(JobConfigTest, OptionsListEveryKey) {
  const auto options = job_config_options(parse_job_config(kMinimal));
  std::map<std::string, std::string> by_key(options.begin(), options.end());
  EXPECT_EQ(by_key.size(), options.size());
  // 88 + [data] train, validation, shuffle, seed, document_mask, document_separator
  EXPECT_EQ(options.size(), 97u);
  for (const char* key : {"task_name",
                          "consider_mem",
                          "memory_constraint",
                          "memory_granularity",
                          "transient_mem_coef",
                          "opt_resident_coef",
                          "opt_transient_coef",
                          "recompute_modules",
                          "zero_stage",
                          "zero_ngroups",
                          "zero_layers_per_unit",
                          "pipeline_pivots",
                          "pipeline_nstages",
                          "pipeline_scheduler",
                          "sequence_parallel",
                          "max_pipeline_bubble_ratio",
                          "max_pipeline_unbalance_ratio",
                          "mesh_row",
                          "mesh_col",
                          "world_size",
                          "micro_batch_size",
                          "update_freq",
                          "profile_dir",
                          "parallel_profile",
                          "re_profile",
                          "topk",
                          "solver",
                          "nproc",
                          "load_plan_path",
                          "save_plan_path",
                          "partition_constraints_path",
                          "is_train",
                          "verbose",
                          "ignore_small_tensor_threshold",
                          "tensor_parallel_degree",
                          "data_parallel_degree",
                          "context_parallel_degree"})
    EXPECT_EQ(by_key.count(std::string("planner.") + key), 1u) << key;
  EXPECT_EQ(by_key["planner.pipeline_nstages"], "auto");
  EXPECT_EQ(by_key["planner.pipeline_scheduler"], "auto");
  EXPECT_EQ(by_key["planner.pipeline_virtual_stages"], "0");
  EXPECT_EQ(by_key["planner.sequence_parallel"], "auto");
  EXPECT_EQ(by_key["planner.memory_constraint"], "32");
  EXPECT_EQ(by_key["training.min_learning_rate"], "6e-05");
  EXPECT_EQ(by_key["model.dtype"], "float32");
  EXPECT_EQ(by_key["cluster.preset"], "cpu");
  EXPECT_EQ(by_key["cluster.memory_bandwidth_gbps"], "10");
  EXPECT_EQ(by_key["cluster.compute_units"], "1");
  EXPECT_EQ(by_key["cluster.cores_per_node"], "0");
  EXPECT_EQ(by_key["training.seed"], "1337");
  EXPECT_EQ(by_key["planner.context_parallel_degree"], "0");
  EXPECT_EQ(by_key["data.document_mask"], "false");
  EXPECT_EQ(by_key["data.document_separator"], "-1");
}

}  // namespace
}  // namespace paraplan
