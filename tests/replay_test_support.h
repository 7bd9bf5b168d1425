// replay_test_support.h: the replay tests' job (a small GPT-2 planned for a
// world of ranks with extra [planner] lines) and their fixture: plan a job,
// replay its plan under mpirun and read the report.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "command_runner.h"

namespace paraplan::testing {

inline std::string job_toml(int world, const std::string& planner_lines) {
  return R"([job]
name = "replay-test"

[model]
vocab_size = 256
seq_len = 16
num_layers = 2
d_model = 32
num_heads = 4

[training]
global_batch_size = 16
learning_rate = 3e-3
total_steps = 20
seed = 5

[planner]
world_size = )" +
         std::to_string(world) + "\n" + planner_lines;
}

class Replay : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    directory_ = new TemporaryDirectory("replay");
  }
  static void TearDownTestSuite() { delete directory_; }

  // Writes the job and plans it; returns the plan path.
  static std::string plan(const std::string& name, int world, const std::string& planner_lines,
                          const std::string& overrides = "") {
    const std::string job = *directory_ / (name + ".toml");
    write_file(job, job_toml(world, planner_lines));
    const std::string plan_file = *directory_ / (name + ".pplan");
    const CommandResult planned =
        run("plan --config " + job + " --output " + plan_file + " " + overrides);
    EXPECT_EQ(planned.exit_code, 0) << planned.output;
    return plan_file;
  }

  // Replays the plan (one measured step after one warm-up) and returns its report.
  static nlohmann::json replay_report(const std::string& plan_file, const std::string& name,
                                      const std::string& flags = "") {
    const std::string report_file = *directory_ / (name + ".json");
    const CommandResult replayed =
        run("launch --plan " + plan_file + " -- replay --steps 1 --warmup 1 --report " +
            report_file + (flags.empty() ? "" : " " + flags));
    EXPECT_EQ(replayed.exit_code, 0) << replayed.output;
    return replayed.exit_code == 0 ? nlohmann::json::parse(read_file(report_file))
                                   : nlohmann::json::object();
  }

  // The plan as `paraplan inspect --json` prints it.
  static nlohmann::json inspect_json(const std::string& plan_file) {
    const CommandResult inspected = run("inspect " + plan_file + " --json");
    EXPECT_EQ(inspected.exit_code, 0) << inspected.output;
    return inspected.exit_code == 0 ? nlohmann::json::parse(inspected.output)
                                    : nlohmann::json::object();
  }

  // Replays a one-stage plan and returns its report's memory_bytes, having
  // checked each model-state part and the gathered working set measured as
  // predicted and the peak within the prediction.
  static nlohmann::json model_state_as_predicted(const std::string& plan_file,
                                                 const std::string& name,
                                                 const std::string& flags = "") {
    const nlohmann::json report = replay_report(plan_file, name, flags);
    EXPECT_EQ(report.value("stages", nlohmann::json::array()).size(), 1u) << name;
    if (report.value("stages", nlohmann::json::array()).size() != 1) return {};
    const nlohmann::json& memory = report["stages"][0]["memory_bytes"];
    for (const char* part : {"weights", "gradients", "optimizer_state", "gathered"})
      EXPECT_EQ(memory[part]["measured"], memory[part]["predicted"]) << name << " " << part;
    EXPECT_TRUE(report["memory_within_prediction"].get<bool>()) << name << "\n" << memory;
    return memory;
  }

  static inline TemporaryDirectory* directory_ = nullptr;
};

}  // namespace paraplan::testing
