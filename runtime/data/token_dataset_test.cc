// token_dataset_test.cc: data arguments (paths, globs, lists) to files, and
// a dataset of shards: samples within shards, headers checked at open,
// formats not mixed, bad tokens named where they are.
#include "runtime/data/token_dataset.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "runtime/data/data_paths.h"
#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;

// A shard of `count` tokens first, first + 1, ...
void write_counting(const std::string& path, int count, uint16_t first) {
  std::vector<uint16_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  write_token_file(path, tokens);
}

TEST(DataPathsTest, GlobsSortListsKeepTheirOrder) {
  TempDir dir;
  for (const char* name : {"s_000002.bin", "s_000010.bin", "s_000001.bin", "other.bin"})
    write_counting(dir / name, 5, 0);
  EXPECT_EQ(
      expand_data_paths(dir / "s_*.bin", "--data"),
      (std::vector<std::string>{dir / "s_000001.bin", dir / "s_000002.bin", dir / "s_000010.bin"}));
  EXPECT_EQ(
      expand_data_paths(dir / "other.bin," + dir / "s_00000[12].bin", "--data"),
      (std::vector<std::string>{dir / "other.bin", dir / "s_000001.bin", dir / "s_000002.bin"}));
  // A plain path is passed on unchecked: opening it names what is wrong.
  EXPECT_EQ(expand_data_paths(dir / "missing.bin", "--data"),
            std::vector<std::string>{dir / "missing.bin"});
}

TEST(DataPathsTest, NoMatchEmptyEntriesAndRepeatsAreRefused) {
  TempDir dir;
  write_counting(dir / "a.bin", 5, 0);
  EXPECT_EQ(error_of([&] { expand_data_paths(dir / "fineweb_*.bin", "--data"); }),
            "--data '" + dir / "fineweb_*.bin" +
                "': the glob matches no file (is the path right, relative to the directory the "
                "job runs in?)");
  EXPECT_TRUE(contains(error_of([&] { expand_data_paths(dir / "a.bin,", "--val-data"); }),
                       "--val-data '" + dir / "a.bin,': an empty entry in the list"));
  EXPECT_TRUE(contains(error_of([&] { expand_data_paths("", "[data] train"); }),
                       "[data] train: no file named"));
  EXPECT_TRUE(
      contains(error_of([&] { expand_data_paths(dir / "a.bin," + dir / "*.bin", "--data"); }),
               dir / "a.bin is named twice"));
}

TEST(TokenDatasetTest, SamplesStayInsideTheirShards) {
  TempDir dir;
  write_counting(dir / "s_1.bin", 10, 100);  // (10 - 1) / 4 = 2 samples
  write_counting(dir / "s_2.bin", 4, 200);   // 0 samples: too short
  write_counting(dir / "s_3.bin", 13, 300);  // 3 samples
  const TokenDataset dataset(dir / "s_*.bin", 4, "--data");
  EXPECT_EQ(dataset.num_shards(), 3u);
  EXPECT_EQ(dataset.num_samples(), 5);
  EXPECT_EQ(dataset.num_tokens(), 27);
  std::vector<int32_t> inputs(4), targets(4);
  const std::vector<std::vector<int32_t>> expected_inputs = {{100, 101, 102, 103},
                                                             {104, 105, 106, 107},
                                                             {300, 301, 302, 303},
                                                             {304, 305, 306, 307},
                                                             {308, 309, 310, 311}};
  for (int64_t i = 0; i < 5; ++i) {
    dataset.read_sample(i, 65536, inputs.data(), targets.data());
    EXPECT_EQ(inputs, expected_inputs[static_cast<size_t>(i)]) << "sample " << i;
    EXPECT_EQ(targets[3], expected_inputs[static_cast<size_t>(i)][3] + 1);
  }
}

TEST(TokenDatasetTest, EveryShardHeaderIsCheckedWhenOpened) {
  TempDir dir;
  write_counting(dir / "s_1.bin", 10, 0);
  write_counting(dir / "s_2.bin", 10, 0);
  testing::write_bytes(dir / "s_3.bin", "not a token file at all, but long enough? no.");
  EXPECT_TRUE(contains(error_of([&] { TokenDataset dataset(dir / "s_*.bin", 4, "--data"); }),
                       dir / "s_3.bin: file is"));
  EXPECT_TRUE(contains(
      error_of([&] { TokenDataset dataset(dir / "s_1.bin," + dir / "nope.bin", 4, "--data"); }),
      dir / "nope.bin"));
}

TEST(TokenDatasetTest, MixedFormatsAreRefusedNamingBothFiles) {
  TempDir dir;
  write_counting(dir / "s_1.bin", 10, 0);
  write_token_file(dir / "s_2.bin", std::vector<uint32_t>(10, 7), TokenFormat::kUint32);
  EXPECT_EQ(error_of([&] { TokenDataset dataset(dir / "s_*.bin", 4, "--data"); }),
            "--data " +
                dir / "s_*.bin: " + dir / "s_1.bin holds uint16 tokens (the GPT-2 format) but " +
                dir /
                    "s_2.bin holds uint32 tokens (the Llama 3 format); one run's shards must "
                    "come from one tokenizer and format");
}

TEST(TokenDatasetTest, ShardsTooShortForASampleAreRefused) {
  TempDir dir;
  write_counting(dir / "s_1.bin", 4, 0);
  write_counting(dir / "s_2.bin", 3, 0);
  EXPECT_TRUE(contains(error_of([&] { TokenDataset dataset(dir / "s_*.bin", 4, "--data"); }),
                       "none of its 2 shards holds seq_len + 1 = 5 tokens"));
}

TEST(TokenDatasetTest, ATokenOutsideTheVocabularyIsNamedWithItsShardAndPosition) {
  TempDir dir;
  write_counting(dir / "s_1.bin", 9, 0);
  write_counting(dir / "s_2.bin", 9, 250);  // tokens 250..258
  const TokenDataset dataset(dir / "s_*.bin", 4, "--data");
  std::vector<int32_t> inputs(4), targets(4);
  dataset.read_sample(0, 256, inputs.data(), targets.data());
  // Sample 2 is s_2's positions 0..4 (tokens 250..254), sample 3 its
  // positions 4..8 (tokens 254..258): 256 is at position 6.
  dataset.read_sample(2, 256, inputs.data(), targets.data());
  EXPECT_EQ(error_of([&] { dataset.read_sample(3, 256, inputs.data(), targets.data()); }),
            dir /
                "s_2.bin: token 256 at position 6 is >= vocab_size 256; tokenize with a "
                "matching tokenizer or raise the model's vocab_size");
}

}  // namespace
}  // namespace paraplan
