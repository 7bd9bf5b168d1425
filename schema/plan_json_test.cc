// plan_json_test.cc: the enum names used in JSON, tables and messages,
// plan_to_json (every section, absent predictions, each instruction's chunk)
// and plan_to_table (summary lines, one row per stage, ZeRO unit ops, invalid
// plans' extreme numbers).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "schema/plan_test_support.h"
#include "schema/text_test_support.h"

namespace paraplan {
namespace {

using schema::OpCode;
using schema::RecomputeMode;
using test_plans::build_plan;
using test_plans::contains;
using test_plans::make_plan_spec;
using test_plans::PlanSpec;

TEST(EnumNames, MatchTheJsonSpelling) {
  EXPECT_STREQ(recompute_mode_name(RecomputeMode::None), "none");
  EXPECT_STREQ(recompute_mode_name(RecomputeMode::Selective), "selective");
  EXPECT_STREQ(recompute_mode_name(RecomputeMode::Full), "full");
  EXPECT_STREQ(recompute_mode_name(RecomputeMode(9)), "unknown");
  const std::vector<std::string> ops = {
      "load_micro_batch", "forward",           "backward",           "send_activation",
      "recv_activation",  "send_gradient",     "recv_gradient",
      "unknown",  // 7, 8: retired in schema version 8
      "unknown",          "reduce_gradients",  "optimizer_step",     "backward_input",
      "backward_weight",  "gather_parameters", "release_parameters", "reduce_scatter_gradients"};
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(opcode_name(OpCode(i)), ops[i]);
  EXPECT_STREQ(opcode_name(OpCode(16)), "unknown");
  EXPECT_STREQ(architecture_name(schema::Architecture::Gpt2), "gpt2");
  EXPECT_STREQ(architecture_name(schema::Architecture::Llama), "llama");
  EXPECT_STREQ(dtype_name(schema::DType::Float32), "float32");
  EXPECT_STREQ(dtype_name(schema::DType::BFloat16), "bfloat16");
  EXPECT_STREQ(lr_decay_style_name(schema::LrDecayStyle::Cosine), "cosine");
  EXPECT_STREQ(lr_decay_style_name(schema::LrDecayStyle::Linear), "linear");
  EXPECT_STREQ(lr_decay_style_name(schema::LrDecayStyle::Constant), "constant");
  EXPECT_STREQ(schedule_kind_name(schema::ScheduleKind::OneForwardOneBackward), "1f1b");
  EXPECT_STREQ(schedule_kind_name(schema::ScheduleKind::GPipe), "gpipe");
}

TEST(PlanToJson, HasEverySectionWithNamesAndNumbers) {
  PlanSpec spec = make_plan_spec(2, 2, 2, 8, 4);
  spec.dtype = schema::DType::BFloat16;
  spec.decay_style = schema::LrDecayStyle::Linear;
  spec.stages[1].recompute[3] = RecomputeMode::Full;
  spec.has_data = true;
  spec.data_train = {{"a_*.bin", 0.7}, {"b.bin", 0.3}};
  spec.data_shuffle = true;
  spec.data_seed = 99;
  const std::vector<uint8_t> bytes = build_plan(spec);
  const nlohmann::json j = plan_to_json(*schema::GetPlan(bytes.data()));
  EXPECT_EQ(j["training"]["data"]["train"][0]["paths"], "a_*.bin");
  EXPECT_EQ(j["training"]["data"]["train"][1]["weight"].get<double>(), 0.3);
  EXPECT_EQ(j["training"]["data"]["shuffle"], true);
  EXPECT_EQ(j["training"]["data"]["seed"], 99u);

  EXPECT_EQ(j["training"]["data"]["document_separator"], -1);
  EXPECT_EQ(j["header"]["schema_version"], 13);
  EXPECT_EQ(j["header"]["task_name"], "unit-test");
  EXPECT_EQ(j["header"]["planner_version"], "0.1.0-test");
  EXPECT_EQ(j["header"]["creation_options"]["planner.memory_constraint"], "40");
  EXPECT_EQ(j["model"]["architecture"], "gpt2");
  EXPECT_EQ(j["model"]["dtype"], "bfloat16");
  EXPECT_EQ(j["model"]["vocab_size"], 512);
  EXPECT_EQ(j["model"]["ffn_size"], 256);
  EXPECT_EQ(j["model"]["tied_embeddings"], true);
  EXPECT_EQ(j["model"]["layernorm_epsilon"].get<double>(), 1e-5);  // not 9.99999974e-06
  EXPECT_EQ(j["training"]["global_batch_size"], 16);
  EXPECT_EQ(j["training"]["seed"], 1234u);
  EXPECT_EQ(j["training"]["optimizer"]["learning_rate"].get<double>(), 0.0003);
  EXPECT_EQ(j["training"]["optimizer"]["beta2"].get<double>(), 0.95);
  EXPECT_EQ(j["training"]["optimizer"]["decay_style"], "linear");
  EXPECT_EQ(j["training"]["optimizer"]["total_steps"], 1000);
  EXPECT_EQ(j["training"]["optimizer"]["wsd_decay_steps"], 0);
  EXPECT_EQ(j["training"]["optimizer"]["wsd_decay_style"], "linear");
  EXPECT_EQ(j["mesh"], (nlohmann::json{{"pipeline_parallel", 2},
                                       {"data_parallel", 2},
                                       {"context_parallel", 1},
                                       {"tensor_parallel", 2},
                                       {"num_nodes", 2},
                                       {"devices_per_node", 4},
                                       {"sequence_parallel", false}}));
  ASSERT_EQ(j["stages"].size(), 2u);
  EXPECT_EQ(j["stages"][1]["first_layer"], 4);
  EXPECT_EQ(j["stages"][1]["has_head"], true);
  EXPECT_EQ(j["stages"][1]["recompute"], (nlohmann::json{"none", "none", "none", "full"}));
  EXPECT_EQ(j["zero"], (nlohmann::json{{"stage", 0}, {"num_groups", 1}, {"layers_per_unit", 1}}));
  EXPECT_EQ(j["schedule"]["kind"], "1f1b");
  EXPECT_EQ(j["schedule"]["virtual_stages"], 1);
  EXPECT_EQ(j["schedule"]["transfers"], "posted");
  ASSERT_EQ(j["schedule"]["stages"].size(), 2u);
  const nlohmann::json& stage0 = j["schedule"]["stages"][0]["instructions"];
  ASSERT_EQ(stage0.size(), spec.schedule[0].instructions.size());
  EXPECT_EQ(
      stage0[0],
      (nlohmann::json{
          {"op", "load_micro_batch"}, {"chunk", 0}, {"micro_batch", 0}, {"peer_micro_batch", -1}}));
  EXPECT_EQ(
      stage0[5],
      (nlohmann::json{
          {"op", "send_activation"}, {"chunk", 0}, {"micro_batch", 1}, {"peer_micro_batch", -1}}));
  EXPECT_EQ(stage0[6]["op"], "recv_gradient");
  EXPECT_EQ(stage0[6]["micro_batch"], 0);
  EXPECT_EQ(stage0.back()["op"], "optimizer_step");
  EXPECT_DOUBLE_EQ(j["predictions"]["step_seconds"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["predictions"]["mfu"].get<double>(), 0.42);
  EXPECT_DOUBLE_EQ(j["predictions"]["stages"][0]["forward_seconds"].get<double>(), 0.0045);
  EXPECT_EQ(j["predictions"]["stages"][0]["memory"]["weights"], 100'000'000u);
  EXPECT_EQ(j["predictions"]["stages"][0]["memory"]["total"], 1'064'000'000u);
  EXPECT_EQ(j["predictions"]["cluster"]["name"], "test-cluster");
  EXPECT_EQ(j["predictions"]["cluster"]["device_memory_bytes"], 80'000'000'000u);
}

TEST(PlanToJson, AbsentPredictionsAreNull) {
  PlanSpec spec = make_plan_spec(1, 1, 1, 4, 2, schema::ScheduleKind::GPipe);
  spec.has_predictions = false;
  const std::vector<uint8_t> bytes = build_plan(spec);
  const nlohmann::json j = plan_to_json(*schema::GetPlan(bytes.data()));
  EXPECT_TRUE(j["predictions"].is_null());
  EXPECT_EQ(j["schedule"]["kind"], "gpipe");
}

// An interleaved plan's streams can be rebuilt from its JSON: every
// instruction carries its chunk.
TEST(PlanToJson, InstructionsCarryTheirChunk) {
  const test_plans::PlanSpec spec =
      test_plans::make_chunked_plan_spec(2, 2, 8, 4, schema::ScheduleKind::Interleaved1F1B, false);
  const std::vector<uint8_t> bytes = test_plans::build_plan(spec);
  const nlohmann::json j = plan_to_json(*schema::GetPlan(bytes.data()));
  for (size_t r = 0; r < spec.schedule.size(); ++r) {
    const nlohmann::json& stream = j["schedule"]["stages"][r]["instructions"];
    ASSERT_EQ(stream.size(), spec.schedule[r].instructions.size());
    int chunk_one = 0;
    for (size_t i = 0; i < stream.size(); ++i) {
      EXPECT_EQ(stream[i]["chunk"], spec.schedule[r].instructions[i].chunk()) << r << " " << i;
      chunk_one += stream[i]["chunk"] == 1;
    }
    EXPECT_GT(chunk_one, 0) << "rank " << r;
  }
}

// The line of the stage table whose first cell is stage.
std::string stage_row(const std::string& table, int stage) {
  std::istringstream lines(table);
  const std::string start = std::to_string(stage) + " | ";
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, start.size(), start) == 0) return line;
  }
  return "";
}

// ZeRO-3's unit ops, counted per stage, 4 micro-batches in 1F1B: the first
// stage's forwards read its untied embedding and 4 blocks (5 units), its
// backwards the blocks (4) and finish all 5; the last stage's forwards and
// backwards read its 4 blocks and head (5). A unit one compute ends with and
// the next starts with stays gathered between them: 20 + 16 - 3 (F then B,
// three times) and 20 + 20 - 7 (F then B four times, B then F three).
TEST(PlanToTable, CountsEachStagesZeroUnitOps) {
  PlanSpec spec = make_plan_spec(2, 2, 1, 8, 4);
  spec.zero_stage = 3;
  spec.tied_embeddings = false;
  const std::vector<uint8_t> bytes = build_plan(spec);
  const std::string table = plan_to_table(*schema::GetPlan(bytes.data()));
  EXPECT_TRUE(contains(table,
                       "ZeRO unit ops per step: stage 0: 33 gathers, 33 releases (one unit ahead), "
                       "20 reduce-scatters, stage 1: 33 gathers, 33 releases (one unit ahead), "
                       "20 reduce-scatters\n"))
      << table;
}

TEST(PlanToTable, ShowsSummaryLinesAndOneRowPerStage) {
  PlanSpec spec = make_plan_spec(2, 2, 2, 8, 4);
  spec.stages[0].recompute = {RecomputeMode::Full, RecomputeMode::Full, RecomputeMode::None,
                              RecomputeMode::None};
  spec.zero_stage = 1;
  const std::vector<uint8_t> bytes = build_plan(spec);
  const std::string table = plan_to_table(*schema::GetPlan(bytes.data()));

  EXPECT_TRUE(contains(table, "plan 'unit-test' (schema v13, planner 0.1.0-test)"));
  EXPECT_TRUE(contains(table, "data: --data's files in file order (no [data] in the plan)"));
  EXPECT_TRUE(contains(table, "model: gpt2, vocab 512, seq 64, 8 layers, d_model 64, 4 heads"));
  EXPECT_TRUE(
      contains(table, "training: global batch 16 = micro-batch 2 x 4 micro-batches x dp 2"));
  EXPECT_TRUE(contains(table, "AdamW lr 0.0003 -> 0.00003 (cosine, warmup 10, 1000 steps)"));
  EXPECT_TRUE(contains(table, "mesh: pp 2 x dp 2 x tp 2 = 8 ranks on 2 nodes x 4 devices"));
  EXPECT_TRUE(contains(table, "zero: stage 1, 1 group (optimizer state sharded over 2"));
  EXPECT_TRUE(contains(table, "stage | layers | holds"));
  EXPECT_TRUE(contains(table, "| activations | transient |"));

  const std::string row0 = stage_row(table, 0), row1 = stage_row(table, 1);
  ASSERT_FALSE(row0.empty()) << table;
  ASSERT_FALSE(row1.empty()) << table;
  EXPECT_TRUE(contains(row0, "| 0-3 "));
  EXPECT_TRUE(contains(row0, "| embedding "));
  EXPECT_TRUE(contains(row0, "| full x2, none x2 |"));
  EXPECT_TRUE(contains(row0, " 4.50 | "));      // forward ms
  EXPECT_TRUE(contains(row0, " 9.00 | "));      // backward ms
  EXPECT_TRUE(contains(row0, " 95.4 MB | "));   // weights: 10^8 bytes, in MB of 2^20
  EXPECT_TRUE(contains(row0, " 572.2 MB | "));  // activations, 2 micro-batches in flight
  EXPECT_TRUE(contains(row0, " 1014.7 MB"));    // total
  EXPECT_TRUE(contains(row1, "| 4-7 "));
  EXPECT_TRUE(contains(row1, "| head "));
  EXPECT_TRUE(contains(row1, "| none x4 "));
  EXPECT_TRUE(contains(row1, " 728.6 MB"));

  EXPECT_TRUE(contains(table,
                       "predictions: step 0.500 s, 2048 tokens/s, MFU 42.0%, "
                       "bubble ratio 20.0%"));
  EXPECT_TRUE(contains(
      table, "cluster: 'test-cluster', 2 nodes x 4 devices, 74.51 GB each"));  // 8 x 10^10 bytes in
                                                                               // GB of 2^30
  EXPECT_TRUE(
      contains(table, "schedule: 1f1b; instructions per stage: stage 0: " +
                          std::to_string(spec.schedule[0].instructions.size()) +
                          ", stage 1: " + std::to_string(spec.schedule[1].instructions.size())));
}

TEST(PlanToTable, MarksMissingPredictions) {
  PlanSpec spec = make_plan_spec(1, 1, 1, 1, 2);
  spec.has_predictions = false;
  const std::vector<uint8_t> bytes = build_plan(spec);
  const std::string table = plan_to_table(*schema::GetPlan(bytes.data()));
  EXPECT_TRUE(contains(table, "predictions: none"));
  const std::string row = stage_row(table, 0);
  EXPECT_TRUE(contains(row, "| 0 "));                // a single layer
  EXPECT_TRUE(contains(row, "| embedding+head |"));  // one stage holds both
  EXPECT_TRUE(contains(row, " - | "));               // no predicted times
}

// Found by fuzz/plan_fuzzer: a plan that fails validation is still printed
// (while it is debugged); its layer range overflowed int32 and its rank count
// int64.
TEST(PlanToTable, PrintsAnInvalidPlansExtremeNumbers) {
  PlanSpec spec = make_plan_spec(1, 1, 1, 2, 2);
  spec.stages[0].first_layer = 2147483647;
  spec.pipeline_parallel = spec.data_parallel = spec.tensor_parallel = 2147483647;
  const std::vector<uint8_t> bytes = build_plan(spec);
  const std::string table = plan_to_table(*schema::GetPlan(bytes.data()));
  EXPECT_TRUE(contains(stage_row(table, 0), "| 2147483647-2147483648 |"));
  EXPECT_TRUE(contains(table,
                       "mesh: pp 2147483647 x dp 2147483647 x tp 2147483647 = more than "
                       "9223372036854775807 ranks"));
}

}  // namespace
}  // namespace paraplan
