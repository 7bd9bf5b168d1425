// tokenizer_test.cc: byte-level tokenization, the train/val split at a line
// boundary, directory expansion, and the error messages.
#include "runtime/data/tokenizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/data/token_file.h"
#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

std::string text_of(const std::string& token_path) {
  TokenFile file(token_path);
  std::vector<int32_t> tokens(file.num_tokens());
  file.read(0, file.num_tokens(), tokens.data());
  return detokenize(tokens.data(), static_cast<int64_t>(tokens.size()));
}

TEST(TokenizerTest, TokensAreByteValues) {
  TempDir dir;
  write_bytes(dir / "c.txt", std::string("Az\n\xff\x00", 5));
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out", 0.0);
  EXPECT_EQ(result.train_tokens, 5);
  EXPECT_EQ(result.val_tokens, 0);
  EXPECT_EQ(result.train_path, dir / "out/train.bin");
  EXPECT_EQ(result.val_path, dir / "out/val.bin");
  TokenFile train(result.train_path);
  ASSERT_EQ(train.num_tokens(), 5);
  EXPECT_EQ(train[0], 65);
  EXPECT_EQ(train[1], 122);
  EXPECT_EQ(train[2], 10);
  EXPECT_EQ(train[3], 255);
  EXPECT_EQ(train[4], 0);
  EXPECT_EQ(TokenFile(result.val_path).num_tokens(), 0);
  // Five different bytes, once each: log 5 nats.
  EXPECT_NEAR(result.train_unigram_entropy, std::log(5.0), 1e-12);
}

TEST(TokenizerTest, UnigramEntropyCountsTheTrainingBytesOnly) {
  TempDir dir;
  // val.bin is the last 90%, its start moved to just after the first
  // newline: train.bin is "aaab\n".
  write_bytes(dir / "c.txt", "aaab\nzzzzzzzzzzzzzzzzzzzzzzzzzzzz\n");
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out", 0.9);
  ASSERT_EQ(result.train_tokens, 5);
  // p = 3/5, 1/5, 1/5.
  EXPECT_NEAR(result.train_unigram_entropy, -(0.6 * std::log(0.6) + 2 * 0.2 * std::log(0.2)),
              1e-12);
}

TEST(TokenizerTest, ValSplitMovesToTheNextLine) {
  TempDir dir;
  // 40 bytes; the last 10% is 4 bytes, starting at 36 mid-line ("line4 is..."),
  // moved to just after the '\n' at index 37.
  const std::string corpus = "line1 aaaa\nline2 bbbb\nline3 cccc\nline\nxy";
  ASSERT_EQ(corpus.size(), 40u);
  write_bytes(dir / "c.txt", corpus);
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out");
  EXPECT_EQ(result.train_tokens, 38);
  EXPECT_EQ(result.val_tokens, 2);
  EXPECT_EQ(text_of(result.train_path), corpus.substr(0, 38));
  EXPECT_EQ(text_of(result.val_path), "xy");
}

TEST(TokenizerTest, ValSplitAlreadyOnALineStaysPut) {
  TempDir dir;
  const std::string corpus = "123456789\nabcdefghi\n";  // 20 bytes; half = 10 bytes at index 10
  write_bytes(dir / "c.txt", corpus);
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out", 0.5);
  EXPECT_EQ(text_of(result.train_path), "123456789\n");
  EXPECT_EQ(text_of(result.val_path), "abcdefghi\n");
}

TEST(TokenizerTest, ValSplitWithoutALaterLineKeepsTheByteSplit) {
  TempDir dir;
  write_bytes(dir / "c.txt", "abcdefghij");  // no newline at all: split at byte 9
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out");
  EXPECT_EQ(text_of(result.train_path), "abcdefghi");
  EXPECT_EQ(text_of(result.val_path), "j");
}

