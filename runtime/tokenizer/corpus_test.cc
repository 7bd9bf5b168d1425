// corpus_test.cc: byte-level tokenization, the train/val split at a line
// boundary, directory expansion, and the error messages; with a BPE
// tokenizer: documents (files and .jsonl lines) after their separator, the
// validation split by documents, the same tokens on any number of threads.
#include "runtime/tokenizer/corpus.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/data/token_file.h"
#include "runtime/testing/test_temp_dir.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/test_tokenizer.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

TokenizeOptions split(double val_fraction, int64_t vocab_size = kByteVocabSize) {
  TokenizeOptions options;
  options.val_fraction = val_fraction;
  options.vocab_size = vocab_size;
  return options;
}

std::string text_of(const std::string& token_path) {
  TokenFile file(token_path);
  std::vector<int32_t> tokens(file.num_tokens());
  file.read(0, file.num_tokens(), tokens.data());
  return detokenize(tokens.data(), static_cast<int64_t>(tokens.size()));
}

TEST(TokenizerTest, TokensAreByteValues) {
  TempDir dir;
  write_bytes(dir / "c.txt", std::string("Az\n\xff\x00", 5));
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out", split(0.0));
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
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out", split(0.9));
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
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out", split(0.5));
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
      tokenize_files({dir / "corpus", dir / "extra.txt"}, dir / "out", split(0.0));
  EXPECT_EQ(text_of(result.train_path), "ABCE");
  ASSERT_EQ(result.files_read.size(), 4u);
  EXPECT_EQ(result.files_read[0], dir / "corpus/a.txt");
  EXPECT_EQ(result.files_read[3], dir / "extra.txt");
}

TEST(TokenizerTest, ReplacesExistingOutputs) {
  TempDir dir;
  write_bytes(dir / "c.txt", "first corpus\n");
  tokenize_files({dir / "c.txt"}, dir / "out", split(0.0));
  write_bytes(dir / "c.txt", "second\n");
  const TokenizeResult result = tokenize_files({dir / "c.txt"}, dir / "out", split(0.0));
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
  EXPECT_EQ(tokenize_files({dir / "one.txt"}, dir / "out", split(0.0)).train_tokens, 1);
}

TEST(TokenizerTest, BadValFractionIsRefused) {
  TempDir dir;
  write_bytes(dir / "c.txt", "hello\n");
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "c.txt"}, dir / "out", split(1.5)); }),
                       "val_fraction 1.500000 is outside [0, 1)"));
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "c.txt"}, dir / "out", split(-0.1)); }),
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
  const TokenizeResult small = tokenize_files({dir / "c.txt"}, dir / "gpt2", split(0.0, 50257));
  EXPECT_FALSE(small.uint32_tokens);
  EXPECT_EQ(TokenFile(small.train_path).format(), TokenFormat::kUint16);
  const TokenizeResult large = tokenize_files({dir / "c.txt"}, dir / "llama3", split(0.0, 128256));
  EXPECT_TRUE(large.uint32_tokens);
  EXPECT_EQ(TokenFile(large.train_path).format(), TokenFormat::kUint32);
  EXPECT_EQ(text_of(large.train_path), "hello\nworld\n");
  EXPECT_TRUE(
      contains(error_of([&] { tokenize_files({dir / "c.txt"}, dir / "x", split(0.0, 100)); }),
               "vocab_size 100 cannot hold the byte-level tokens"));
}

// A tokenizer whose merges make "the" and " the" single tokens (257, 258);
// <|endoftext|> is 259.
class CorpusWithTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    write_bytes(dir / "tokenizer.json",
                testing::tokenizer_json({{"t", "h"}, {"th", "e"}, {" ", "the"}}).dump());
    tokenizer = std::make_unique<BpeTokenizer>(BpeTokenizer::from_file(dir / "tokenizer.json"));
  }
  TokenizeOptions with_tokenizer(double val_fraction = 0.0) const {
    TokenizeOptions options = split(val_fraction);
    options.tokenizer = tokenizer.get();
    return options;
  }
  static std::vector<uint32_t> tokens_of(const std::string& path) {
    TokenFile file(path);
    std::vector<uint32_t> tokens;
    for (int64_t i = 0; i < file.num_tokens(); ++i) tokens.push_back(file[i]);
    return tokens;
  }
  TempDir dir;
  std::unique_ptr<BpeTokenizer> tokenizer;
};

