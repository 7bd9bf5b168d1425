// hellaswag_test.cc: the HellaSwag score (runtime/train/evaluation.h) does
// not depend on the plan. `paraplan evaluate` of one checkpoint under plans
// with data parallelism and ZeRO-3, tensor and sequence parallelism, context
// parallelism (each rank two chunks of every row, so a completion's tokens
// are scored on several ranks), an interleaved pipeline, and Llama with
// context and tensor parallelism together, gives every completion's mean loss
// of the single-rank evaluation (fp32: 1e-6, the losses' own tolerance), the
// same right counts and the same validation loss. `train --hellaswag` logs at
// its last step the score `evaluate` gives its final checkpoint. Bad input
// gets one clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "command_fixture.h"
#include "schedule_plan_fixture.h"

namespace paraplan::testing {
namespace {

constexpr int kSequence = 64;

class HellaSwagEvaluation : public SchedulePlanTraining {
 protected:
  // Byte-level examples (the test models' vocabulary is 256): a context
  // longer than the row is cut from the left.
  static std::string examples_file() {
    const std::string path = *directory_ / "hellaswag_val.jsonl";
    std::string lines;
    for (int i = 0; i < 11; ++i) {
      const std::string context = i == 3
                                      ? std::string(90, 'x') + " sample 12 of a small corpus, line"
                                      : "sample " + std::to_string(i * 7919 % 1000) + " of a small";
      lines += R"({"ctx": ")" + context + R"(", "label": )" + std::to_string(i % 4) +
               R"(, "endings": ["corpus, line )" + std::to_string(i) +
               R"(", "of a big one", "\u00e9t\u00e9 \u65e5\u672c", "line"]})" + "\n";
    }
    write_file(path, lines);
    return path;
  }

  // `paraplan evaluate` of `checkpoints` under the case's plan (started by
  // `launch`): its --report.
  static nlohmann::json evaluate(const ScheduleCase& c, const std::string& checkpoints,
                                 const std::string& extra = "") {
    const std::string plan_file = *directory_ / (c.name + "_evaluate.pplan");
    const std::vector<uint8_t> bytes = plan_bytes(c);
    write_file(plan_file, std::string(bytes.begin(), bytes.end()));
    const std::string report = *directory_ / (c.name + "_report.json");
    const CommandResult evaluated =
        paraplan::testing::run("launch --plan " + plan_file + " -- evaluate --checkpoint " +
                               checkpoints + " --hellaswag " + examples_file() + " --val-data " +
                               *directory_ / "data/val.bin" + " --report " + report + " " + extra);
    EXPECT_EQ(evaluated.exit_code, 0) << evaluated.output;
    EXPECT_NE(evaluated.output.find("hellaswag: 11 examples (44 rows of 64 tokens) from "),
              std::string::npos)
        << evaluated.output;
    EXPECT_NE(evaluated.output.find("1 contexts cut from the left to fit seq_len"),
              std::string::npos)
        << evaluated.output;
    return nlohmann::json::parse(read_file(report));
  }

  static void expect_same_scores(const nlohmann::json& a, const nlohmann::json& b,
                                 const std::string& name) {
    EXPECT_NEAR(a["validation_loss"].get<double>(), b["validation_loss"].get<double>(),
                kLossTolerance)
        << name;
    const nlohmann::json &x = a["hellaswag"], &y = b["hellaswag"];
    EXPECT_EQ(x["examples"], 11) << name;
    EXPECT_EQ(x["right"], y["right"]) << name;
    EXPECT_EQ(x["right_by_sum"], y["right_by_sum"]) << name;
    ASSERT_EQ(x["mean_losses"].size(), y["mean_losses"].size()) << name;
    double largest = 0;
    for (size_t e = 0; e < x["mean_losses"].size(); ++e)
      for (size_t c = 0; c < 4; ++c)
        largest = std::max(largest, std::fabs(x["mean_losses"][e][c].get<double>() -
                                              y["mean_losses"][e][c].get<double>()));
    EXPECT_LT(largest, kLossTolerance) << name;
    std::cout << name << ": largest completion mean-loss difference from one rank " << largest
              << std::endl;
  }
};

ScheduleCase sequence_case(std::string name, std::string architecture = "gpt2") {
  return ScheduleCase{
      .name = std::move(name), .architecture = std::move(architecture), .seq_len = kSequence};
}

TEST_F(HellaSwagEvaluation, EveryPlanScoresAsOneRank) {
  for (const char* architecture : {"gpt2", "llama"}) {
    const std::string a = architecture;
    const ScheduleCase single = sequence_case("single_" + a + "_seq64", a);
    ASSERT_EQ(run(single).losses.size(), static_cast<size_t>(kSteps));
    const std::string checkpoints = *directory_ / (single.name + "_checkpoints");
    const nlohmann::json reference = evaluate(single, checkpoints);
    std::vector<ScheduleCase> cases;
    if (a == "gpt2") {
      ScheduleCase data = sequence_case("gpt2_dp2_zero3");
      data.data = 2, data.zero_stage = 3;
      ScheduleCase tensor = sequence_case("gpt2_tp2_sp");
      tensor.tensor = 2, tensor.sequence_parallel = true;
      ScheduleCase context = sequence_case("gpt2_cp2");
      context.context = 2;
      ScheduleCase pipeline = sequence_case("gpt2_pp2_interleaved");
      pipeline.pipeline = 2, pipeline.virtual_stages = 2;
      pipeline.kind = ScheduleKind::Interleaved1F1B;
      // ZB-V: the head's chunk on pipeline rank 0.
      ScheduleCase v_shaped = sequence_case("gpt2_pp2_zbv");
      v_shaped.pipeline = 2, v_shaped.virtual_stages = 2;
      v_shaped.kind = ScheduleKind::ZeroBubbleV;
      cases = {data, tensor, context, pipeline, v_shaped};
    } else {
      ScheduleCase both = sequence_case("llama_cp2_tp2", "llama");
      both.context = 2, both.tensor = 2;
      cases = {both};
    }
    for (const ScheduleCase& c : cases)
      expect_same_scores(evaluate(c, checkpoints), reference, c.name);
  }
}

