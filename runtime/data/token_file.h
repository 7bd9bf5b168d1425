// token_file.h: llm.c's token shard formats. A file is a header of 256 int32
// (header[0] = magic, header[1] = version, header[2] = token count) followed
// by that many tokens, little-endian:
//   GPT-2   magic 20240520, version 1, uint16 tokens (vocabularies up to 65,536);
//   Llama 3 magic 20240801, version 7, uint32 tokens (larger vocabularies,
//           Llama 3's 128,256),
// so shards prepared for llm.c (dev/data/data_common.py) load as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace paraplan {

inline constexpr int32_t kTokenFileMagic = 20240520;  // GPT-2, uint16 tokens
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int32_t kLlama3TokenFileMagic = 20240801;  // Llama 3, uint32 tokens
inline constexpr int32_t kLlama3TokenFileVersion = 7;
inline constexpr int kTokenFileHeaderInts = 256;
inline constexpr size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

enum class TokenFormat { kUint16, kUint32 };

// The format a vocabulary of vocab_size tokens needs: uint16 up to 65,536,
// uint32 above.
TokenFormat token_format_for_vocab(int64_t vocab_size);
size_t token_bytes(TokenFormat format);

// Writes `tokens` to `path` atomically (temporary file + rename) in `format`.
// Throws std::runtime_error if the file cannot be written, holds more tokens
// than the int32 header field can count, or (uint16) a token is above 65535.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens,
                      TokenFormat format);
// The GPT-2 format.
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);

// A token file written as its tokens arrive (a corpus larger than memory):
// the header's count is filled in at the end, and the file appears under its
// name only when committed (temporary file + rename); destroyed uncommitted,
// it leaves nothing.
class TokenFileWriter {
 public:
  // The largest count the int32 header holds.
  static constexpr int64_t kMaxTokens = 2147483647;

  TokenFileWriter(const std::string& path, TokenFormat format);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Throws std::runtime_error past kMaxTokens or on a token the format cannot
  // hold (uint16: above 65535), naming the file.
  void append(const uint32_t* tokens, size_t count);
  int64_t count() const { return count_; }
  // Commits under the path given, or another in the same directory.
  void commit();
  void commit_as(const std::string& path);

 private:
  std::vector<int32_t> header_ints() const;
  struct Writer;
  std::unique_ptr<Writer> writer_;
  std::string path_;
  TokenFormat format_;
  int64_t count_ = 0;
  std::vector<uint16_t> narrow_;  // reused for the GPT-2 format
};

// A token file held in memory (memory-mapped read-only, so ranks on one node
// share the page cache), in either format. Opening validates the header and
// the size; every failure is a std::runtime_error naming the file and the
// field.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  TokenFormat format() const { return format_; }
  int64_t num_tokens() const { return num_tokens_; }
  // Token i (0 <= i < num_tokens()), widened.
  uint32_t operator[](int64_t i) const {
    return format_ == TokenFormat::kUint16 ? static_cast<const uint16_t*>(tokens_)[i]
                                           : static_cast<const uint32_t*>(tokens_)[i];
  }
  // out[k] = token (first + k) for k < count, as int32 (the runtime's ids).
  void read(int64_t first, int64_t count, int32_t* out) const;

  // Throws on the first token id >= vocab_size, naming its position.
  void validate_vocab(int vocab_size) const;

 private:
  void release();

  std::string path_;
  TokenFormat format_ = TokenFormat::kUint16;
  int64_t num_tokens_ = 0;
  const void* tokens_ = nullptr;
  void* mapping_ = nullptr;  // the whole file, or nullptr when it is empty of tokens
  size_t mapping_bytes_ = 0;
};

}  // namespace paraplan