TEST(TokenizerTest, DirectoriesAreReadInSortedOrderSkippingBinaryAndHidden) {
  TempDir dir;
  std::filesystem::create_directories(dir / "corpus/sub");
  write_bytes(dir / "corpus/b.txt", "B");
  write_bytes(dir / "corpus/a.txt", "A");
  write_bytes(dir / "corpus/c", "C");
  write_bytes(dir / "corpus/.hidden", "H");
  write_bytes(dir / "corpus/x.dat", "D");
  write_bytes(dir / "corpus/y.u8", "U");
  write_bytes(dir / "corpus/sub/z.txt", "Z");  // not recursive
  write_bytes(dir / "extra.txt", "E");
  const TokenizeResult result =
      tokenize_files({dir / "corpus", dir / "extra.txt"}, dir / "out", 0.0);
  EXPECT_EQ(text_of(result.train_path), "ABCE");
  ASSERT_EQ(result.files_read.size(), 4u);
  EXPECT_EQ(result.files_read[0], dir / "corpus/a.txt");
  EXPECT_EQ(result.files_read[3], dir / "extra.txt");
}

TEST(TokenizerTest, ReplacesExistingOutputs) {
  TempDir dir;
  write_bytes(dir / "c.txt", "first corpus\n");
  tokenize_files({dir / "c.txt"}, dir / "out", 0.0);
  write_bytes(dir / "c.txt", "second\n");
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out", 0.0);
  EXPECT_EQ(text_of(result.train_path), "second\n");
}

TEST(TokenizerTest, MissingInputIsNamed) {
  TempDir dir;
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "nope.txt"}, dir / "out"); }),
                       dir / "nope.txt" + ": input does not exist"));
}

TEST(TokenizerTest, EmptyCorpusIsRefused) {
  TempDir dir;
  write_bytes(dir / "empty.txt", "");
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "empty.txt"}, dir / "out"); }),
                       "empty.txt) is empty"));
  std::filesystem::create_directories(dir / "only_hidden");
  write_bytes(dir / "only_hidden/.x", "hidden");
  EXPECT_TRUE(
      contains(error_of([&] { tokenize_files({dir / "only_hidden"}, dir / "out"); }), "is empty"));
}

TEST(TokenizerTest, CorpusTooSmallToSplitIsRefused) {
  TempDir dir;
  write_bytes(dir / "one.txt", "x");
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "one.txt"}, dir / "out"); }),
                       "holds 1 bytes, too small to split"));
  // Without a validation split one byte is enough.
  EXPECT_EQ(tokenize_files({dir / "one.txt"}, dir / "out", 0.0).train_tokens, 1);
}

TEST(TokenizerTest, BadValFractionIsRefused) {
  TempDir dir;
  write_bytes(dir / "c.txt", "hello\n");
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "c.txt"}, dir / "out", 1.5); }),
                       "val_fraction 1.500000 is outside [0, 1)"));
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "c.txt"}, dir / "out", -0.1); }),
                       "is outside [0, 1)"));
}

TEST(TokenizerTest, UncreatableOutputDirIsNamed) {
  TempDir dir;
  write_bytes(dir / "c.txt", "hello\nworld\n");
  write_bytes(dir / "blocker", "a file where the directory should go");
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "c.txt"}, dir / "blocker/out"); }),
                       dir / "blocker/out" + ": cannot create output directory"));
}

TEST(TokenizerTest, DetokenizeIsTheInverse) {
  const int32_t tokens[] = {72, 105, 10, 0, 255};
  EXPECT_EQ(detokenize(tokens, 5), std::string("Hi\n\0\xff", 5));
  EXPECT_EQ(detokenize(tokens, 0), "");
  const int32_t bad[] = {65, 300};
  EXPECT_TRUE(contains(error_of([&] { detokenize(bad, 2); }),
                       "token 300 at position 1 is not a byte (0..255)"));
}

TEST(TokenizerTest, LargeVocabulariesGetTheLlama3Format) {
  TempDir dir;
  write_bytes(dir / "c.txt", std::string("hello\nworld\n"));
  const TokenizeResult small = tokenize_files({dir / "c.txt"}, dir / "gpt2", 0.0, 50257);
  EXPECT_FALSE(small.uint32_tokens);
  EXPECT_EQ(TokenFile(small.train_path).format(), TokenFormat::kUint16);
  const TokenizeResult large = tokenize_files({dir / "c.txt"}, dir / "llama3", 0.0, 128256);
  EXPECT_TRUE(large.uint32_tokens);
  EXPECT_EQ(TokenFile(large.train_path).format(), TokenFormat::kUint32);
  EXPECT_EQ(text_of(large.train_path), "hello\nworld\n");
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "c.txt"}, dir / "x", 0.0, 100); }),
                       "vocab_size 100 cannot hold the byte-level tokens"));
}

}  // namespace
}  // namespace paraplan
