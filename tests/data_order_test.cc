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

  // How a job's [data] orders the blend: shuffled or not, a's weight (b's
  // is the rest), and [data] seed when not 0 (else training.seed, 5).
  struct Order {
    bool shuffle = true;
    const char* weight_a = "0.7";
    const char* weight_b = "0.3";
    int seed = 0;
  };

  // The job of `plan` with [data]: a_*.bin and b_*.bin blended 0.7/0.3.
  static std::string blended_job(const PlanCase& plan, const Order& order) {
    return job_toml(plan) + "\n[data]\ntrain = [{path = \"" + *directory_ / "shards" +
           "/a_*.bin\", weight = " + order.weight_a + "}, {path = \"" + *directory_ / "shards" +
           "/b_*.bin\", weight = " + order.weight_b +
           "}]\nshuffle = " + (order.shuffle ? "true" : "false") + "\n" +
           (order.seed != 0 ? "seed = " + std::to_string(order.seed) + "\n" : "");
  }

  // Plans the job and trains it under `paraplan launch` without --data (the
  // plan names the data) to step `steps`; returns the log's losses.
  // `launch` (options for launch itself, an environment to start it in)
  // takes the job's data in `order`.
  struct Launch {
    Order order;
    std::string options, environment;
  };
  static std::vector<double> train_blend(const PlanCase& plan, bool shuffle, int steps,
                                         const std::string& extra = "",
                                         CommandResult* out = nullptr, bool must_succeed = true) {
    return train_blend(plan, Launch{.order = {.shuffle = shuffle}}, steps, extra, out,
                       must_succeed);
  }
  static std::vector<double> train_blend(const PlanCase& plan, const Launch& launch, int steps,
                                         const std::string& extra = "",
                                         CommandResult* out = nullptr, bool must_succeed = true) {
    const std::string job = *directory_ / (plan.name + ".toml");
    const std::string plan_file = *directory_ / (plan.name + ".pplan");
    const std::string log = *directory_ / (plan.name + ".jsonl");
    write_file(job, blended_job(plan, launch.order));
    const CommandResult planned = run("plan --config " + job + " --output " + plan_file);
    EXPECT_EQ(planned.exit_code, 0) << planned.output;
    const CommandResult trained =
        run_command(launch.environment + " " + PARAPLAN_BINARY + " launch --plan " + plan_file +
                    " " + launch.options + " -- train --steps " + std::to_string(steps) +
                    " --log-json " + log + " " + extra);
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
// order (shuffle toggled, other files, another seed or blend) is refused naming the change,
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
  const size_t error_at = other_files.output.find("paraplan: error:");
  ASSERT_NE(error_at, std::string::npos) << other_files.output;
  std::printf("[ figures  ] refused: %s\n", other_files.output.substr(error_at).c_str());

  // Another seed, another blend: each refused naming the change, whole line.
  const std::string state_file = checkpoints + "/step_00000002/train_state.json";
  const auto refusal = [&](const std::string& change) {
    return "paraplan: error: " + state_file +
           ": data_order: this run reads its training data in another order than the run that "
           "wrote the checkpoint (" +
           change +
           "), so resuming at sample 24 would skip and repeat samples; resume with the same "
           "[data] and --data, or pass --accept-data-order-change to continue in the new order";
  };
  CommandResult reseeded;
  train_blend({.name = "order_reseeded"}, Launch{.order = {.seed = 6}}, 3, resume, &reseeded,
              false);
  EXPECT_NE(reseeded.exit_code, 0);
  EXPECT_NE(reseeded.output.find(refusal("seed 5 -> 6")), std::string::npos) << reseeded.output;
  CommandResult reweighted;
  train_blend({.name = "order_reweighted"}, Launch{.order = {.weight_a = "0.5", .weight_b = "0.5"}},
              3, resume, &reweighted, false);
  EXPECT_NE(reweighted.exit_code, 0);
  EXPECT_NE(reweighted.output.find(refusal("weights 0.7, 0.3 -> 0.5, 0.5")), std::string::npos)
      << reweighted.output;

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

// Issue 46, 4: `launch --max-restarts` resumes under the plan's own [data]
// (a re-plan for fewer hosts keeps it: planner/replan_test.cc), so the
// elastic restart never trips the order check, and the interrupted run's
// losses are the uninterrupted one's. Rank 1 stops (SIGSTOP) before step 3,
// after the checkpoint of step 2; the heartbeat timeout ends the attempt.
TEST_F(DataOrder, AnElasticRestartKeepsTheOrderAndTheLosses) {
  constexpr int kRestartSteps = 4;
  const std::vector<double> straight =
      train_blend({.name = "restart_straight"}, true, kRestartSteps);
  ASSERT_EQ(straight.size(), static_cast<size_t>(kRestartSteps));
  const std::string checkpoints = *directory_ / "restart_checkpoints";
  CommandResult restarted;
  train_blend({.name = "restart_elastic", .data = 2, .micro_batch_size = 6},
              Launch{.options = "--max-restarts 1 --heartbeat-timeout 4",
                     .environment = "PARAPLAN_STOP_RANK_AT_STEP=1:3"},
              kRestartSteps, "--checkpoint-dir " + checkpoints + " --checkpoint-every 1",
              &restarted);
  EXPECT_EQ(restarted.exit_code, 0) << restarted.output;
  for (size_t at = restarted.output.find("paraplan launch: "); at != std::string::npos;
       at = restarted.output.find("paraplan launch: ", at + 1))
    std::printf("[ figures  ] %s\n",
                restarted.output.substr(at, restarted.output.find('\n', at) - at).c_str());
  EXPECT_NE(restarted.output.find("paraplan launch: restart 1 of 1: resuming from step 2 (" +
                                  checkpoints + "/latest)"),
            std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("paraplan launch: finished after 1 restart(s)"),
            std::string::npos)
      << restarted.output;
  EXPECT_EQ(restarted.output.find("data_order"), std::string::npos) << restarted.output;
  EXPECT_EQ(restarted.output.find("data order"), std::string::npos) << restarted.output;
  // The log holds each step once: 1-2 from the first attempt, 3-4 resumed.
  std::vector<double> losses(kRestartSteps, -1);
  for (const nlohmann::json& line : read_json_lines(*directory_ / "restart_elastic.jsonl")) {
    const int step = line["step"].get<int>();
    ASSERT_GE(step, 1);
    ASSERT_LE(step, kRestartSteps);
    losses[step - 1] = line["loss"].get<double>();
  }
  for (int i = 0; i < kRestartSteps; ++i)
    EXPECT_NEAR(losses[i], straight[i], kLossTolerance) << "restarted run, step " << i + 1;
}

}  // namespace
}  // namespace paraplan::testing