using Tokens = std::vector<uint32_t>;

TEST_F(CorpusWithTokenizer, EachDocumentGoesAfterTheSeparator) {
  write_bytes(dir / "a.txt", "the the");
  write_bytes(dir / "b.jsonl",
              "{\"text\": \"the\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"ab the\"}\n");
  const TokenizeResult result =
      tokenize_files({dir / "a.txt", dir / "b.jsonl"}, dir / "out", with_tokenizer());
  EXPECT_EQ(tokens_of(result.train_path), (Tokens{259, 257, 258, 259, 257, 259, 'a', 'b', 258}));
  EXPECT_EQ(result.documents, 3);
  EXPECT_EQ(result.separator_name, "<|endoftext|>");
  EXPECT_EQ(result.separator_token, 259);
  EXPECT_FALSE(result.uint32_tokens);
  EXPECT_EQ(result.text_bytes, 7 + 3 + 6);
}

TEST_F(CorpusWithTokenizer, ValidationIsTheLastDocumentsOrOneDocumentSplitAtALine) {
  write_bytes(dir / "docs.jsonl",
              "{\"text\": \"the the the the\"}\n{\"text\": \"ab\"}\n{\"text\": \"abc\"}\n");
  // Lines of 28, 15 and 16 bytes: 20% of 59 is validation, so what ends past
  // byte 47.2, the last document.
  const TokenizeResult documents =
      tokenize_files({dir / "docs.jsonl"}, dir / "out", with_tokenizer(0.2));
  EXPECT_EQ(tokens_of(documents.val_path), (Tokens{259, 'a', 'b', 'c'}));
  EXPECT_EQ(tokens_of(documents.train_path), (Tokens{259, 257, 258, 258, 258, 259, 'a', 'b'}));
  // 30% (past byte 41.3): the second too.
  const TokenizeResult more =
      tokenize_files({dir / "docs.jsonl"}, dir / "more", with_tokenizer(0.3));
  EXPECT_EQ(tokens_of(more.val_path), (Tokens{259, 'a', 'b', 259, 'a', 'b', 'c'}));

  write_bytes(dir / "one.txt", "the\nthe\nab\nab\n");
  const TokenizeResult one = tokenize_files({dir / "one.txt"}, dir / "one", with_tokenizer(0.3));
  EXPECT_EQ(one.documents, 1);
  EXPECT_EQ(tokens_of(one.train_path), (Tokens{259, 257, '\n', 257, '\n', 'a', 'b', '\n'}));
  EXPECT_EQ(tokens_of(one.val_path), (Tokens{259, 'a', 'b', '\n'}));
}

TEST_F(CorpusWithTokenizer, ThreadsAndChunksLeaveTheTokensAsTheyAre) {
  // A "\n\n" token: GPT-2's pattern keeps a run's last line break apart
  // when a word follows, so a cut after "\n\n" would change the tokens.
  write_bytes(
      dir / "tokenizer.json",
      testing::tokenizer_json({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"\n", "\n"}}).dump());
  tokenizer = std::make_unique<BpeTokenizer>(BpeTokenizer::from_file(dir / "tokenizer.json"));
  std::string lines, words;  // cut after line breaks; cut before spaces (one line)
  for (int line = 0; lines.size() < 60000; ++line)
    lines += "the " + std::to_string(line) + "  \t the\u00a0x, '" + std::string(line % 7, ' ') +
             (line % 5 == 0 ? "\n\n" : "\n") + (line % 3 == 0 ? " " : "");
  for (int word = 0; words.size() < 30000; ++word) words += word % 4 ? "the " : "a  b\t";
  write_bytes(dir / "lines.txt", lines);
  write_bytes(dir / "words.txt", words);
  const std::vector<std::string> inputs = {dir / "lines.txt", dir / "words.txt"};
  TokenizeOptions options = with_tokenizer();
  options.threads = 1;
  options.chunk_bytes = lines.size();  // one chunk a document
  const Tokens whole = tokens_of(tokenize_files(inputs, dir / "one", options).train_path);
  options.threads = 3;
  options.chunk_bytes = 1000;  // about 60 and 30 chunks
  const Tokens chunked = tokens_of(tokenize_files(inputs, dir / "three", options).train_path);
  EXPECT_EQ(chunked, whole);
  std::vector<int32_t> encoded{260};  // <|endoftext|> after the "\n\n" token
  tokenizer->encode(lines, encoded);
  encoded.push_back(260);
  tokenizer->encode(words, encoded);
  EXPECT_EQ(whole, Tokens(encoded.begin(), encoded.end()));
}

