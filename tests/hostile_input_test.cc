// hostile_input_test.cc: the `paraplan` command given what an adversarial user
// (or a flipped bit) gives it: plans missing tables or holding absurd sizes,
// checkpoints with impossible configs, training states and 'latest' files,
// named pipes, devices and directories where files belong. Every case must end
// as one clear line naming the file and the field, exit status 1, no crash and
// no hang (each command runs under `timeout`, so a hang fails instead of
// stalling the suite).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "command_fixture.h"
#include "schema/plan_test_support.h"

namespace {

namespace fs = std::filesystem;
using namespace paraplan::testing;
using paraplan::test_plans::build_plan;
using paraplan::test_plans::make_plan_spec;
using paraplan::test_plans::PlanSpec;

class HostileInput : public CommandTest {
 protected:
  void SetUp() override {
    CommandTest::SetUp();
    tokenize_and_plan();
  }

  // `paraplan <arguments>`, killed after 60 s (exit code 124: it hung).
  static CommandResult bounded(const std::string& arguments) {
    return run_command("timeout 60 " + std::string(PARAPLAN_BINARY) + " " + arguments);
  }
  std::string train(const std::string& plan, const std::string& extra = "") const {
    return "train --plan " + path(plan) + " --data " + path("data/train.bin") + " " + extra;
  }
  // A valid one-rank plan for the tiny model and data, edited by `edit`.
  void write_plan_file(const std::string& name, const std::function<void(PlanSpec&)>& edit) const {
    PlanSpec spec = make_plan_spec(1, 1, 1, 2, 2);
    spec.vocab_size = 256;
    spec.seq_len = 16;
    spec.d_model = 32;
    spec.ffn_size = 128;
    spec.stage_predictions[0].weights = 1 << 20;
    edit(spec);
    const std::vector<uint8_t> bytes = build_plan(spec);
    write_file(dir_ / name, std::string(bytes.begin(), bytes.end()));
  }
};

// Issue 14, 1: a stage prediction without its memory made `train` crash at its end.
TEST_F(HostileInput, PlanWithoutAStagesMemoryPredictionIsRefused) {
  write_plan_file("no_memory.pplan",
                  [](PlanSpec& s) { s.stage_predictions[0].has_memory = false; });
  const std::string field = "predictions.stages[0].memory: missing";
  expect_clear_error(bounded(train("no_memory.pplan", "--steps 1")), {"no_memory.pplan", field});
  expect_clear_error(bounded("inspect " + path("no_memory.pplan")), {"no_memory.pplan", field});
}

// Issue 14, 2: `paraplan sample` divided by n_head = 0 (SIGFPE).
TEST_F(HostileInput, CheckpointConfigWithImpossibleSizesIsRefused) {
  ASSERT_EQ(bounded(train("job.pplan", "--steps 1 --checkpoint-dir " + path("ckpt"))).exit_code, 0);
  const fs::path config = dir_ / "ckpt/step_00000001/config.json";
  const std::string good = read_file(config);
  const auto sample_with = [&](const std::string& from, const std::string& to) {
    std::string edited = good;
    edited.replace(edited.find(from), from.size(), to);
    write_file(config, edited);
    return bounded("sample --checkpoint " + path("ckpt") + " --prompt hi --tokens 2");
  };
  expect_clear_error(sample_with("\"n_head\": 4", "\"n_head\": 0"),
                     {config.string() + ": n_head: 0; must be positive"});
  expect_clear_error(sample_with("\"n_head\": 4", "\"n_head\": 3"),
                     {config.string() + ": n_embd: 32 is not divisible by n_head 3"});
  expect_clear_error(sample_with("\"n_layer\": 2", "\"n_layer\": 4294967298"),
                     {config.string() + ": n_layer: 4294967298; must be at most 4096"});
  expect_clear_error(sample_with("\"n_embd\": 32", "\"n_embd\": -32"),
                     {config.string() + ": n_embd: -32; must be positive"});
}

// Issue 14, 3 and 8: train_state.json and 'latest' as a hostile user writes them.
TEST_F(HostileInput, ResumingFromAHostileCheckpointDirectoryIsRefused) {
  const std::string resume = train("job.pplan", "--steps 2 --resume --checkpoint-dir " + path("c"));
  ASSERT_EQ(bounded(train("job.pplan", "--steps 1 --checkpoint-dir " + path("c"))).exit_code, 0);
  const fs::path state = dir_ / "c/step_00000001/train_state.json";
  const std::string good = read_file(state);
  std::string edited = good;
  edited.replace(edited.find("\"next_train_sample\": 4"), 22,
                 "\"next_train_sample\": 9223372036854775800");
  write_file(state, edited);
  expect_clear_error(bounded(resume), {state.string() + ": field 'next_train_sample' is "
                                                        "9223372036854775800, out of range (valid: "
                                                        "0 to 4611686018427387904)"});
  edited = good;
  edited.replace(edited.find("\"step\": 1"), 9, "\"step\": 2147483648");
  write_file(state, edited);
  expect_clear_error(bounded(resume), {state.string() + ": field 'step' is 2147483648, out of "
                                                        "range (valid: 0 to 2147483646)"});
  write_file(state, good);
  for (const std::string latest : {"../../etc", "/etc", "step_1/../../.."}) {
    write_file(dir_ / "c/latest", latest + "\n");
    expect_clear_error(bounded(resume), {path("c/latest") + " holds '" + latest +
                                         "', not the name of a step directory of " + path("c")});
  }
  write_file(dir_ / "c/latest", std::string("\xff\xfe\x00junk", 7));
  expect_clear_error(bounded(resume), {path("c/latest") + " holds '\\xff\\xfe\\x00junk'"});
}

// Issue 14, 8: a save killed part-way leaves step_N.tmp-<pid>-<n>; the next save removes it.
TEST_F(HostileInput, TemporariesOfKilledSavesAreRemovedByTheNextSave) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid no process has now
  const fs::path leftover = dir_ / "c" / ("step_00000001.tmp-" + std::to_string(child) + "-0");
  fs::create_directories(leftover);
  write_file(leftover / "model.safetensors", "partial");
  ASSERT_EQ(bounded(train("job.pplan", "--steps 1 --checkpoint-dir " + path("c"))).exit_code, 0);
  EXPECT_FALSE(fs::exists(leftover));
  EXPECT_TRUE(fs::exists(dir_ / "c/step_00000001/model.safetensors"));
}

