// data_order_record_test.cc: the data order train_state.json records
// (data_order_record.h): it survives the JSON round trip, each change is
// named, and a hostile record is refused by field.
#include "runtime/checkpoint/data_order_record.h"

#include <gtest/gtest.h>

#include "runtime/checkpoint/checkpoint.h"

namespace paraplan {
namespace {

DataOrderRecord blend() {
  return {
      .datasets = {{.files = {"/d/a_1.bin", "/d/a_2.bin"}, .tokens = {1000, 900}, .weight = 0.7},
                   {.files = {"/d/b_1.bin"}, .tokens = {500}, .weight = 0.3}},
      .shuffle = true,
      .seed = 1337};
}

TEST(DataOrderRecord, SurvivesTrainStateJson) {
  const std::string text = R"({"format_version": 1, "step": 4, "next_train_sample": 64,
                               "seed": 5, "data_order": )" +
                           data_order_to_json(blend()).dump() + "}";
  const TrainState state = parse_train_state(text, "train_state.json");
  ASSERT_TRUE(state.data_order.has_value());
  EXPECT_EQ(*state.data_order, blend());
  // Written before the order was recorded: none, and nothing refused.
  EXPECT_FALSE(parse_train_state(R"({"format_version": 1, "step": 4, "next_train_sample": 64,
                                     "seed": 5})",
                                 "old.json")
                   .data_order.has_value());
}

TEST(DataOrderRecord, EachChangeIsNamed) {
  EXPECT_EQ(data_order_changes(blend(), blend()), "");
  DataOrderRecord now = blend();
  now.seed = 42;
  EXPECT_EQ(data_order_changes(blend(), now), "seed 1337 -> 42");
  now = blend();
  now.shuffle = false;
  EXPECT_EQ(data_order_changes(blend(), now), "shuffle true -> false");
  now = blend();
  now.datasets[1].weight = 0.5;
  now.datasets[0].files.pop_back();
  now.datasets[0].tokens.pop_back();
  EXPECT_EQ(data_order_changes(blend(), now),
            "dataset 0 files /d/a_1.bin and 1 more (2) -> /d/a_1.bin (1); dataset 1 weight 0.3 "
            "-> 0.5");
  now = blend();
  now.datasets[1].tokens[0] = 700;  // the same file, rewritten
  EXPECT_EQ(data_order_changes(blend(), now), "dataset 1 tokens 500 -> 700 (the files changed)");
  now = blend();
  now.datasets.pop_back();
  EXPECT_EQ(data_order_changes(blend(), now), "2 dataset(s) -> 1");
  // In file order the seed orders nothing.
  DataOrderRecord file_order = blend();
  file_order.shuffle = false;
  now = file_order;
  now.seed = 7;
  EXPECT_EQ(data_order_changes(file_order, now), "");
}

TEST(DataOrderRecord, AHostileRecordIsRefusedByField) {
  const auto error = [](const std::string& order) {
    try {
      parse_train_state(R"({"format_version": 1, "step": 1, "next_train_sample": 8, "seed": 5,
                            "data_order": )" +
                            order + "}",
                        "ts.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(R"({"shuffle": 1, "seed": 2, "datasets": []})"),
            "ts.json: data_order.shuffle must be true or false");
  EXPECT_EQ(error(R"({"shuffle": true, "seed": -2, "datasets": []})"),
            "ts.json: data_order.seed must be a non-negative integer");
  EXPECT_EQ(error(R"({"shuffle": true, "seed": 2, "datasets": [{"files": ["a"], "tokens": []}]})"),
            "ts.json: data_order: 1 files but 0 token counts");
  EXPECT_EQ(error(R"({"shuffle": true, "seed": 2, "datasets": [{"weight": -1, "files": [],
                     "tokens": []}]})"),
            "ts.json: a data_order weight must be positive and finite");
}

}  // namespace
}  // namespace paraplan
