// autotune_test.cc: `paraplan autotune` end to end on the CPU, under mpirun:
// around the best (mesh, ZeRO stage, micro-batch) the trial parameters' grid
// measures gradient bucket sizes, the table and the report name each value
// tried or skipped, and the plan written is the fastest measured.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "launcher/autotune_trial.h"
#include "schema/plan_io.h"

namespace paraplan {
namespace {

using nlohmann::json;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The lines of text holding every one of the parts.
std::vector<std::string> lines_with(const std::string& text,
                                    const std::vector<std::string>& parts) {
  std::vector<std::string> found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    bool all = true;
    for (const std::string& part : parts) all &= line.find(part) != std::string::npos;
    if (all) found.push_back(line);
  }
  return found;
}

class Autotune : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    directory_ =
        std::filesystem::temp_directory_path() / ("paraplan_autotune_" + std::to_string(getpid()));
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::filesystem::path directory_;
};

// Two data-parallel ranks, ZeRO-0 and micro-batch 4 fixed: one experiment
// finds the base setting, then the grid measures the bucket sizes around the
// model's 34176 gradient elements (the default 40M is one bucket): a quarter
// of it (8544) and a sixteenth (2136); 0 and 34176 are skipped as one bucket.
TEST_F(Autotune, MeasuresGradientBucketSizesAroundTheBestSetting) {
  const std::filesystem::path job = directory_ / "job.toml";
  std::ofstream(job) << R"([model]
vocab_size = 256
seq_len = 16
num_layers = 2
d_model = 32
num_heads = 4

[training]
global_batch_size = 16
micro_batch_size = 4
total_steps = 20

[planner]
world_size = 2
pipeline_nstages = 1
tensor_parallel_degree = 1
context_parallel_degree = 1
zero_stage = 0
)";
  const std::filesystem::path best = directory_ / "best.pplan", report = directory_ / "report.json";
  const std::filesystem::path log = directory_ / "autotune.log";
  const ExperimentOutcome tuned =
      run_experiment({PARAPLAN_BINARY, "autotune", "--config", job.string(), "--output",
                      best.string(), "--work-dir", (directory_ / "work").string(), "--report",
                      report.string(), "--steps", "1", "--warmup", "0", "--max-meshes", "1"},
                     log.string(), 240);
  const std::string output = read_text(log);
  ASSERT_EQ(tuned.status, ExperimentStatus::kMeasured) << output;

  // The report: every experiment with its bucket; three sizes measured.
  const json summary = json::parse(read_text(report));
  std::map<int64_t, double> measured;  // bucket -> seconds
  for (const json& e : summary["experiments"]) {
    ASSERT_EQ(e["status"], "measured") << output;
    measured[e["parameters"]["training.gradient_bucket_size"].get<int64_t>()] =
        e["measured_step_seconds"].get<double>();
  }
  EXPECT_EQ(measured.size(), 3u) << output;
  EXPECT_TRUE(measured.count(40000000) && measured.count(8544) && measured.count(2136)) << output;
  const json& grid = summary["trial_parameters"];
  EXPECT_EQ(grid["around"], 1) << grid.dump(2);
  EXPECT_EQ(grid["stage_gradient_elements"], 34176) << grid.dump(2);
  std::map<int64_t, std::string> fate;  // bucket -> status
  for (const json& c : grid["combinations"]) {
    fate[c["parameters"]["training.gradient_bucket_size"].get<int64_t>()] = c["status"];
    if (c["status"] == "skipped") {
      EXPECT_NE(c["reason"].get<std::string>().find("both one bucket"), std::string::npos) << c;
    }
  }
  EXPECT_EQ(fate, (std::map<int64_t, std::string>{{40000000, "measured"},
                                                  {8544, "measured"},
                                                  {2136, "measured"},
                                                  {0, "skipped"},
                                                  {34176, "skipped"}}))
      << grid.dump(2);

  // The table: a bucket column with each size measured, and the grid's lines.
  EXPECT_EQ(lines_with(output, {"micro-batch |     bucket |       unit | predicted s"}).size(), 1u)
      << output;
  for (const std::string size : {"40000000", "8544", "2136"})
    EXPECT_EQ(
        lines_with(output, {"|           4 | " + std::string(10 - size.size(), ' ') + size + " |",
                            "| measured"})
            .size(),
        1u)
        << size << "\n"
        << output;
  EXPECT_EQ(lines_with(output, {"bucket=8544: #", " measured "}).size(), 1u) << output;
  EXPECT_EQ(lines_with(output, {"bucket=0: skipped: same as 40000000: both one bucket"}).size(), 1u)
      << output;

  // The plan written is the fastest measured, its bucket size included.
  int64_t fastest = 0;
  for (const auto& [size, seconds] : measured)
    if (!fastest || seconds < measured[fastest]) fastest = size;
  const LoadedPlan chosen = load_plan(best.string());
  EXPECT_EQ(static_cast<int64_t>(chosen.plan().training()->gradient_bucket_elements()), fastest)
      << output;
}

}  // namespace
}  // namespace paraplan
