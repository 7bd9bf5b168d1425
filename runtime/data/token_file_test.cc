// token_file_test.cc: llm.c's token shard formats (GPT-2 uint16, Llama 3
// uint32), byte for byte, and their validation errors.
#include "runtime/data/token_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

int32_t header_int(const std::string& bytes, int index) {
  int32_t value;
  std::memcpy(&value, bytes.data() + index * 4, 4);
  return value;
}

// A header as llm.c writes it, followed by `payload`.
std::string shard(int32_t magic, int32_t version, int32_t count, const std::string& payload) {
  std::string bytes(kTokenFileHeaderBytes, '\0');
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &version, 4);
  std::memcpy(bytes.data() + 8, &count, 4);
  return bytes + payload;
}

TEST(TokenFileTest, WritesTheLlmcLayoutByteForByte) {
  TempDir dir;
  const std::string path = dir / "train.bin";
  write_token_file(path, {1, 258, 65535});
  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 6u);
  EXPECT_EQ(header_int(bytes, 0), 20240520);
  EXPECT_EQ(header_int(bytes, 1), 1);
  EXPECT_EQ(header_int(bytes, 2), 3);
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header_int(bytes, i), 0) << "header[" << i << "]";
  // uint16 little-endian: 1 = 01 00, 258 = 02 01, 65535 = ff ff.
  EXPECT_EQ(bytes.substr(1024), std::string("\x01\x00\x02\x01\xff\xff", 6));
  // No temporary file is left beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(TokenFileTest, RoundTripsTokens) {
  TempDir dir;
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<uint16_t>(i * 37 % 50257));
  write_token_file(dir / "t.bin", tokens);
  TokenFile file(dir / "t.bin");
  ASSERT_EQ(file.num_tokens(), 1000);
  EXPECT_EQ(file.path(), dir / "t.bin");
  std::vector<int32_t> read(1000);
  file.read(0, 1000, read.data());
  EXPECT_EQ(std::vector<int32_t>(tokens.begin(), tokens.end()), read);
  EXPECT_EQ(file[999], 999 * 37 % 50257);
}

TEST(TokenFileTest, WritesTheLlama3LayoutByteForByte) {
  TempDir dir;
  const std::string path = dir / "train.bin";
  write_token_file(path, {1, 65536, 128255}, TokenFormat::kUint32);
  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 12u);
  EXPECT_EQ(header_int(bytes, 0), 20240801);
  EXPECT_EQ(header_int(bytes, 1), 7);
  EXPECT_EQ(header_int(bytes, 2), 3);
  // uint32 little-endian: 65536 = 00 00 01 00, 128255 = 0x1f4ff = ff f4 01 00.
  EXPECT_EQ(bytes.substr(1024),
            std::string("\x01\x00\x00\x00\x00\x00\x01\x00\xff\xf4\x01\x00", 12));
  TokenFile file(path);
  EXPECT_EQ(file.format(), TokenFormat::kUint32);
  EXPECT_EQ(file[2], 128255u);
  std::vector<int32_t> window(2);
  file.read(1, 2, window.data());
  EXPECT_EQ(window, (std::vector<int32_t>{65536, 128255}));
  EXPECT_NO_THROW(file.validate_vocab(128256));
  EXPECT_TRUE(contains(error_of([&] { file.validate_vocab(100000); }),
                       "token 128255 at position 2 is >= vocab_size 100000"));
}

