// data_order_record_test.cc: the data order train_state.json records
// (data_order_record.h): it survives the JSON round trip and stays small for
// ten thousand shards, each change is named, and a hostile record is refused
// by field.
#include "runtime/checkpoint/data_order_record.h"

#include <gtest/gtest.h>

#include "runtime/checkpoint/checkpoint.h"

namespace paraplan {
namespace {

DataOrderRecord blend() {
  return {.datasets = {dataset_record({"/d/a_1.bin", "/d/a_2.bin"}, {1000, 900}, 0.7),
                       dataset_record({"/d/b_1.bin"}, {500}, 0.3)},
          .shuffle = true,
          .seed = 1337};
}

std::string train_state_with(const std::string& order) {
  return R"({"format_version": 1, "step": 4, "next_train_sample": 64, "seed": 5, "data_order": )" +
         order + "}";
}

TEST(DataOrderRecord, SurvivesTrainStateJsonAndStaysSmall) {
  const TrainState state =
      parse_train_state(train_state_with(data_order_to_json(blend()).dump()), "train_state.json");
  ASSERT_TRUE(state.data_order.has_value());
  EXPECT_EQ(*state.data_order, blend());
  EXPECT_EQ(blend().datasets[0].tokens, 1900);
  // Written before the order was recorded: none, and nothing refused.
  EXPECT_FALSE(parse_train_state(R"({"format_version": 1, "step": 4, "next_train_sample": 64,
                                     "seed": 5})",
                                 "old.json")
                   .data_order.has_value());
  // FineWeb's 10,000 shards: a few hundred bytes, far below train_state.json's 1 MiB.
  std::vector<std::string> shards;
  for (int i = 0; i < 10000; ++i)
    shards.push_back("/data/fineweb10B/fineweb_train_" + std::to_string(i) + ".bin");
  const DataOrderRecord many{
      .datasets = {dataset_record(shards, std::vector<int64_t>(10000, 1e8), 1.0)}};
  EXPECT_LT(data_order_to_json(many).dump(2).size(), 400u);
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
  now.datasets[0] = dataset_record({"/d/a_1.bin"}, {1000}, 0.7);
  now.datasets[1].weight = 0.5;
  EXPECT_EQ(data_order_changes(blend(), now),
            "dataset 0 files /d/a_1.bin and 1 more (2) -> /d/a_1.bin (1); weights 0.7, 0.3 -> "
            "0.7, 0.5");
  now = blend();
  now.datasets[0] = dataset_record({"/d/a_1.bin", "/d/a_3.bin"}, {1000, 900}, 0.7);
  EXPECT_EQ(data_order_changes(blend(), now),
            "dataset 0 files: 2 from /d/a_1.bin and 1 more, but other paths than before");
  now = blend();
  now.datasets[1] = dataset_record({"/d/b_1.bin"}, {700}, 0.3);  // the same file, rewritten
  EXPECT_EQ(data_order_changes(blend(), now), "dataset 1 tokens 500 -> 700 (the files changed)");
  now = blend();
  now.datasets.pop_back();
  EXPECT_EQ(data_order_changes(blend(), now), "2 dataset(s) -> 1");
  // The same shares are the same blend; in file order the seed orders nothing.
  now = blend();
  now.datasets[0].weight = 1.4;
  now.datasets[1].weight = 0.6;
  EXPECT_EQ(data_order_changes(blend(), now), "");
  DataOrderRecord file_order = blend();
  file_order.shuffle = false;
  now = file_order;
  now.seed = 7;
  EXPECT_EQ(data_order_changes(file_order, now), "");
}

TEST(DataOrderRecord, AHostileRecordIsRefusedByField) {
  const auto error = [](const std::string& order) {
    try {
      parse_train_state(train_state_with(order), "ts.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(R"({"shuffle": 1, "seed": 2, "datasets": []})"),
            "ts.json: data_order.shuffle: 1; must be true or false");
  EXPECT_EQ(error(R"({"shuffle": true, "seed": -2, "datasets": []})"),
            "ts.json: data_order.seed: -2; must be an integer >= 0");
  EXPECT_EQ(error(R"({"shuffle": true, "seed": 2, "datasets": []})"),
            "ts.json: data_order.datasets: an array; must be an array of 1 to 4096 datasets");
  EXPECT_EQ(error(R"({"shuffle": true, "seed": 2, "datasets": [{"weight": -1}]})"),
            "ts.json: data_order.datasets[0].weight: -1; must be a positive finite number");
  // Every field of a dataset is required: one read as a default could match
  // an order it is not.
  const std::string whole =
      R"("weight": 1, "files": 1, "first_file": "/d/a.bin", "files_digest": "0123456789abcdef")";
  const auto with_dataset = [&](const std::string& dataset) {
    return error(R"({"shuffle": true, "seed": 2, "datasets": [)" + dataset + "]}");
  };
  EXPECT_EQ(with_dataset(R"({"files": 1})"),
            "ts.json: data_order.datasets[0].weight: missing; must be a positive finite number");
  EXPECT_EQ(with_dataset("{" + whole + "}"),
            "ts.json: data_order.datasets[0].tokens: missing; must be an integer in "
            "0..9223372036854775807");
  EXPECT_EQ(with_dataset("{" + whole + R"(, "tokens": -5})"),
            "ts.json: data_order.datasets[0].tokens: -5; must be an integer in "
            "0..9223372036854775807");
  EXPECT_EQ(with_dataset(R"({"weight": 1, "files": 1, "tokens": 9, "files_digest": "00"})"),
            "ts.json: data_order.datasets[0].first_file: missing; must be the path of the "
            "dataset's first file");
  EXPECT_EQ(with_dataset(R"({"weight": 1, "files": 1, "tokens": 9, "first_file": "/a",
                             "files_digest": 7})"),
            "ts.json: data_order.datasets[0].files_digest: 7; must be 16 hex digits (FNV-1a 64 "
            "of the dataset's paths)");
  EXPECT_EQ(with_dataset("{" + whole + R"(, "tokens": 9})"), "no error");
}

}  // namespace
}  // namespace paraplan
