// command_fixture.h: what the tests of the `paraplan` command share: a fresh
// directory per test holding a small corpus, the tiny job, tokenizing and
// planning it, and the expectation every bad input must meet (one clear error
// line, exit status 1, no crash). Header-only; for end_to_end_test and
// hostile_input_test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "command_runner.h"

namespace paraplan::testing {

// A tiny job: 2 layers, d_model 32, seq 16, 4 sequences per step in 2 micro-batches.
inline const char* kTinyJob = R"([job]
name = "e2e"

[model]
vocab_size = 256
seq_len = 16
num_layers = 2
d_model = 32
num_heads = 4

[training]
global_batch_size = 4
micro_batch_size = 2
learning_rate = 3e-3
warmup_steps = 2
total_steps = 10
eval_interval = 5
eval_batches = 2
seed = 7
)";

// A fresh directory per test (removed after it) with corpus.txt, 400 short lines.
class CommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("paraplan_e2e_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::string corpus;
    for (int i = 0; i < 400; ++i)
      corpus += "line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog\n";
    write_file(dir_ / "corpus.txt", corpus);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // data/train.bin, data/val.bin and job.pplan from `job` (written to job.toml).
  void tokenize_and_plan(const std::string& job = kTinyJob) {
    write_file(dir_ / "job.toml", job);
    CommandResult tokenized =
        run("tokenize --input " + path("corpus.txt") + " --output " + path("data"));
    ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
    CommandResult planned =
        run("plan --config " + path("job.toml") + " --output " + path("job.pplan"));
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
  }

  std::filesystem::path dir_;
};

// Bad input: one clear line naming what is wrong, exit status 1, never a crash.
inline void expect_clear_error(const CommandResult& result,
                               const std::vector<std::string>& mentions) {
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_FALSE(result.crashed) << result.output;
  EXPECT_NE(result.output.find("paraplan: error:"), std::string::npos) << result.output;
  for (const std::string& mention : mentions)
    EXPECT_NE(result.output.find(mention), std::string::npos)
        << "expected '" << mention << "' in: " << result.output;
}

}  // namespace paraplan::testing