// Issue 14, 4: named pipes hung the reader forever; /dev/zero filled memory; a
// directory read as an empty file.
TEST_F(HostileInput, PipesDevicesAndDirectoriesAreRefusedWithoutHanging) {
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  const std::string pipe = path("pipe") + ": cannot read the ";
  const std::string what = "it is a named pipe (FIFO); expected a regular file";
  expect_clear_error(bounded("train --plan " + path("job.pplan") + " --data " + path("pipe")),
                     {pipe + "token file: " + what});
  expect_clear_error(bounded(train("job.pplan", "--val-data " + path("pipe"))),
                     {pipe + "token file: " + what});
  expect_clear_error(bounded("plan --config " + path("pipe") + " --output " + path("p.pplan")),
                     {pipe + "job config: " + what});
  expect_clear_error(bounded("inspect " + path("pipe")), {pipe + "plan file: " + what});
  expect_clear_error(
      bounded("plan --config " + path("job.toml") + " --output " + path("p.pplan") +
              " --planner.partition_constraints_path " + path("pipe")),
      {"[planner] partition_constraints_path: " + pipe + "partition constraints file: " + what});
  expect_clear_error(bounded("launch --plan " + path("job.pplan") + " --hostfile " + path("pipe") +
                             " --dry-run -- train"),
                     {pipe + "hostfile: " + what});
  const std::string device = "it is a character device; expected a regular file";
  expect_clear_error(bounded("plan --config /dev/zero --output " + path("p.pplan")),
                     {"/dev/zero: cannot read the job config: " + device});
  expect_clear_error(bounded("plan --config " + path("job.toml") + " --output " + path("p.pplan") +
                             " --planner.partition_constraints_path /dev/zero"),
                     {"/dev/zero: cannot read the partition constraints file: " + device});
  expect_clear_error(bounded("plan --config " + path("data") + " --output " + path("p.pplan")),
                     {path("data") + ": cannot read the job config: it is a directory"});
  EXPECT_FALSE(fs::exists(dir_ / "p.pplan"));
}