TEST_F(HellaSwagEvaluation, TrainLogsTheScoreOfItsFinalWeights) {
  const ScheduleCase single = sequence_case("single_gpt2_seq64");
  ASSERT_EQ(run(single).losses.size(), static_cast<size_t>(kSteps));
  const std::string checkpoints = *directory_ / "scored_checkpoints";
  std::filesystem::remove_all(checkpoints);
  CommandResult trained;
  const std::vector<double> losses = train_plan_file(
      *directory_ / (single.name + ".pplan"), "scored",
      "--hellaswag " + examples_file() + " --checkpoint-dir " + checkpoints, &trained);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  // Scoring changes nothing of training.
  EXPECT_EQ(losses, run(single).losses);
  const std::vector<nlohmann::json> lines = read_json_lines(*directory_ / "scored.jsonl");
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  EXPECT_FALSE(lines[0].contains("hellaswag_accuracy"));  // eval_interval is past the run
  ASSERT_TRUE(lines.back().contains("hellaswag_accuracy")) << lines.back().dump();
  const nlohmann::json report = evaluate(single, checkpoints);
  EXPECT_EQ(lines.back()["hellaswag_right"], report["hellaswag"]["right"]);
  EXPECT_EQ(lines.back()["hellaswag_examples"], 11);
  EXPECT_DOUBLE_EQ(lines.back()["hellaswag_accuracy"].get<double>(),
                   report["hellaswag"]["accuracy"].get<double>());
  EXPECT_NE(trained.output.find("  hellaswag: " + report["hellaswag"]["right"].dump() + "/11 = "),
            std::string::npos)
      << trained.output;
}

TEST_F(HellaSwagEvaluation, RefusesBadInputClearly) {
  const ScheduleCase single = sequence_case("single_gpt2_seq64");
  ASSERT_EQ(run(single).losses.size(), static_cast<size_t>(kSteps));
  const std::string plan = *directory_ / (single.name + ".pplan");
  const std::string evaluate =
      "evaluate --plan " + plan + " --checkpoint " + *directory_ / (single.name + "_checkpoints");
  expect_clear_error(paraplan::testing::run(evaluate), {"nothing to evaluate: give --val-data"});
  expect_clear_error(
      paraplan::testing::run(evaluate + " --hellaswag " + *directory_ / "data/val.bin"),
      {"val.bin: header[0] (magic) is 20240520, not 20240522",
       "this is a token shard, for --data or --val-data"});
  write_file(*directory_ / "wide.jsonl", R"({"ctx": "a", "endings": ["b", "c"], "label": 0})"
                                         "\n");
  expect_clear_error(
      paraplan::testing::run(evaluate + " --hellaswag " + *directory_ / "wide.jsonl" +
                             " --tokenizer " + *directory_ / "missing.json"),
      {"missing.json"});
  write_file(*directory_ / "long.jsonl", R"({"ctx": "a", "endings": ["b", ")" +
                                             std::string(70, 'c') + R"("], "label": 0})" + "\n");
  expect_clear_error(
      paraplan::testing::run(evaluate + " --hellaswag " + *directory_ / "long.jsonl"),
      {"--hellaswag " + *directory_ / "long.jsonl",
       "example 0: a completion of 71 tokens does not fit the model's seq_len 64"});
  // llm.c's eval file (dev/data/data_common.py) of one example with a token
  // past the byte-level vocabulary: label 1, context {46, 32}, endings {11}
  // and {300}.
  const std::string wide = *directory_ / "wide_vocabulary.bin";
  const std::vector<uint16_t> example = {65535, 24, 0, 1, 2, 2, 46, 32, 1, 11, 1, 300};
  const int32_t header[256] = {20240522, 1, 1, 24};
  write_file(wide, std::string(reinterpret_cast<const char*>(header), sizeof(header)) +
                       std::string(reinterpret_cast<const char*>(example.data()), 24));
  expect_clear_error(
      paraplan::testing::run(evaluate + " --hellaswag " + wide),
      {"--hellaswag " + wide +
       ": example 0: completion 1 token 300 is not below the model's vocab_size 256"});
  expect_clear_error(paraplan::testing::run(evaluate + " --val-data " +
                                            *directory_ / "data/val.bin" + " --eval-batches -1"),
                     {"--eval-batches: -1 is invalid"});
  // What evaluate would otherwise ignore.
  expect_clear_error(
      paraplan::testing::run(evaluate + " --hellaswag " + wide + " --eval-batches 3"),
      {"--eval-batches: there is no validation data to read"});
  expect_clear_error(
      paraplan::testing::run(evaluate + " --hellaswag " + wide + " --tokenizer " +
                             *directory_ / "tokenizer.json"),
      {"--tokenizer encodes a --hellaswag .jsonl; " + wide + " holds tokens already"});
  write_file(*directory_ / "text.txt", R"({"ctx": "a", "endings": ["b", "c"], "label": 0})");
  expect_clear_error(paraplan::testing::run(evaluate + " --hellaswag " + *directory_ / "text.txt"),
                     {"text.txt: 47 bytes, shorter than llm.c's eval file header",
                      "this looks like HellaSwag's text: name it *.jsonl"});
}

}  // namespace
}  // namespace paraplan::testing
