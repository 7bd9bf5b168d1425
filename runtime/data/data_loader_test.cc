// data_loader_test.cc: exact samples by global index, epoch wrap-around, and errors.
#include "runtime/data/data_loader.h"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <vector>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;

// A token file whose token at position i is 100 + i.
TokenFile counting_file(const TempDir& dir, int num_tokens) {
  std::vector<uint16_t> tokens(num_tokens);
  std::iota(tokens.begin(), tokens.end(), uint16_t{100});
  write_token_file(dir / "train.bin", tokens);
  return TokenFile(dir / "train.bin");
}

// A sample index near int64's end (a hostile train_state.json's
// next_train_sample) wraps exactly, never overflowing into a negative offset.
TEST(DataLoaderTest, IndicesNearTheEndOfInt64WrapWithoutOverflow) {
  TempDir dir;
  const TokenFile file = counting_file(dir, 14);  // 3 samples per epoch of 4 tokens
  const DataLoader loader(file, 4);
  const int64_t last = std::numeric_limits<int64_t>::max();  // 2^63 - 1 = 1 (mod 3)
  std::vector<int32_t> inputs(12), targets(12);
  loader.load(last - 1, 3, inputs.data(), targets.data());  // samples 0, 1, 2 of an epoch
  EXPECT_EQ(inputs,
            (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111}));
  loader.load(last, 3, inputs.data(), targets.data());  // samples 1, 2, then 0 again
  EXPECT_EQ(inputs,
            (std::vector<int32_t>{104, 105, 106, 107, 108, 109, 110, 111, 100, 101, 102, 103}));
  EXPECT_EQ(targets[11], 104);
}

TEST(DataLoaderTest, SamplesAreConsecutiveWindowsWithShiftedTargets) {
  TempDir dir;
  const TokenFile file = counting_file(dir, 14);  // (14 - 1) / 4 = 3 samples per epoch
  const DataLoader loader(file, 4);
  EXPECT_EQ(loader.samples_per_epoch(), 3);
  std::vector<int32_t> inputs(8), targets(8);
  loader.load(0, 2, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(targets, (std::vector<int32_t>{101, 102, 103, 104, 105, 106, 107, 108}));
  loader.load(2, 1, inputs.data(), targets.data());
  EXPECT_EQ(std::vector<int32_t>(inputs.begin(), inputs.begin() + 4),
            (std::vector<int32_t>{108, 109, 110, 111}));
  // The last sample's final target is token 12; token 13 is never a target.
  EXPECT_EQ(std::vector<int32_t>(targets.begin(), targets.begin() + 4),
            (std::vector<int32_t>{109, 110, 111, 112}));
}

TEST(DataLoaderTest, WrapsAroundAtTheEpochEnd) {
  TempDir dir;
  const TokenFile file = counting_file(dir, 13);  // 3 samples of 4
  const DataLoader loader(file, 4);
  std::vector<int32_t> inputs(12), targets(12);
  loader.load(2, 3, inputs.data(), targets.data());  // samples 2, 3 (= 0), 4 (= 1)
  EXPECT_EQ(inputs,
            (std::vector<int32_t>{108, 109, 110, 111, 100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(targets[3], 112);
  EXPECT_EQ(targets[4], 101);
  // Far in the future: sample 3000000002 is sample 3000000002 mod 3 = 2.
  loader.load(3000000002LL, 1, inputs.data(), targets.data());
  EXPECT_EQ(inputs[0], 108);
  EXPECT_EQ(targets[3], 112);
}

TEST(DataLoaderTest, SplittingALoadGivesTheSameSamples) {
  // What DP ranks rely on: loading [0, 6) at once equals [0, 2) + [2, 6).
  TempDir dir;
  const TokenFile file = counting_file(dir, 50);
  const DataLoader loader(file, 3);
  std::vector<int32_t> whole_in(18), whole_tg(18), parts_in(18), parts_tg(18);
  loader.load(5, 6, whole_in.data(), whole_tg.data());
  loader.load(5, 2, parts_in.data(), parts_tg.data());
  loader.load(7, 4, parts_in.data() + 6, parts_tg.data() + 6);
  EXPECT_EQ(whole_in, parts_in);
  EXPECT_EQ(whole_tg, parts_tg);
  EXPECT_EQ(whole_in[0], 115);
}

TEST(DataLoaderTest, ExactlyOneSampleNeedsSeqLenPlusOneTokens) {
  TempDir dir;
  const TokenFile file = counting_file(dir, 129);
  const DataLoader loader(file, 128);
  EXPECT_EQ(loader.samples_per_epoch(), 1);
  std::vector<int32_t> inputs(128), targets(128);
  loader.load(7, 1, inputs.data(), targets.data());
  EXPECT_EQ(inputs[0], 100);
  EXPECT_EQ(targets[127], 228);
}

TEST(DataLoaderTest, TooFewTokensIsRefused) {
  TempDir dir;
  const TokenFile file = counting_file(dir, 100);
  EXPECT_EQ(error_of([&] { DataLoader loader(file, 128); }),
            dir / "train.bin" +
                " holds 100 tokens; seq_len 128 needs at least 129 (a sample's targets reach "
                "one token past its inputs)");
  const TokenFile exact = counting_file(dir, 128);
  EXPECT_TRUE(contains(error_of([&] { DataLoader loader(exact, 128); }),
                       "holds 128 tokens; seq_len 128 needs at least 129"));
}

TEST(DataLoaderTest, EmptyFileAndBadArgumentsAreRefused) {
  TempDir dir;
  write_token_file(dir / "empty.bin", {});
  const TokenFile empty(dir / "empty.bin");
  EXPECT_TRUE(contains(error_of([&] { DataLoader loader(empty, 4); }),
                       "empty.bin holds 0 tokens; seq_len 4 needs at least 5"));
  const TokenFile file = counting_file(dir, 10);
  EXPECT_TRUE(
      contains(error_of([&] { DataLoader loader(file, 0); }), "seq_len 0 must be positive"));
  const DataLoader loader(file, 2);
  int32_t in[2], tg[2];
  EXPECT_TRUE(contains(error_of([&] { loader.load(-1, 1, in, tg); }),
                       "cannot load 1 samples from index -1"));
}

}  // namespace
}  // namespace paraplan