// Issue 14, 5 and 6: sizes no plan can hold, refused by name before anything
// is allocated, with no overflowed number in the message.
TEST_F(HostileInput, AbsurdSizesAreRefusedBeforeAllocating) {
  const auto plan_with = [&](const std::string& overrides) {
    return bounded("plan --config " + path("job.toml") + " --output " + path("p.pplan") + " " +
                   overrides);
  };
  expect_clear_error(
      plan_with("--training.global_batch_size 16777216 --training.micro_batch_size 1"),
      {"job.toml: [training] global_batch_size = 16777216 with [training] micro_batch_size = 1 "
       "and data-parallel degree 1 makes 16777216 micro-batches per step, more than the 16384 a "
       "plan may hold"});
  const CommandResult layers =
      plan_with("--model.num_layers 2147483647 --planner.pipeline_nstages 16");
  expect_clear_error(layers, {"[model] num_layers = 2147483647; must be at most 4096"});
  EXPECT_EQ(layers.output.find("-2147483647"), std::string::npos) << layers.output;
  const CommandResult width = plan_with("--model.d_model 536870912");
  expect_clear_error(width, {"[model] d_model = 536870912; must be at most 16777216"});
  EXPECT_EQ(width.output.find("ffn_size"), std::string::npos) << width.output;
  EXPECT_FALSE(fs::exists(dir_ / "p.pplan"));

  // Hand-made plans: beyond the limits, refused by the plan's validation.
  write_plan_file("wide.pplan", [](PlanSpec& s) {
    s.d_model = 16'777'344;
    s.ffn_size = 2'147'483'647;
  });
  expect_clear_error(bounded(train("wide.pplan", "--steps 1")),
                     {"wide.pplan: invalid plan:", "model.d_model: 16777344; must be at most",
                      "model.ffn_size: 2147483647; must be at most"});
  // Within the limits but far from the plan's own prediction (1 MiB of
  // weights): refused before the stage allocates.
  write_plan_file("huge.pplan", [](PlanSpec& s) {
    s.d_model = 16'777'216;
    s.ffn_size = 16'777'216;
  });
  expect_clear_error(bounded(train("huge.pplan", "--steps 1")),
                     {"huge.pplan: pipeline stage 0 holds",
                      "more than twice the plan's own "
                      "prediction predictions.stages[0]."
                      "memory.total"});
}

// Issue 46, 2: counts that multiply the work are refused by name at load and
// on the command line (the job file's are planner_test's).
TEST_F(HostileInput, CountsThatMultiplyWorkAreBoundedByName) {
  for (const int32_t batches : {65537, 1000000, 16777216, 2147483647}) {
    write_plan_file("evals.pplan", [batches](PlanSpec& s) { s.eval_batches = batches; });
    expect_clear_error(
        bounded(train("evals.pplan", "--steps 1")),
        {"evals.pplan: invalid plan:",
         "training.eval_batches: " + std::to_string(batches) + "; must be at most 65536"});
  }
  write_plan_file("ok.pplan", [](PlanSpec&) {});
  expect_clear_error(bounded(train("ok.pplan", "--steps 0")),
                     {"--steps: 0 is invalid; give 1..2147483646"});
  expect_clear_error(bounded(train("ok.pplan", "--checkpoint-every -3")),
                     {"--checkpoint-every: -3 is invalid; give 0..2147483646"});
  expect_clear_error(bounded(train("ok.pplan", "--checkpoint-every-seconds inf")),
                     {"--checkpoint-every-seconds: inf is invalid; must be a finite number >= 0"});
  // Replay counts warm-up and measured steps together in an int (it once
  // wrapped around and reported a measurement of nothing).
  expect_clear_error(
      bounded("replay --plan " + path("ok.pplan") + " --steps 2147483646 --warmup 1"),
      {"--steps 2147483646 with --warmup 1: at most 2147483646 steps in all"});
}

