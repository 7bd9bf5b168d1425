// end_to_end_test.cc: the `paraplan` command as users run it: tokenize, plan,
// inspect, train, resume and sample on a tiny model, and the one-line errors
// for bad input. Each test runs the real binary in a fresh temporary directory.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "command_fixture.h"

namespace {

namespace fs = std::filesystem;
using namespace paraplan::testing;

class EndToEnd : public CommandTest {
 protected:
  std::string train_arguments(int steps, const std::string& checkpoint_dir,
                              const std::string& log) const {
    return "train --plan " + path("job.pplan") + " --data " + path("data/train.bin") +
           " --val-data " + path("data/val.bin") + " --steps " + std::to_string(steps) +
           " --checkpoint-dir " + path(checkpoint_dir) + " --log-json " + path(log);
  }
};

TEST_F(EndToEnd, TrainingLowersTheLossAndLogsEveryStep) {
  tokenize_and_plan();
  CommandResult trained = run(train_arguments(10, "ckpt", "log.jsonl"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("step:    10  loss:"), std::string::npos) << trained.output;
  const auto lines = read_json_lines(dir_ / "log.jsonl");
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_NEAR(lines[0]["loss"].get<double>(), std::log(256.0), 0.1);  // uniform at init
  EXPECT_LT(lines[9]["loss"].get<double>(), lines[0]["loss"].get<double>() - 0.5);
  EXPECT_TRUE(lines[4].contains("val_loss"));  // eval_interval 5
  EXPECT_TRUE(lines[9].contains("val_loss"));
  EXPECT_FALSE(lines[3].contains("val_loss"));
  for (const char* field : {"grad_norm", "lr", "tps", "tflops", "mfu", "memory_bytes"})
    EXPECT_TRUE(lines[9].contains(field)) << field;
  EXPECT_GT(lines[9]["memory_bytes"].get<double>(), 0);
}

TEST_F(EndToEnd, ResumeContinuesBitForBit) {
  tokenize_and_plan();
  ASSERT_EQ(run(train_arguments(10, "straight", "straight.jsonl")).exit_code, 0);
  CommandResult first_half = run(train_arguments(5, "split", "split.jsonl"));
  ASSERT_EQ(first_half.exit_code, 0) << first_half.output;
  CommandResult second_half = run(train_arguments(10, "split", "split.jsonl") + " --resume");
  ASSERT_EQ(second_half.exit_code, 0) << second_half.output;
  EXPECT_NE(second_half.output.find("resumed from"), std::string::npos);

  const auto straight = read_json_lines(dir_ / "straight.jsonl");
  const auto split = read_json_lines(dir_ / "split.jsonl");
  ASSERT_EQ(straight.size(), 10u);
  ASSERT_EQ(split.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(split[i]["step"], straight[i]["step"]);
    // Exact equality: the JSON keeps doubles to the last bit.
    EXPECT_EQ(split[i]["loss"].get<double>(), straight[i]["loss"].get<double>())
        << "step " << i + 1;
    EXPECT_EQ(split[i]["grad_norm"].get<double>(), straight[i]["grad_norm"].get<double>());
  }
  // Identical weights and optimizer state after step 10.
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string a = read_file(dir_ / "straight" / "step_00000010" / file);
    const std::string b = read_file(dir_ / "split" / "step_00000010" / file);
    ASSERT_GT(a.size(), 1000u) << file;
    EXPECT_TRUE(a == b) << file << " differs";
  }
}

TEST_F(EndToEnd, CheckpointsByTimeAsWellAsBySteps) {
  tokenize_and_plan();
  // Due after every step (any step takes longer than a nanosecond) ...
  ASSERT_EQ(run(train_arguments(4, "often", "often.jsonl") + " --checkpoint-every-seconds 1e-9")
                .exit_code,
            0);
  for (const char* step : {"step_00000001", "step_00000002", "step_00000003", "step_00000004"})
    EXPECT_TRUE(fs::is_directory(dir_ / "often" / step)) << step;
  // ... and never before the end.
  ASSERT_EQ(run(train_arguments(4, "rarely", "rarely.jsonl") + " --checkpoint-every-seconds 3600")
                .exit_code,
            0);
  EXPECT_FALSE(fs::exists(dir_ / "rarely" / "step_00000003"));
  EXPECT_TRUE(fs::is_directory(dir_ / "rarely" / "step_00000004"));
  const CommandResult negative =
      run(train_arguments(4, "bad", "bad.jsonl") + " --checkpoint-every-seconds -1");
  EXPECT_EQ(negative.exit_code, 1);
  EXPECT_NE(negative.output.find("is invalid; must be a finite number >= 0 (0: off)"),
            std::string::npos)
      << negative.output;
}

// torchtitan's keep_latest_k: old checkpoints go after each save, and a
// resumed run keeps counting from the step it resumed at.
TEST_F(EndToEnd, KeepsOnlyTheNewestCheckpoints) {
  tokenize_and_plan();
  const CommandResult first = run(train_arguments(5, "kept", "kept.jsonl") +
                                  " --checkpoint-every 1 --checkpoint-keep-latest 2");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("checkpoint: removed step_00000001 (--checkpoint-keep-latest 2)\n"),
            std::string::npos)
      << first.output;
  const auto steps_in = [&](const std::string& name) {
    std::vector<std::string> steps;
    for (const auto& entry : fs::directory_iterator(dir_ / name))
      if (entry.path().filename().string().rfind("step_", 0) == 0)
        steps.push_back(entry.path().filename());
    std::sort(steps.begin(), steps.end());
    return steps;
  };
  EXPECT_EQ(steps_in("kept"), (std::vector<std::string>{"step_00000004", "step_00000005"}));
  EXPECT_EQ(read_file(dir_ / "kept" / "latest"), "step_00000005\n");
  const CommandResult resumed = run(train_arguments(7, "kept", "kept.jsonl") +
                                    " --checkpoint-every 1 --checkpoint-keep-latest 2 --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(steps_in("kept"), (std::vector<std::string>{"step_00000006", "step_00000007"}));
  // A fresh run in the same directory removes only what it saved itself.
  const CommandResult fresh = run(train_arguments(8, "kept", "fresh.jsonl") +
                                  " --checkpoint-every 4 --checkpoint-keep-latest 1");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_EQ(steps_in("kept"),
            (std::vector<std::string>{"step_00000006", "step_00000007", "step_00000008"}));

  const CommandResult negative =
      run(train_arguments(2, "refused", "refused.jsonl") + " --checkpoint-keep-latest -1");
  EXPECT_EQ(negative.exit_code, 1);
  EXPECT_NE(negative.output.find(
                "--checkpoint-keep-latest: -1 is invalid; give 0 (keep every checkpoint) or more"),
            std::string::npos)
      << negative.output;
  const CommandResult no_directory =
      run("train --plan " + path("job.pplan") + " --data " + path("data/train.bin") +
          " --steps 2 --checkpoint-keep-latest 3");
  EXPECT_EQ(no_directory.exit_code, 1);
  EXPECT_NE(no_directory.output.find("--checkpoint-keep-latest: 3 needs --checkpoint-dir (the "
                                     "directory to keep them in)"),
            std::string::npos)
      << no_directory.output;
}

// torchtitan's async checkpointing: a checkpoint written in the background
// holds exactly what one written in line holds, and the run's losses do not
// change (training goes on while its files are written).
TEST_F(EndToEnd, CheckpointsWrittenInTheBackgroundEqualThoseWrittenInLine) {
  tokenize_and_plan();
  ASSERT_EQ(run(train_arguments(6, "inline", "inline.jsonl") + " --checkpoint-every 2").exit_code,
            0);
  const CommandResult background = run(train_arguments(6, "background", "background.jsonl") +
                                       " --checkpoint-every 2 --checkpoint-async");
  ASSERT_EQ(background.exit_code, 0) << background.output;
  for (const char* step : {"step_00000002", "step_00000004"})
    EXPECT_NE(background.output.find("checkpoint: " + path("background") + "/" + step +
                                     " (written in the background: "),
              std::string::npos)
        << background.output;
  EXPECT_NE(background.output.find("checkpoint: " + path("background") +
                                   "/step_00000006 (saved in line in "),
            std::string::npos)
      << "the last in line: " << background.output;
  for (const char* step : {"step_00000002", "step_00000004", "step_00000006"})
    for (const char* file : {"model.safetensors", "optimizer.safetensors", "train_state.json"}) {
      const std::string a = read_file(dir_ / "inline" / step / file);
      ASSERT_GT(a.size(), 100u) << step << "/" << file;
      EXPECT_TRUE(a == read_file(dir_ / "background" / step / file)) << step << "/" << file;
    }
  // Training goes on while the files are written: a write held up for a
  // second is published only after later steps.
  const CommandResult slow = run_command(
      "PARAPLAN_SLOW_CHECKPOINT_WRITE_AT_STEP=0:2 " + std::string(PARAPLAN_BINARY) + " " +
      train_arguments(6, "slow", "slow.jsonl") + " --checkpoint-every 2 --checkpoint-async");
  ASSERT_EQ(slow.exit_code, 0) << slow.output;
  const size_t published = slow.output.find("/step_00000002 (written in the background: ");
  ASSERT_NE(published, std::string::npos) << slow.output;
  EXPECT_LT(slow.output.find("step:     3  loss:"), published) << slow.output;
  const auto inline_log = read_json_lines(dir_ / "inline.jsonl");
  const auto background_log = read_json_lines(dir_ / "background.jsonl");
  ASSERT_EQ(background_log.size(), inline_log.size());
  for (size_t i = 0; i < inline_log.size(); ++i)
    EXPECT_EQ(background_log[i]["loss"].get<double>(), inline_log[i]["loss"].get<double>());

  const CommandResult no_directory = run("train --plan " + path("job.pplan") + " --data " +
                                         path("data/train.bin") + " --steps 2 --checkpoint-async");
  EXPECT_EQ(no_directory.exit_code, 1);
  EXPECT_NE(no_directory.output.find("--checkpoint-async needs --checkpoint-dir"),
            std::string::npos)
      << no_directory.output;
}

TEST_F(EndToEnd, ASecondRunInTheSameCheckpointDirectoryIsRefused) {
  tokenize_and_plan();
  CommandResult first_result;
  std::thread first([&] { first_result = run(train_arguments(1000000, "shared", "first.jsonl")); });
  // The first run names itself in the lock file once it holds it.
  const std::filesystem::path lock = dir_ / "shared" / ".paraplan-lock";
  std::string holder;
  for (int i = 0; i < 1200 && holder.find(" on host ") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    if (std::filesystem::exists(lock)) holder = read_file(lock);
  }
  ASSERT_NE(holder.find("paraplan train of plan " + path("job.pplan") + ", pid "),
            std::string::npos)
      << holder;
  const CommandResult second = run(train_arguments(2, "shared", "second.jsonl"));
  expect_clear_error(second, {"--checkpoint-dir " + path("shared") + " is in use by another run",
                              "pid ", "give this run another directory, or stop that run"});
  EXPECT_FALSE(std::filesystem::exists(dir_ / "second.jsonl"));  // it never stepped
  const pid_t pid = std::stoi(holder.substr(holder.find(", pid ") + 6));
  kill(pid, SIGTERM);
  first.join();
  EXPECT_NE(first_result.exit_code, 0);
  // The lock went with the killed run: the directory takes a new run.
  EXPECT_EQ(run(train_arguments(2, "shared", "third.jsonl")).exit_code, 0);
}

TEST_F(EndToEnd, ARunWhoseDirectoryWasTakenStopsBeforePublishing) {
  // Where flock does not reach across hosts, a run restarted elsewhere takes
  // the directory as if it were free and writes its own line into the lock
  // file. The first run, checkpointing every step, stops at its next
  // checkpoint without publishing it.
  tokenize_and_plan();
  CommandResult first_result;
  std::thread first([&] {
    first_result = run(train_arguments(1000000, "taken", "first.jsonl") + " --checkpoint-every 1");
  });
  const std::filesystem::path directory = dir_ / "taken";
  for (int i = 0; i < 1200 && !std::filesystem::exists(directory / "latest"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_TRUE(std::filesystem::exists(directory / "latest"));
  // Written aside and renamed over: the first run never reads it half-written.
  write_file(directory / "lock.tmp",
             "paraplan train of plan other.pplan, pid 7 on host node2, since now, run 42\n");
  std::filesystem::rename(directory / "lock.tmp", directory / ".paraplan-lock");
  first.join();
  expect_clear_error(first_result, {"--checkpoint-dir " + path("taken") +
                                        " was taken by another run (paraplan train of plan "
                                        "other.pplan, pid 7 on host node2",
                                    "publishes no checkpoint there and stops"});
  // What it published before stays whole: latest names a complete step.
  const std::string latest = read_file(directory / "latest");
  const std::string step = latest.substr(0, latest.find('\n'));
  EXPECT_TRUE(std::filesystem::exists(directory / step / "model.safetensors")) << step;
  EXPECT_EQ(read_file(directory / ".paraplan-lock"),
            "paraplan train of plan other.pplan, pid 7 on host node2, since now, run 42\n");
}

TEST_F(EndToEnd, LossEqualsAnIndependentGpt2Reference) {
  // tests/gpt2_reference.py recomputes the validation loss in float64 NumPy
  // from the saved Hugging Face checkpoint: the same number means paraplan
  // computes GPT-2 and saves it in Hugging Face's layout.
  tokenize_and_plan();
  ASSERT_EQ(run(train_arguments(10, "ckpt", "log.jsonl")).exit_code, 0);
  const auto lines = read_json_lines(dir_ / "log.jsonl");
  ASSERT_EQ(lines.size(), 10u);
  const double logged = lines[9]["val_loss"].get<double>();
  // eval_batches 2 x global batch 4 = the first 8 validation samples.
  const CommandResult reference = run_command(
      std::string("/usr/bin/python3 ") + PARAPLAN_SOURCE_DIR + "/tests/gpt2_reference.py " +
      path("ckpt/step_00000010") + " " + path("data/val.bin") + " 8");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  // fp32 against float64 over 128 tokens: agreement to ~1e-6 is expected.
  EXPECT_NEAR(std::stod(reference.output), logged, 1e-5) << reference.output;
}

// Warmup-stable-decay (Megatron's WSD): the peak rate from warm-up until the
// last wsd_decay_steps steps, which decay linearly to the minimum.
TEST_F(EndToEnd, WarmupStableDecayHoldsThePeakThenDecaysAtTheEnd) {
  tokenize_and_plan(std::string(kTinyJob) + "decay_style = \"wsd\"\nwsd_decay_steps = 4\n");
  const CommandResult inspected = run("inspect " + path("job.pplan"));
  EXPECT_NE(inspected.output.find("optimizer: AdamW lr 0.003 -> 0.0003 (wsd: linear decay over "
                                  "the last 4 steps, warmup 2, 10 steps)"),
            std::string::npos)
      << inspected.output;
  ASSERT_EQ(run(train_arguments(10, "wsd", "wsd.jsonl")).exit_code, 0);
  const auto lines = read_json_lines(dir_ / "wsd.jsonl");
  ASSERT_EQ(lines.size(), 10u);
  const double expected[] = {1.5e-3, 3e-3, 3e-3,     3e-3,    3e-3,
                             3e-3,   3e-3, 2.325e-3, 1.65e-3, 9.75e-4};
  for (size_t i = 0; i < lines.size(); ++i)
    EXPECT_NEAR(lines[i]["lr"].get<double>(), expected[i], 1e-9) << "step " << i + 1;
}

TEST_F(EndToEnd, InspectPrintsEveryFieldAsJson) {
  tokenize_and_plan();
  CommandResult table = run("inspect " + path("job.pplan"));
  ASSERT_EQ(table.exit_code, 0) << table.output;
  CommandResult json = run("inspect " + path("job.pplan") + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json plan = nlohmann::json::parse(json.output);
  EXPECT_EQ(plan["model"]["num_layers"], 2);
  EXPECT_EQ(plan["training"]["num_micro_batches"], 2);
  EXPECT_EQ(plan["mesh"]["pipeline_parallel"], 1);
  EXPECT_EQ(plan["stages"].size(), 1u);
  EXPECT_TRUE(plan.contains("predictions"));
  EXPECT_TRUE(plan.contains("schedule"));
}

// samples/gpt2_124m/fineweb.toml is llm.c's GPT-2 124M recipe
// (scripts/run_gpt2_124M.sh): its plan for 8 H100s holds llm.c's flags.
TEST_F(EndToEnd, TheLlmcGpt2RecipePlansAsLlmcRunsIt) {
  const CommandResult planned =
      run("plan --config " + std::string(PARAPLAN_SOURCE_DIR) +
          "/samples/gpt2_124m/fineweb.toml --output " + path("fineweb.pplan"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const nlohmann::json plan =
      nlohmann::json::parse(run("inspect " + path("fineweb.pplan") + " --json").output);
  const nlohmann::json &training = plan["training"], &optimizer = training["optimizer"];
  EXPECT_EQ(plan["mesh"]["data_parallel"], 8);                         // mpirun -np 8
  EXPECT_EQ(plan["zero"]["stage"], 1);                                 // -z 1
  EXPECT_EQ(training["micro_batch_size"], 64);                         // -b 64
  EXPECT_EQ(training["global_batch_size"].get<int>() * 1024, 524288);  // -d 524288
  EXPECT_EQ(training["num_micro_batches"], 1);
  EXPECT_DOUBLE_EQ(optimizer["learning_rate"].get<double>(), 6e-4);     // -l
  EXPECT_DOUBLE_EQ(optimizer["min_learning_rate"].get<double>(), 0.0);  // -q 0.0
  EXPECT_EQ(optimizer["warmup_steps"], 700);                            // -u 700
  EXPECT_EQ(optimizer["total_steps"], 18865);
  EXPECT_DOUBLE_EQ(optimizer["weight_decay"].get<double>(), 0.1);  // -c 0.1
  EXPECT_EQ(training["eval_interval"], 250);                       // -v 250
  EXPECT_EQ(training["eval_batches"], 20);
  EXPECT_EQ(plan["stages"][0]["recompute"][0], "none");  // -r 0
}

TEST_F(EndToEnd, PlanOverridesOnTheCommandLine) {
  write_file(dir_ / "job.toml", kTinyJob);
  CommandResult planned =
      run("plan --config " + path("job.toml") + " --output " + path("job.pplan") +
          " --training.micro_batch_size 1" + " --planner.recompute_modules ROOT");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const nlohmann::json plan =
      nlohmann::json::parse(run("inspect " + path("job.pplan") + " --json").output);
  EXPECT_EQ(plan["training"]["micro_batch_size"], 1);
  EXPECT_EQ(plan["training"]["num_micro_batches"], 4);
  EXPECT_EQ(plan["stages"][0]["recompute"][0], "full");
}

TEST_F(EndToEnd, PlanSaysWhatALostNodeWouldLeadTo) {
  write_file(dir_ / "job.toml", kTinyJob);
  const CommandResult planned =
      run("plan --config " + path("job.toml") + " --output " + path("job.pplan") +
          " --cluster.num_nodes 2 --cluster.devices_per_node 2 --what-if-lost-nodes 1");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("what if 1 node of 2 were lost: "), std::string::npos)
      << planned.output;
  EXPECT_NE(planned.output.find(" on 1 node x 2 devices, micro-batch "), std::string::npos)
      << planned.output;
  EXPECT_NE(planned.output.find("x this plan's step"), std::string::npos) << planned.output;
  const CommandResult none = run("plan --config " + path("job.toml") + " --output " +
                                 path("one.pplan") + " --what-if-lost-nodes 1");
  EXPECT_NE(none.output.find("what if 1 node of 1 were lost: no node would be left"),
            std::string::npos)
      << none.output;
}

TEST_F(EndToEnd, LaunchAsRootWithoutOpenMpisConsentSaysHowInOneLine) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: what a container's user meets";
  tokenize_and_plan();
  const CommandResult refused =
      run_command("env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM " +
                  std::string(PARAPLAN_BINARY) + " launch --plan " + path("job.pplan") +
                  " -- train --data " + path("data/train.bin") + " --steps 1");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_EQ(refused.output,
            "paraplan: error: launch: running as root, which Open MPI's mpirun refuses: set "
            "OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (as containers do), "
            "or run as another user\n");
}

TEST_F(EndToEnd, SampleIsReproducibleFromACheckpoint) {
  tokenize_and_plan();
  ASSERT_EQ(run(train_arguments(10, "ckpt", "log.jsonl")).exit_code, 0);
  const std::string arguments =
      "sample --checkpoint " + path("ckpt") + " --prompt 'line 1' --tokens 40 --seed 3";
  CommandResult first = run(arguments);
  CommandResult second = run(arguments);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(first.output, second.output);
  EXPECT_EQ(first.output.rfind("line 1", 0), 0u);
  EXPECT_GE(first.output.size(), 46u);  // prompt + 40 bytes (+ newline)
  // The sampler runs the length of its text: 6 + 4 tokens in a window of 10
  // draw what the first 4 of 40 drew in the model's 16 (which then slides).
  const CommandResult shorter =
      run("sample --checkpoint " + path("ckpt") + " --prompt 'line 1' --tokens 4 --seed 3");
  ASSERT_EQ(shorter.exit_code, 0) << shorter.output;
  ASSERT_EQ(shorter.output.back(), '\n');
  // (A byte the tiny model draws that is no UTF-8 shows as U+FFFD in both.)
  EXPECT_EQ(first.output.rfind(shorter.output.substr(0, shorter.output.size() - 1), 0), 0u)
      << shorter.output << first.output;
  // The prompt's 6 tokens in chunks of 1 (six), 4 (and the last 2) or 512
  // (one, the default) fill the key/value cache alike.
  for (const char* chunk : {"1", "4"}) {
    const CommandResult chunked = run(arguments + " --prefill-chunk " + chunk);
    ASSERT_EQ(chunked.exit_code, 0) << chunked.output;
    EXPECT_EQ(chunked.output, first.output) << "--prefill-chunk " << chunk;
  }
}

TEST_F(EndToEnd, LlamaTrainsResumesBitForBitAndSamples) {
  // The same tiny job as a Llama (4 query heads over 2 KV heads, SwiGLU 64).
  std::string job = kTinyJob;
  job.replace(job.find("[model]\n"), 8,
              "[model]\narchitecture = \"llama\"\nnum_kv_heads = 2\nffn_size = 64\n");
  tokenize_and_plan(job);
  ASSERT_EQ(run(train_arguments(10, "straight", "straight.jsonl")).exit_code, 0);
  ASSERT_EQ(run(train_arguments(5, "split", "split.jsonl")).exit_code, 0);
  const CommandResult resumed = run(train_arguments(10, "split", "split.jsonl") + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto straight = read_json_lines(dir_ / "straight.jsonl");
  const auto split = read_json_lines(dir_ / "split.jsonl");
  ASSERT_EQ(straight.size(), 10u);
  ASSERT_EQ(split.size(), 10u);
  EXPECT_NEAR(straight[0]["loss"].get<double>(), std::log(256.0), 0.1);
  EXPECT_LT(straight[9]["loss"].get<double>(), straight[0]["loss"].get<double>() - 0.5);
  for (size_t i = 0; i < 10; ++i)
    EXPECT_EQ(split[i]["loss"].get<double>(), straight[i]["loss"].get<double>()) << i + 1;
  const std::string config = read_file(dir_ / "straight" / "step_00000010" / "config.json");
  EXPECT_NE(config.find("\"LlamaForCausalLM\""), std::string::npos) << config;
  const std::string sample =
      "sample --checkpoint " + path("straight") + " --prompt 'line 1' --tokens 40 --seed 3";
  const CommandResult sampled = run(sample);
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_EQ(sampled.output.rfind("line 1", 0), 0u);
  EXPECT_GE(sampled.output.size(), 46u);
  // Rotary positions at each chunk's offset: the prompt in chunks of 4 and 2.
  EXPECT_EQ(run(sample + " --prefill-chunk 4").output, sampled.output);
  // In bf16 (half the memory): a text of its own, after the prompt.
  const CommandResult bf16 = run(sample + " --dtype bfloat16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_EQ(bf16.output.rfind("line 1", 0), 0u);
  EXPECT_GE(bf16.output.size(), 46u);
  EXPECT_NE(run(sample + " --dtype float16").exit_code, 0);
}

// ---- bad input: one clear line, non-zero exit, never a crash -------------------

TEST_F(EndToEnd, BadPlanFiles) {
  tokenize_and_plan();
  expect_clear_error(run("inspect " + path("missing.pplan")), {"missing.pplan"});
  const std::string bytes = read_file(dir_ / "job.pplan");
  write_file(dir_ / "truncated.pplan", bytes.substr(0, bytes.size() / 2));
  expect_clear_error(run("inspect " + path("truncated.pplan")), {"truncated.pplan"});
  write_file(dir_ / "text.pplan", "this is not a plan at all, just some text");
  expect_clear_error(run("inspect " + path("text.pplan")), {"text.pplan"});
  expect_clear_error(
      run("train --plan " + path("text.pplan") + " --data " + path("data/train.bin")),
      {"text.pplan"});
}

TEST_F(EndToEnd, BadDataFiles) {
  tokenize_and_plan();
  const std::string bytes = read_file(dir_ / "data" / "train.bin");
  write_file(dir_ / "truncated.bin", bytes.substr(0, 1024 + 20));
  expect_clear_error(run("train --plan " + path("job.pplan") + " --data " + path("truncated.bin")),
                     {"truncated.bin"});
  expect_clear_error(run("train --plan " + path("job.pplan") + " --data " + path("nothing.bin")),
                     {"nothing.bin"});
  // A plan whose sequence is longer than the data.
  std::string tiny_data = bytes.substr(0, 1024);
  tiny_data.replace(8, 4, std::string("\x0a\x00\x00\x00", 4));  // token count 10
  tiny_data += bytes.substr(1024, 20);
  write_file(dir_ / "short.bin", tiny_data);
  expect_clear_error(run("train --plan " + path("job.pplan") + " --data " + path("short.bin")),
                     {"short.bin", "seq_len"});
  // No data at all (the job's [data] names none), and a glob of nothing.
  expect_clear_error(run("train --plan " + path("job.pplan")),
                     {"no training data: give --data", "[data] train"});
  expect_clear_error(
      run("train --plan " + path("job.pplan") + " --data '" + path("data/fineweb_*.bin") + "'"),
      {"fineweb_*.bin", "the glob matches no file"});
  // Shards of two formats.
  write_file(dir_ / "mixed_1.bin", bytes);
  std::string wide = bytes.substr(0, 1024);
  wide.replace(0, 8, std::string("\xa1\xd9\x34\x01\x07\x00\x00\x00", 8));  // Llama 3's
  wide.replace(8, 4, std::string("\x0a\x00\x00\x00", 4));                  // 10 tokens of 4 bytes
  wide += std::string(40, '\0');
  write_file(dir_ / "mixed_2.bin", wide);
  expect_clear_error(
      run("train --plan " + path("job.pplan") + " --data '" + path("mixed_*.bin") + "'"),
      {"mixed_1.bin holds uint16 tokens", "mixed_2.bin holds uint32 tokens"});
}

TEST_F(EndToEnd, TokenIdsBeyondTheVocabulary) {
  std::string job = kTinyJob;
  job.replace(job.find("vocab_size = 256"), 16, "vocab_size = 100");
  tokenize_and_plan(job);  // the corpus has bytes >= 100 ('t' is 116)
  expect_clear_error(run("train --plan " + path("job.pplan") + " --data " + path("data/train.bin")),
                     {"train.bin", "vocab_size 100"});
}

TEST_F(EndToEnd, BadJobConfigs) {
  auto plan_with = [&](const std::string& from, const std::string& to) {
    std::string job = kTinyJob;
    job.replace(job.find(from), from.size(), to);
    write_file(dir_ / "bad.toml", job);
    return run("plan --config " + path("bad.toml") + " --output " + path("bad.pplan"));
  };
  expect_clear_error(plan_with("seed = 7", "seed = 7\nlearning_rat = 1"),
                     {"bad.toml", "learning_rat"});
  expect_clear_error(plan_with("num_heads = 4", "num_heads = 5"), {"bad.toml", "num_heads"});
  expect_clear_error(plan_with("num_layers = 2", "num_layers = 0"), {"bad.toml", "num_layers"});
  expect_clear_error(plan_with("d_model = 32", "d_model = -32"), {"bad.toml", "d_model"});
  expect_clear_error(run("plan --config " + path("absent.toml") + " --output " + path("x.pplan")),
                     {"absent.toml"});
  EXPECT_FALSE(fs::exists(dir_ / "bad.pplan"));
}

TEST_F(EndToEnd, BadCheckpoints) {
  tokenize_and_plan();
  expect_clear_error(run(train_arguments(2, "empty", "log.jsonl") + " --resume"), {"empty"});
  ASSERT_EQ(run(train_arguments(2, "ckpt", "log.jsonl")).exit_code, 0);
  const fs::path model = dir_ / "ckpt" / "step_00000002" / "model.safetensors";
  const std::string bytes = read_file(model);
  write_file(model, bytes.substr(0, bytes.size() / 2));
  expect_clear_error(run(train_arguments(4, "ckpt", "log.jsonl") + " --resume"),
                     {"model.safetensors"});
}

}  // namespace