// A SentencePiece-style document cut into chunks: each chunk after the first
// continues the text (no prefix space of its own), so the tokens are the
// whole document's; a vocabulary with a token across a space ("b▁") is
// encoded whole.
TEST_F(CorpusWithTokenizer, SentencePieceChunksContinueTheirDocument) {
  const std::string space = "\xE2\x96\x81";
  nlohmann::json file =
      testing::sentencepiece_json({space, "a", "b", "t", "h", "e"},
                                  {{space, "t"}, {"h", "e"}, {space + "t", "he"}, {"a", "b"}});
  std::string text;
  for (int word = 0; text.size() < 30000; ++word) text += word % 5 ? "the ab " : "b a\nthe x\n";
  write_bytes(dir / "doc.txt", text);
  for (const bool crossing : {false, true}) {
    if (crossing) {
      file["model"]["merges"].push_back("b " + space);
      file["model"]["vocab"]["b" + space] = 300;
    }
    write_bytes(dir / "sp.json", file.dump());
    tokenizer = std::make_unique<BpeTokenizer>(BpeTokenizer::from_file(dir / "sp.json"));
    EXPECT_EQ(tokenizer->cuts_safely_at_spaces(), !crossing);
    TokenizeOptions options = with_tokenizer();
    options.threads = 2;
    options.chunk_bytes = 1000;
    const std::string out = dir / (crossing ? "crossing" : "plain");
    const Tokens chunked = tokens_of(tokenize_files({dir / "doc.txt"}, out, options).train_path);
    std::vector<int32_t> whole{1};  // <s>
    tokenizer->encode(text, whole);
    EXPECT_EQ(chunked, Tokens(whole.begin(), whole.end())) << (crossing ? "crossing" : "plain");
  }
}

// Progress after each file and each Parquet row group (pyarrow's file of 18
// rows in groups of 4, from the fuzzer's seeds): files and bytes counted up
// to the whole input, the last report the run's documents and tokens.
TEST_F(CorpusWithTokenizer, ProgressIsReportedAfterEachFileAndRowGroup) {
  write_bytes(dir / "docs.jsonl", "{\"text\": \"the the\"}\n{\"text\": \"ab the\"}\n");
  write_bytes(dir / "one.txt", "the ab\n");
  const std::string parquet =
      std::string(PARAPLAN_SOURCE_DIR) + "/fuzz/corpus/parquet_fuzzer/groups_uncompressed.parquet";
  std::vector<TokenizeProgress> reports;
  TokenizeOptions options = with_tokenizer();
  options.progress = [&](const TokenizeProgress& p) { reports.push_back(p); };
  const TokenizeResult result =
      tokenize_files({dir / "docs.jsonl", dir / "one.txt", parquet}, dir / "out", options);
  // 2 files, then the Parquet file's 5 groups and its end.
  ASSERT_EQ(reports.size(), 8u);
  EXPECT_EQ(reports[0].files_done, 1);
  EXPECT_EQ(reports[1].files_done, 2);
  EXPECT_EQ(reports[6].files_done, 2);
  for (size_t i = 1; i < reports.size(); ++i) {
    EXPECT_GE(reports[i].input_bytes_done, reports[i - 1].input_bytes_done) << i;
    EXPECT_GE(reports[i].tokens, reports[i - 1].tokens) << i;
  }
  const TokenizeProgress& last = reports.back();
  EXPECT_EQ(last.files_done, 3);
  EXPECT_EQ(last.files, 3);
  EXPECT_EQ(last.input_bytes_done, last.input_bytes);
  EXPECT_EQ(last.documents, result.documents);
  EXPECT_EQ(last.tokens, result.train_tokens + result.val_tokens);
  EXPECT_EQ(result.documents, 3 + 12);  // the Parquet file's 18 rows less 6 nulls and empties
}

