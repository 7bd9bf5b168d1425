// data_loader_test.cc: exact samples by global index, epoch wrap-around, and errors.
#include "runtime/data/data_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;

constexpr int kVocab = 65536;

// A token file whose token at position i is 100 + i; returns its path.
std::string counting_file(const TempDir& dir, int num_tokens) {
  std::vector<uint16_t> tokens(num_tokens);
  std::iota(tokens.begin(), tokens.end(), uint16_t{100});
  write_token_file(dir / "train.bin", tokens);
  return dir / "train.bin";
}

// A sample index near int64's end (a hostile train_state.json's
// next_train_sample) wraps exactly, never overflowing into a negative offset.
TEST(DataLoaderTest, IndicesNearTheEndOfInt64WrapWithoutOverflow) {
  TempDir dir;
  const std::string file = counting_file(dir, 14);  // 3 samples per epoch of 4 tokens
  const DataLoader loader(file, 4, kVocab, "--data");
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
  const std::string file = counting_file(dir, 14);  // (14 - 1) / 4 = 3 samples per epoch
  const DataLoader loader(file, 4, kVocab, "--data");
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
  const std::string file = counting_file(dir, 13);  // 3 samples of 4
  const DataLoader loader(file, 4, kVocab, "--data");
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
  const std::string file = counting_file(dir, 50);
  const DataLoader loader(file, 3, kVocab, "--data");
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
  const std::string file = counting_file(dir, 129);
  const DataLoader loader(file, 128, kVocab, "--data");
  EXPECT_EQ(loader.samples_per_epoch(), 1);
  std::vector<int32_t> inputs(128), targets(128);
  loader.load(7, 1, inputs.data(), targets.data());
  EXPECT_EQ(inputs[0], 100);
  EXPECT_EQ(targets[127], 228);
}

TEST(DataLoaderTest, TooFewTokensIsRefused) {
  TempDir dir;
  const std::string file = counting_file(dir, 100);
  EXPECT_EQ(error_of([&] { DataLoader loader(file, 128, kVocab, "--data"); }),
            dir / "train.bin" +
                " holds 100 tokens; seq_len 128 needs at least 129 (a sample's targets reach "
                "one token past its inputs)");
  const std::string exact = counting_file(dir, 128);
  EXPECT_TRUE(contains(error_of([&] { DataLoader loader(exact, 128, kVocab, "--data"); }),
                       "holds 128 tokens; seq_len 128 needs at least 129"));
}

TEST(DataLoaderTest, EmptyFileAndBadArgumentsAreRefused) {
  TempDir dir;
  write_token_file(dir / "empty.bin", std::vector<uint16_t>{});
  const std::string empty = dir / "empty.bin";
  EXPECT_TRUE(contains(error_of([&] { DataLoader loader(empty, 4, kVocab, "--data"); }),
                       "empty.bin holds 0 tokens; seq_len 4 needs at least 5"));
  const std::string file = counting_file(dir, 10);
  EXPECT_TRUE(contains(error_of([&] { DataLoader loader(file, 0, kVocab, "--data"); }),
                       "seq_len 0 must be positive"));
  const DataLoader loader(file, 2, kVocab, "--data");
  int32_t in[2], tg[2];
  EXPECT_TRUE(contains(error_of([&] { loader.load(-1, 1, in, tg); }),
                       "cannot load 1 samples from index -1"));
}

// The first input token of each of `count` samples from index `first`.
std::vector<int32_t> first_tokens(const DataLoader& loader, int64_t first, int count) {
  const size_t t = static_cast<size_t>(loader.seq_len());
  std::vector<int32_t> inputs(t * static_cast<size_t>(count)), targets(inputs.size()), firsts;
  loader.load(first, count, inputs.data(), targets.data());
  for (int i = 0; i < count; ++i) firsts.push_back(inputs[static_cast<size_t>(i) * t]);
  return firsts;
}