TEST(TokenFileTest, TheVocabularyPicksTheFormat) {
  EXPECT_EQ(token_format_for_vocab(256), TokenFormat::kUint16);
  EXPECT_EQ(token_format_for_vocab(65536), TokenFormat::kUint16);
  EXPECT_EQ(token_format_for_vocab(65537), TokenFormat::kUint32);
  EXPECT_EQ(token_format_for_vocab(128256), TokenFormat::kUint32);
  TempDir dir;
  EXPECT_TRUE(contains(error_of([&] {
                         write_token_file(dir / "t.bin", {3, 70000}, TokenFormat::kUint16);
                       }),
                       "token 70000 at position 1 does not fit the GPT-2 format's uint16"));
  // The same tokens in both formats read back the same.
  write_token_file(dir / "a.bin", {7, 300, 65535}, TokenFormat::kUint16);
  write_token_file(dir / "b.bin", {7, 300, 65535}, TokenFormat::kUint32);
  std::vector<int32_t> a(3), b(3);
  TokenFile(dir / "a.bin").read(0, 3, a.data());
  TokenFile(dir / "b.bin").read(0, 3, b.data());
  EXPECT_EQ(a, b);
}

TEST(TokenFileTest, ReadsAShardWrittenByHand) {
  TempDir dir;
  write_bytes(dir / "h.bin", shard(20240520, 1, 2, std::string("\x07\x00\x00\x01", 4)));
  TokenFile file(dir / "h.bin");
  ASSERT_EQ(file.num_tokens(), 2);
  EXPECT_EQ(file[0], 7);
  EXPECT_EQ(file[1], 256);
}

TEST(TokenFileTest, EmptyTokenListIsValid) {
  TempDir dir;
  write_token_file(dir / "e.bin", {});
  TokenFile file(dir / "e.bin");
  EXPECT_EQ(file.num_tokens(), 0);
  EXPECT_NO_THROW(file.validate_vocab(1));
}

TEST(TokenFileTest, MoveKeepsTheTokens) {
  TempDir dir;
  write_token_file(dir / "m.bin", {5, 6});
  TokenFile a(dir / "m.bin");
  TokenFile b(std::move(a));
  EXPECT_EQ(a.num_tokens(), 0);
  ASSERT_EQ(b.num_tokens(), 2);
  EXPECT_EQ(b[1], 6);
}

TEST(TokenFileTest, MissingFileIsNamed) {
  TempDir dir;
  const std::string path = dir / "absent.bin";
  EXPECT_TRUE(contains(error_of([&] { TokenFile file(path); }),
                       path + ": cannot read the token file: No such file"));
}

TEST(TokenFileTest, FileShorterThanTheHeaderIsRefused) {
  TempDir dir;
  write_bytes(dir / "s.bin", std::string(100, '\0'));
  EXPECT_EQ(error_of([&] { TokenFile file(dir / "s.bin"); }),
            dir / "s.bin" + ": file is 100 bytes, too short for the 1024-byte token file header");
}

TEST(TokenFileTest, BadMagicIsRefused) {
  TempDir dir;
  write_bytes(dir / "m.bin", shard(12345, 1, 0, ""));
  EXPECT_TRUE(contains(error_of([&] { TokenFile file(dir / "m.bin"); }),
                       "m.bin: header magic is 12345 but token files start with 20240520"));
}

TEST(TokenFileTest, UnsupportedVersionIsRefused) {
  TempDir dir;
  write_bytes(dir / "v.bin", shard(20240520, 2, 0, ""));
  EXPECT_TRUE(contains(error_of([&] { TokenFile file(dir / "v.bin"); }),
                       "v.bin: header version is 2 but the GPT-2 format (magic 20240520) has "
                       "version 1 (uint16 tokens)"));
  write_bytes(dir / "w.bin", shard(20240801, 1, 0, ""));
  EXPECT_TRUE(contains(error_of([&] { TokenFile file(dir / "w.bin"); }),
                       "w.bin: header version is 1 but the Llama 3 format (magic 20240801) has "
                       "version 7 (uint32 tokens)"));
}

TEST(TokenFileTest, TruncatedFileIsRefused) {
  TempDir dir;
  write_bytes(dir / "train.bin", shard(20240520, 1, 1000000, std::string(8192, '\0')));
  EXPECT_EQ(error_of([&] { TokenFile file(dir / "train.bin"); }),
            dir / "train.bin" +
                ": header token count 1000000 but the file holds 4096 tokens (truncated?)");
}

