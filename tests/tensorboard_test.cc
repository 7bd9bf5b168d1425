// tensorboard_test.cc: `train --tensorboard-dir` read by TensorBoard itself
// (tests/tensorboard_check.py, EventAccumulator, from the venv
// scripts/install_dependencies.sh makes; the test skips without it): every
// step's scalars equal the --log-json line's, and a resumed run adds its
// steps to the same run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "command_fixture.h"

namespace {

using namespace paraplan::testing;
using nlohmann::json;

class TensorBoard : public CommandTest {
 protected:
  void SetUp() override {
    CommandTest::SetUp();
    if (!std::filesystem::exists(PARAPLAN_HF_PYTHON) ||
        run_command(std::string(PARAPLAN_HF_PYTHON) + " -c 'import tensorboard'").exit_code != 0)
      GTEST_SKIP() << PARAPLAN_HF_PYTHON
                   << " cannot import tensorboard; run scripts/install_dependencies.sh";
  }

  std::string train_line(int steps, const std::string& extra = "") const {
    return "train --plan " + path("job.pplan") + " --data " + path("data/train.bin") +
           " --val-data " + path("data/val.bin") + " --steps " + std::to_string(steps) +
           " --checkpoint-dir " + path("ckpt") + " --log-json " + path("log.jsonl") +
           " --tensorboard-dir " + path("runs") + " " + extra;
  }

  // Tag -> step -> value, as TensorBoard reads the run.
  std::map<std::string, std::map<int, double>> read_run() const {
    const CommandResult read =
        run_command(std::string(PARAPLAN_HF_PYTHON) + " " + PARAPLAN_SOURCE_DIR +
                    "/tests/tensorboard_check.py " + path("runs"));
    EXPECT_EQ(read.exit_code, 0) << read.output;
    std::map<std::string, std::map<int, double>> run;
    const json scalars = json::parse(read.output);
    for (const auto& [tag, points] : scalars.items())
      for (const auto& point : points) run[tag][point[0].get<int>()] = point[1].get<double>();
    return run;
  }
};

TEST_F(TensorBoard, EveryStepsScalarsAreTheLoggedOnesAndAResumeContinuesTheRun) {
  tokenize_and_plan();
  ASSERT_EQ(run(train_line(6)).exit_code, 0);
  const CommandResult resumed = run(train_line(10, "--resume"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(path("runs")),
                          std::filesystem::directory_iterator()),
            2)
      << "an event file per run";

  const auto tensorboard = read_run();
  const std::vector<json> logged = read_json_lines(dir_ / "log.jsonl");
  ASSERT_EQ(logged.size(), 10u);
  const std::pair<const char*, const char*> pairs[] = {{"loss/train", "loss"},
                                                       {"optimizer/grad_norm", "grad_norm"},
                                                       {"optimizer/lr", "lr"},
                                                       {"throughput/tokens_per_second", "tps"},
                                                       {"time/step_seconds", "step_seconds"}};
  for (const auto& [tag, field] : pairs) {
    ASSERT_EQ(tensorboard.count(tag), 1u) << tag;
    ASSERT_EQ(tensorboard.at(tag).size(), 10u) << tag << ": steps 1 to 10";
    for (const json& line : logged) {
      const int step = line["step"].get<int>();
      const double expected = line[field].get<double>();
      EXPECT_NEAR(tensorboard.at(tag).at(step), expected, 1e-6 * std::abs(expected))
          << tag << " step " << step;  // stored as float
    }
  }
  // Validation every eval_interval (5) steps and at each run's last.
  ASSERT_EQ(tensorboard.count("loss/validation"), 1u);
  EXPECT_EQ(tensorboard.at("loss/validation"),
            (std::map<int, double>{{5, logged[4]["val_loss"].get<float>()},
                                   {6, logged[5]["val_loss"].get<float>()},
                                   {10, logged[9]["val_loss"].get<float>()}}));
  EXPECT_NEAR(tensorboard.at("loss/validation").at(10), logged[9]["val_loss"].get<double>(), 1e-6);
  EXPECT_NEAR(tensorboard.at("throughput/mfu_percent").at(3), 100 * logged[2]["mfu"].get<double>(),
              1e-4 * std::abs(logged[2]["mfu"].get<double>()) * 100);
}

}  // namespace