// Issue 46, 2: eval_batches at its bound (65536) on the tiny validation set
// of a few dozen batches, evaluated every step: each evaluation reads one
// pass, the run says so once and ends in seconds (a wrap-around evaluation
// ran for hours).
TEST_F(HostileInput, EvaluationReadsAtMostOnePassOfTheValidationData) {
  write_plan_file("evals.pplan", [](PlanSpec& s) {
    s.eval_batches = 65536;
    s.eval_interval = 1;
  });
  const std::string val = path("data/val.bin");
  const CommandResult result = bounded(
      train("evals.pplan", "--steps 2 --val-data " + val + " --log-json " + path("evals.jsonl")));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // val.bin: a 1024-byte header, uint16 tokens; samples of 16 + 1 tokens.
  const int64_t samples = ((static_cast<int64_t>(fs::file_size(val)) - 1024) / 2 - 1) / 16;
  const int64_t global_batch = make_plan_spec(1, 1, 1, 2, 2).global_batch_size;
  const int64_t batches = samples / global_batch;
  ASSERT_GT(batches, 1);
  const std::string note =
      "evaluation: training.eval_batches = 65536 asks for more than one pass over --val-data " +
      val + " (" + std::to_string(samples) + " samples = " + std::to_string(batches) +
      " global batches of " + std::to_string(global_batch) + "): each evaluation reads " +
      std::to_string(batches) + " batch(es), one pass\n";
  const size_t at = result.output.find(note);
  EXPECT_NE(at, std::string::npos) << result.output;
  EXPECT_EQ(result.output.find(note, at + 1), std::string::npos) << "said more than once";
  const std::vector<nlohmann::json> log = read_json_lines(dir_ / "evals.jsonl");
  ASSERT_EQ(log.size(), 2u);
  for (const nlohmann::json& step : log) EXPECT_TRUE(step.contains("val_loss")) << step.dump();

  // Less than one global batch of validation data: one batch, said to wrap.
  write_file(dir_ / "short.txt", "just a few bytes of validation text here\n");
  ASSERT_EQ(bounded("tokenize --val-fraction 0 --input " + path("short.txt") + " --output " +
                    path("short"))
                .exit_code,
            0);
  const CommandResult short_run =
      bounded(train("evals.pplan", "--steps 1 --val-data " + path("short/train.bin")));
  ASSERT_EQ(short_run.exit_code, 0) << short_run.output;
  EXPECT_NE(short_run.output.find("evaluation: --val-data " + path("short/train.bin") +
                                  " holds 2 samples, fewer than one global batch of " +
                                  std::to_string(global_batch) +
                                  ": each evaluation reads 1 batch, which wraps around them"),
            std::string::npos)
      << short_run.output;
}

// Issue 46, 4 (review): checkpoints record the data's file names, so a
// token file whose name is not UTF-8 is refused before anything runs.
TEST_F(HostileInput, ATokenFileNameThatIsNotUtf8IsRefused) {
  const std::filesystem::path odd = dir_ / "data" / "tr\xffin.bin";
  std::filesystem::copy_file(dir_ / "data" / "train.bin", odd,
                             std::filesystem::copy_options::overwrite_existing);
  write_plan_file("names.pplan", [](PlanSpec&) {});
  expect_clear_error(
      bounded("train --plan " + path("names.pplan") + " --data '" + odd.string() + "' --steps 1"),
      {"--data: ", "the file name's byte 0xff at offset", "is not valid UTF-8"});
}

// Issue 14, 7: `inspect --json` printed nlohmann's type_error.316 without the file.
TEST_F(HostileInput, PlanStringsThatAreNotUtf8AreNamed) {
  write_plan_file("latin1.pplan", [](PlanSpec& s) { s.task_name = "caf\xe9"; });
  expect_clear_error(bounded("inspect --json " + path("latin1.pplan")),
                     {"latin1.pplan: invalid plan:",
                      "header.task_name: byte 0xe9 at offset 3 is not valid UTF-8"});
  // Issue 46, 3: a data path's byte 0xFF (the FlatBuffers verifier accepts it).
  write_plan_file("data_path.pplan", [](PlanSpec& s) {
    s.has_data = true;
    s.data_train = {{"/data/tr\xffin.bin", 1.0}};
  });
  for (const char* flags : {"inspect --json ", "inspect "})
    expect_clear_error(bounded(flags + path("data_path.pplan")),
                       {"data_path.pplan: invalid plan:",
                        "training.data.train[0].paths: byte 0xff at offset 8 is not valid UTF-8"});
  const CommandResult result = bounded("plan --config " + path("job.toml") + " --output " +
                                       path("p.pplan") + " --job.name \"$(printf 'caf\\351')\"");
  expect_clear_error(result, {"[job] name: byte 0xe9 at offset 3 is not valid UTF-8"});
}

}  // namespace
