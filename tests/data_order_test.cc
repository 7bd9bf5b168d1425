// data_order_test.cc: training data as users keep it, under mpirun: a glob
// of shards and a blend of two datasets, shuffled, named in the job file's
// [data]. Every plan reads the same samples (the single-rank losses), a run
// resumed under another plan continues the straight run exactly, and the
// shuffle really changes the order.
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "parallel_training_fixture.h"

namespace paraplan::testing {
namespace {

class DataOrder : public ParallelTraining {
 protected:
  // Three shards of two datasets: a_000001.bin, a_000002.bin (the fixture's
  // corpus, halves) and b_000001.bin (another text), in shards/.
  static void SetUpTestSuite() {
    ParallelTraining::SetUpTestSuite();
    std::string a1, a2, b;
    for (int i = 0; i < 150; ++i) {
      a1 += "first half line " + std::to_string(i * 31 % 97) + " \u00e9t\u00e9 " +
            std::to_string(i) + "\n";
      a2 += "second half " + std::to_string(i * 17 % 89) + " \u65e5\u672c line " +
            std::to_string(i) + "\n";
      b += "ANOTHER SOURCE, RECORD " + std::to_string(i * 13 % 101) + " \u00fcber alles\n";
    }
    for (const auto& [name, text] :
         {std::pair<std::string, std::string>{"a_000001", a1}, {"a_000002", a2}, {"b_000001", b}}) {
      write_file(*directory_ / (name + ".txt"), text);
      ASSERT_EQ(run("tokenize --val-fraction 0 --input " + *directory_ / (name + ".txt") +
                    " --output " + *directory_ / ("tokens_" + name))
                    .exit_code,
                0);
      std::filesystem::create_directories(*directory_ / "shards");
      std::filesystem::rename(*directory_ / ("tokens_" + name) + "/train.bin",
                              *directory_ / ("shards/" + name + ".bin"));
    }
  }

  // The job of `plan` with [data]: a_*.bin and b_*.bin blended 0.7/0.3.
  static std::string blended_job(const PlanCase& plan, bool shuffle) {
    return job_toml(plan) + "\n[data]\ntrain = [{path = \"" + *directory_ / "shards" +
           "/a_*.bin\", weight = 0.7}, {path = \"" + *directory_ / "shards" +
           "/b_*.bin\", weight = 0.3}]\nshuffle = " + (shuffle ? "true" : "false") + "\n";
  }