TEST(DataLoaderTest, ShuffledEpochsArePermutationsThatDifferAndRepeat) {
  TempDir dir;
  const std::string file = counting_file(dir, 53);  // 13 samples of 4
  const DataLoader loader({{file, 1.0}}, 4, kVocab, DataOrder{.shuffle = true, .seed = 7},
                          "--data");
  std::vector<int32_t> all(13);
  for (int i = 0; i < 13; ++i) all[static_cast<size_t>(i)] = 100 + 4 * i;
  std::vector<int32_t> epoch0 = first_tokens(loader, 0, 13), epoch1 = first_tokens(loader, 13, 13);
  EXPECT_NE(epoch0, std::vector<int32_t>(all.begin(), all.end()));  // not file order
  EXPECT_NE(epoch0, epoch1);                                        // a new order each epoch
  std::sort(epoch0.begin(), epoch0.end());
  std::sort(epoch1.begin(), epoch1.end());
  EXPECT_EQ(epoch0, all);  // each epoch reads every sample once
  EXPECT_EQ(epoch1, all);
  // The same seed gives the same order; another seed another; a split load
  // (data-parallel ranks) the same samples as a whole one.
  const DataLoader again({{file, 1.0}}, 4, kVocab, DataOrder{.shuffle = true, .seed = 7}, "--data");
  const DataLoader other({{file, 1.0}}, 4, kVocab, DataOrder{.shuffle = true, .seed = 8}, "--data");
  EXPECT_EQ(first_tokens(again, 5, 20), first_tokens(loader, 5, 20));
  EXPECT_NE(first_tokens(other, 0, 13), first_tokens(loader, 0, 13));
  std::vector<int32_t> parts = first_tokens(loader, 5, 7), rest = first_tokens(loader, 12, 13);
  parts.insert(parts.end(), rest.begin(), rest.end());
  EXPECT_EQ(parts, first_tokens(loader, 5, 20));
  // Inputs and targets stay one window: targets are the inputs shifted by one.
  std::vector<int32_t> inputs(4), targets(4);
  loader.load(3, 1, inputs.data(), targets.data());
  EXPECT_EQ(targets,
            (std::vector<int32_t>{inputs[0] + 1, inputs[0] + 2, inputs[0] + 3, inputs[0] + 4}));
  // Near int64's end the epochs still count on.
  const int64_t last = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(first_tokens(loader, last - 1, 2).size(), 2u);
}

TEST(DataLoaderTest, ABlendDrawsEachDatasetByItsWeight) {
  TempDir dir;
  std::vector<uint16_t> a(41), b(21);  // 10 and 5 samples of 4
  std::iota(a.begin(), a.end(), uint16_t{1000});
  std::iota(b.begin(), b.end(), uint16_t{2000});
  write_token_file(dir / "a_1.bin", a);
  write_token_file(dir / "b_1.bin", b);
  for (const bool shuffle : {false, true}) {
    const DataLoader loader({{dir / "a_*.bin", 0.75}, {dir / "b_1.bin", 0.25}}, 4, kVocab,
                            DataOrder{.shuffle = shuffle, .seed = 3}, "[data] train");
    EXPECT_EQ(loader.blend().places(0), 3072);
    const std::vector<int32_t> firsts = first_tokens(loader, 0, 4096);
    std::vector<int> from_a(10, 0), from_b(5, 0);
    for (const int32_t token : firsts)
      ++(token < 2000 ? from_a[static_cast<size_t>((token - 1000) / 4)]
                      : from_b[static_cast<size_t>((token - 2000) / 4)]);
    // 3072 draws of a's 10 samples and 1024 of b's 5: whole epochs of each
    // (a's 307th epoch is 2 samples short), every sample as often as the others.
    for (int count : from_a) EXPECT_NEAR(count, 307.2, 1);
    for (int count : from_b) EXPECT_NEAR(count, 204.8, 1);
    // Any 100 consecutive indices take 75 +- 2 from a.
    const std::vector<int32_t> window = first_tokens(loader, 123457, 100);
    EXPECT_NEAR(std::count_if(window.begin(), window.end(), [](int32_t t) { return t < 2000; }), 75,
                2);
  }
  write_token_file(dir / "c.bin", std::vector<uint32_t>(41, 5), TokenFormat::kUint32);
  EXPECT_TRUE(contains(error_of([&] {
                         DataLoader loader({{dir / "a_1.bin", 1}, {dir / "c.bin", 1}}, 4, kVocab,
                                           DataOrder{}, "[data] train");
                       }),
                       "hold tokens of different widths"));
  EXPECT_TRUE(contains(error_of([&] {
                         DataLoader loader({{dir / "a_1.bin", 1}, {dir / "b_1.bin", 0}}, 4, kVocab,
                                           DataOrder{}, "[data] train");
                       }),
                       "[data] train '" + dir / "b_1.bin': weight 0.000000 must be a positive"));
}

}  // namespace
}  // namespace paraplan
