// job_config_data_test.cc: [data]: one dataset or a blend, shuffle and its
// seed, overrides, the option dump, and each malformed value named.
#include <gtest/gtest.h>

#include "planner/job/job_config.h"
#include "planner/job/job_config_test_support.h"

namespace paraplan {
namespace {

using job_config_test::kMinimal;
using job_config_test::parse_error;

std::string option(const JobConfig& config, const std::string& key) {
  for (const auto& [name, value] : job_config_options(config))
    if (name == key) return value;
  return "<absent>";
}

TEST(JobConfigDataTest, NewJobsShuffleWithTheTrainingSeedAndReadDataFromTheCommandLine) {
  const JobConfig config = parse_job_config(kMinimal);
  EXPECT_TRUE(config.data.train.empty());
  EXPECT_TRUE(config.data.validation.empty());
  EXPECT_TRUE(config.data.shuffle);
  EXPECT_EQ(config.data.seed, 1337u);  // [training] seed
  EXPECT_EQ(option(config, "data.train"), "");
  EXPECT_EQ(option(config, "data.shuffle"), "true");
  EXPECT_EQ(option(config, "data.seed"), "1337");
  JobConfig reseeded = config;
  apply_override(reseeded, "training.seed", "9");
  EXPECT_EQ(reseeded.data.seed, 9u);  // follows until set
}

TEST(JobConfigDataTest, OneDatasetOrABlend) {
  const JobConfig one = parse_job_config(std::string(kMinimal) + R"(
[data]
train = "shards/train_*.bin"
validation = "shards/val_*.bin"
shuffle = false
seed = 42
)");
  EXPECT_EQ(one.data.train, (std::vector<DataSourceConfig>{{"shards/train_*.bin", 1.0}}));
  EXPECT_EQ(one.data.validation, "shards/val_*.bin");
  EXPECT_FALSE(one.data.shuffle);
  EXPECT_EQ(one.data.seed, 42u);
  const JobConfig blend = parse_job_config(std::string(kMinimal) + R"(
[data]
train = [{path = "a_*.bin", weight = 0.7}, {path = "b \"x\".bin", weight = 3}]
)");
  EXPECT_EQ(blend.data.train,
            (std::vector<DataSourceConfig>{{"a_*.bin", 0.7}, {"b \"x\".bin", 3.0}}));
  // The dump is TOML that reads back to the same blend.
  EXPECT_EQ(option(blend, "data.train"),
            R"([{path = "a_*.bin", weight = 0.7}, {path = "b \"x\".bin", weight = 3}])");
  JobConfig again = parse_job_config(kMinimal);
  apply_override(again, "data.train", option(blend, "data.train"));
  EXPECT_EQ(again.data.train, blend.data.train);
}

TEST(JobConfigDataTest, OverridesTakeAPathOrABlend) {
  const JobConfig path =
      parse_job_config(kMinimal, "job.toml", {{"data.train", "fineweb_train_*.bin"}});
  EXPECT_EQ(path.data.train, (std::vector<DataSourceConfig>{{"fineweb_train_*.bin", 1.0}}));
  const JobConfig blend =
      parse_job_config(kMinimal, "job.toml",
                       {{"data.train", R"([{path = "a.bin", weight = 1}, {path = "b.bin"}])"},
                        {"data.shuffle", "false"}});
  EXPECT_EQ(blend.data.train, (std::vector<DataSourceConfig>{{"a.bin", 1.0}, {"b.bin", 1.0}}));
  EXPECT_FALSE(blend.data.shuffle);
}

TEST(JobConfigDataTest, MalformedValuesAreNamed) {
  const auto data = [](const std::string& lines) {
    return parse_error(std::string(kMinimal) + "\n[data]\n" + lines + "\n");
  };
  EXPECT_NE(data("train = [{path = \"a.bin\", weight = 0}]")
                .find("[data] train: weight 0 of 'a.bin' must be a positive finite number"),
            std::string::npos);
  EXPECT_NE(data("train = [{weight = 1}]").find("[data] train: a dataset needs a path"),
            std::string::npos);
  EXPECT_NE(data("train = [{path = \"a.bin\", share = 1}]")
                .find("unknown key 'share' in a dataset; valid keys: path, weight"),
            std::string::npos);
  EXPECT_NE(data("train = [\"a.bin\", \"b.bin\"]")
                .find("each dataset must be a table {path = ..., weight = ...}; a list of files "
                      "is one string, \"a.bin,b.bin\""),
            std::string::npos);
  EXPECT_NE(data("train = 3").find("[data] train must be a path"), std::string::npos);
  EXPECT_NE(data("train = []").find("[data] train must be a path"), std::string::npos);
  EXPECT_NE(data("shuffle = \"yes\"").find("[data] shuffle must be a boolean"), std::string::npos);
  EXPECT_NE(data("files = \"a.bin\"")
                .find("[data] unknown key 'files'; valid keys: train, validation, shuffle, seed"),
            std::string::npos);
  EXPECT_NE(parse_error(kMinimal, {{"data.train", "[{path = \"a.bin\""}})
                .find("[data] train: '[{path = \"a.bin\"' is not a TOML array"),
            std::string::npos);
}

}  // namespace
}  // namespace paraplan