  // Plans the job and trains it under `paraplan launch` without --data (the
  // plan names the data) to step `steps`; returns the log's losses.
  static std::vector<double> train_blend(const PlanCase& plan, bool shuffle, int steps,
                                         const std::string& extra = "",
                                         CommandResult* out = nullptr, bool must_succeed = true) {
    const std::string job = *directory_ / (plan.name + ".toml");
    const std::string plan_file = *directory_ / (plan.name + ".pplan");
    const std::string log = *directory_ / (plan.name + ".jsonl");
    write_file(job, blended_job(plan, shuffle));
    const CommandResult planned = run("plan --config " + job + " --output " + plan_file);
    EXPECT_EQ(planned.exit_code, 0) << planned.output;
    const CommandResult trained = run_command(
        std::string(PARAPLAN_BINARY) + " launch --plan " + plan_file + " -- train --steps " +
        std::to_string(steps) + " --log-json " + log + " " + extra);
    if (must_succeed) {
      EXPECT_EQ(trained.exit_code, 0) << trained.output;
    }
    if (out) *out = trained;
    std::vector<double> losses;
    for (const auto& line : read_json_lines(log)) losses.push_back(line["loss"].get<double>());
    return losses;
  }
};

TEST_F(DataOrder, ShardsAndABlendGiveEveryPlanTheSameLossesAndResumeExactly) {
  constexpr int kStraight = 6;
  CommandResult single_run;
  const std::vector<double> single =
      train_blend({.name = "blend_single"}, /*shuffle=*/true, kStraight, "", &single_run);
  ASSERT_EQ(single.size(), static_cast<size_t>(kStraight));
  // The run says what it reads.
  EXPECT_NE(single_run.output.find("a_*.bin: 2 shards, "), std::string::npos) << single_run.output;
  EXPECT_NE(single_run.output.find("70.0% of the draws"), std::string::npos);
  EXPECT_NE(single_run.output.find("b_*.bin: 1 shard, "), std::string::npos);
  EXPECT_NE(single_run.output.find("shuffled each epoch (seed 5)"), std::string::npos);

  // Another plan, straight.
  const std::vector<double> pp2_tp2 =
      train_blend({.name = "blend_pp2_tp2", .pipeline = 2, .tensor = 2, .micro_batch_size = 3},
                  true, kStraight);
  ASSERT_EQ(pp2_tp2.size(), single.size());
  for (size_t i = 0; i < single.size(); ++i)
    EXPECT_NEAR(pp2_tp2[i], single[i], kLossTolerance) << "pp2 x tp2, step " << i + 1;

  // 3 steps under dp2 x tp2, then resumed to step 6 under dp4 with ZeRO-1.
  const std::string checkpoints = *directory_ / "blend_checkpoints";
  std::vector<double> resumed =
      train_blend({.name = "blend_first_half", .data = 2, .tensor = 2, .micro_batch_size = 3}, true,
                  3, "--checkpoint-dir " + checkpoints);
  const std::vector<double> second_half =
      train_blend({.name = "blend_second_half", .data = 4, .micro_batch_size = 3, .zero_stage = 1},
                  true, kStraight, "--resume --checkpoint-dir " + checkpoints);
  resumed.insert(resumed.end(), second_half.begin(), second_half.end());
  ASSERT_EQ(resumed.size(), single.size());
  std::cout << "blend losses, single rank / pp2 x tp2 / dp2 x tp2 resumed as dp4 ZeRO-1:";
  for (size_t i = 0; i < single.size(); ++i)
    std::cout << " " << single[i] << "/" << pp2_tp2[i] << "/" << resumed[i];
  std::cout << std::endl;
  for (size_t i = 0; i < single.size(); ++i)
    EXPECT_NEAR(resumed[i], single[i], kLossTolerance) << "resumed across plans, step " << i + 1;

  // In file order the same blend trains on other samples.
  const std::vector<double> file_order =
      train_blend({.name = "blend_file_order"}, /*shuffle=*/false, kStraight);
  ASSERT_EQ(file_order.size(), single.size());
  double largest = 0;
  for (size_t i = 0; i < single.size(); ++i)
    largest = std::max(largest, std::fabs(file_order[i] - single[i]));
  EXPECT_GT(largest, 1e-3);
}

TEST_F(DataOrder, AGlobOnTheCommandLineReplacesThePlansData) {
  // --data with a glob: one dataset of both a shards, in file order here.
  CommandResult result;
  const std::vector<double> losses = train_blend(
      {.name = "glob_flag"}, false, 2, "--data '" + *directory_ / "shards" + "/a_*.bin'", &result);
  EXPECT_EQ(losses.size(), 2u);
  EXPECT_NE(result.output.find("a_*.bin: 2 shards, "), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("of the draws"), std::string::npos);
  // A glob that matches nothing is one clear line, before anything runs.
  const CommandResult missing = run_command(
      std::string(PARAPLAN_BINARY) + " launch --plan " + *directory_ / "glob_flag.pplan" +
      " -- train --steps 1 --data '" + *directory_ / "shards" + "/fineweb_*.bin'");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("fineweb_*.bin"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("matches no file"), std::string::npos) << missing.output;
}

// Issue 46, 4: train_state.json records the data order; a resume in another
// order (shuffle toggled, another set of files) is refused naming the change,
// and continues only when the user accepts it by name.
TEST_F(DataOrder, AResumeInAnotherOrderIsRefusedUnlessAccepted) {
  const std::string checkpoints = *directory_ / "order_checkpoints";
  const std::string resume = "--resume --checkpoint-dir " + checkpoints;
  EXPECT_EQ(train_blend({.name = "order_saved"}, true, 2, "--checkpoint-dir " + checkpoints).size(),
            2u);
  const std::string state = read_file(checkpoints + "/step_00000002/train_state.json");
  EXPECT_NE(state.find("\"data_order\""), std::string::npos) << state;
  EXPECT_NE(state.find("a_000001.bin"), std::string::npos) << state;
  EXPECT_NE(state.find("\"files_digest\""), std::string::npos) << state;

  CommandResult toggled;
  train_blend({.name = "order_unshuffled"}, false, 3, resume, &toggled, false);
  EXPECT_NE(toggled.exit_code, 0);
  EXPECT_NE(toggled.output.find("train_state.json: data_order: this run reads its training data "
                                "in another order than the run that wrote the checkpoint "
                                "(shuffle true -> false)"),
            std::string::npos)
      << toggled.output;
  EXPECT_NE(toggled.output.find("--accept-data-order-change"), std::string::npos);

  CommandResult other_files;
  train_blend({.name = "order_saved"}, true, 3,
              resume + " --data '" + *directory_ / "shards" + "/a_*.bin'", &other_files, false);
  EXPECT_NE(other_files.exit_code, 0);
  EXPECT_NE(other_files.output.find("2 dataset(s) -> 1"), std::string::npos) << other_files.output;
  std::printf("[ figures  ] refused: %s\n",
              other_files.output.substr(other_files.output.find("paraplan: error:")).c_str());

  // The same order resumes silently; another order with the flag goes on, said once.
  CommandResult same;
  train_blend({.name = "order_saved"}, true, 3, resume, &same);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_EQ(same.output.find("data order"), std::string::npos) << same.output;
  CommandResult accepted;
  train_blend({.name = "order_unshuffled"}, false, 4, resume + " --accept-data-order-change",
              &accepted);
  EXPECT_EQ(accepted.exit_code, 0) << accepted.output;
  EXPECT_NE(accepted.output.find("data order: changed from the checkpoint's (shuffle true -> "
                                 "false); continuing at sample"),
            std::string::npos)
      << accepted.output;
}

}  // namespace
}  // namespace paraplan::testing