TEST_F(CorpusWithTokenizer, ShardsHoldShardTokensAndReplaceEarlierOutputs) {
  write_bytes(dir / "docs.jsonl", "{\"text\": \"the the\"}\n{\"text\": \"ab the\"}\n");
  TokenizeOptions options = with_tokenizer();
  options.shard_tokens = 3;
  const TokenizeResult sharded = tokenize_files({dir / "docs.jsonl"}, dir / "out", options);
  // 259 257 258 | 259 'a' 'b' | 258
  EXPECT_EQ(sharded.train_files, 3);
  EXPECT_EQ(sharded.train_path, dir / "out/train_*.bin");
  EXPECT_EQ(tokens_of(dir / "out/train_000000.bin"), (Tokens{259, 257, 258}));
  EXPECT_EQ(tokens_of(dir / "out/train_000001.bin"), (Tokens{259, 'a', 'b'}));
  EXPECT_EQ(tokens_of(dir / "out/train_000002.bin"), (Tokens{258}));
  EXPECT_EQ(sharded.val_files, 1);
  EXPECT_EQ(tokens_of(sharded.val_path), Tokens{});

  // A run that fails halfway leaves the earlier shards as they were.
  write_bytes(dir / "bad.jsonl", "{\"text\": \"ab ab ab\"}\n{\"body\": 1}\n");
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "bad.jsonl"}, dir / "out", options); }),
                       "bad.jsonl line 2"));
  EXPECT_EQ(tokens_of(dir / "out/train_000000.bin"), (Tokens{259, 257, 258}));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir / "out"),
                          std::filesystem::directory_iterator()),
            4)
      << "three shards and val.bin, no hidden shard left";

  write_bytes(dir / "out/train_notes.bin", "kept: not a name tokenize writes");
  const TokenizeResult whole = tokenize_files({dir / "docs.jsonl"}, dir / "out", with_tokenizer());
  EXPECT_EQ(whole.train_path, dir / "out/train.bin");
  EXPECT_EQ(tokens_of(whole.train_path).size(), 7u);
  EXPECT_FALSE(std::filesystem::exists(dir / "out/train_000000.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "out/train_000002.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir / "out/train_notes.bin"));
}

TEST_F(CorpusWithTokenizer, BadDocumentsAndSeparatorsAreNamed) {
  write_bytes(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  EXPECT_TRUE(contains(
      error_of([&] { tokenize_files({dir / "bad.jsonl"}, dir / "out", with_tokenizer()); }),
      "bad.jsonl line 2: expected an object whose \"text\" is the document's text"));
  TokenizeOptions body = with_tokenizer();
  body.text_field = "body";
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "bad.jsonl"}, dir / "out", body); }),
                       "bad.jsonl line 1: expected an object whose \"body\""));
  write_bytes(dir / "broken.jsonl", "{\"text\": \"ok\"\n");
  EXPECT_TRUE(contains(
      error_of([&] { tokenize_files({dir / "broken.jsonl"}, dir / "out", with_tokenizer()); }),
      "broken.jsonl line 1: not JSON"));
  write_bytes(dir / "a.txt", "the");
  TokenizeOptions separator = with_tokenizer();
  separator.document_separator = "<|begin_of_text|>";
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "a.txt"}, dir / "out", separator); }),
                       "--document-separator \"<|begin_of_text|>\" is not a special token of GPT-2 "
                       "pattern, 260 tokens (tokenizer.json)"));
  // Byte-level tokenization takes files as they are; JSON lines need a tokenizer.
  EXPECT_TRUE(contains(error_of([&] { tokenize_files({dir / "bad.jsonl"}, dir / "out"); }),
                       "a .jsonl corpus needs --tokenizer"));
}

TEST_F(CorpusWithTokenizer, BytesThatAreNotUtf8AreCountedAndKept) {
  write_bytes(dir / "a.txt",
              "th\xff\xfe"
              "e");
  const TokenizeResult result = tokenize_files({dir / "a.txt"}, dir / "out", with_tokenizer());
  EXPECT_EQ(result.invalid_utf8_bytes, 2);
  EXPECT_EQ(tokens_of(result.train_path), (Tokens{259, 256, 0xff, 0xfe, 'e'}));
}

}  // namespace
}  // namespace paraplan