TEST(TokenFileTest, TruncatedLlama3FileIsRefused) {
  TempDir dir;
  // 10 bytes hold two uint32 tokens (and half of a third).
  write_bytes(dir / "l.bin", shard(20240801, 7, 3, std::string(10, '\0')));
  EXPECT_TRUE(contains(error_of([&] { TokenFile file(dir / "l.bin"); }),
                       "l.bin: header token count 3 but the file holds 2 tokens (truncated?)"));
}

TEST(TokenFileTest, TrailingDataIsRefused) {
  TempDir dir;
  write_bytes(dir / "x.bin", shard(20240520, 1, 1, std::string(5, '\0')));
  EXPECT_TRUE(contains(error_of([&] { TokenFile file(dir / "x.bin"); }),
                       "x.bin: header token count 1 but the file is 1029 bytes, not the "
                       "expected 1026 (extra data after the tokens?)"));
}

TEST(TokenFileTest, NegativeCountIsRefused) {
  TempDir dir;
  write_bytes(dir / "n.bin", shard(20240520, 1, -3, ""));
  EXPECT_TRUE(contains(error_of([&] { TokenFile file(dir / "n.bin"); }),
                       "n.bin: header token count -3 is negative"));
}

TEST(TokenFileTest, ValidateVocabNamesTheFirstBadToken) {
  TempDir dir;
  std::vector<uint16_t> tokens(20, 10);
  tokens[17] = 300;
  tokens[19] = 400;
  write_token_file(dir / "train.bin", tokens);
  TokenFile file(dir / "train.bin");
  EXPECT_NO_THROW(file.validate_vocab(401));
  EXPECT_TRUE(contains(error_of([&] { file.validate_vocab(256); }),
                       "train.bin: token 300 at position 17 is >= vocab_size 256"));
  EXPECT_TRUE(contains(error_of([&] { file.validate_vocab(10); }),
                       "token 10 at position 0 is >= vocab_size 10"));
}

TEST(TokenFileWriterTest, StreamsTheSameBytesAsWriteTokenFile) {
  TempDir dir;
  const std::vector<uint32_t> tokens = {0, 65535, 7, 128000, 3};
  for (const TokenFormat format : {TokenFormat::kUint16, TokenFormat::kUint32}) {
    std::vector<uint32_t> fitting = tokens;
    if (format == TokenFormat::kUint16) fitting[3] = 12;
    write_token_file(dir / "whole.bin", fitting, format);
    TokenFileWriter writer(dir / "streamed.bin", format);
    writer.append(fitting.data(), 2);
    writer.append(fitting.data() + 2, 0);
    writer.append(fitting.data() + 2, 3);
    EXPECT_EQ(writer.count(), 5);
    EXPECT_FALSE(std::filesystem::exists(dir / "streamed.bin")) << "only once committed";
    writer.commit_as(dir / "renamed.bin");
    EXPECT_EQ(read_bytes(dir / "renamed.bin"), read_bytes(dir / "whole.bin"));
    EXPECT_FALSE(std::filesystem::exists(dir / "streamed.bin"));
  }
}

TEST(TokenFileWriterTest, AnUncommittedWriterLeavesNothingAndTooWideTokensAreNamed) {
  TempDir dir;
  {
    TokenFileWriter writer(dir / "gpt2.bin", TokenFormat::kUint16);
    const uint32_t wide[] = {1, 70000};
    EXPECT_TRUE(contains(error_of([&] { writer.append(wide, 2); }),
                         "gpt2.bin: token 70000 does not fit the GPT-2 format's uint16"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(TokenFileTest, WriteIntoMissingDirectoryFails) {
  TempDir dir;
  EXPECT_TRUE(contains(error_of([&] { write_token_file(dir / "no/such/dir/t.bin", {1}); }),
                       "cannot create"));
}

}  // namespace
}  // namespace paraplan
