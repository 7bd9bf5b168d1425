// token_file.h: the llm.c token shard format. A file is a header of 256 int32
// (header[0] = 20240520, header[1] = 1, header[2] = token count) followed by
// that many uint16 tokens, little-endian, so shards prepared for llm.c load
// as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace paraplan {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int kTokenFileHeaderInts = 256;
inline constexpr size_t kTokenFileHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

// Writes `tokens` to `path` atomically (temporary file + rename). Throws
// std::runtime_error if the file cannot be written or holds more tokens than
// the int32 header field can count.
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);

// A token file held in memory (memory-mapped read-only, so ranks on one node
// share the page cache). Opening validates the header and the size; every
// failure is a std::runtime_error naming the file and the field.
class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  const uint16_t* tokens() const { return tokens_; }
  uint16_t operator[](int64_t i) const { return tokens_[i]; }

  // Throws on the first token id >= vocab_size, naming its position.
  void validate_vocab(int vocab_size) const;

 private:
  void release();

  std::string path_;
  int64_t num_tokens_ = 0;
  const uint16_t* tokens_ = nullptr;
  void* mapping_ = nullptr;  // the whole file, or nullptr when it is empty of tokens
  size_t mapping_bytes_ = 0;
};

}  // namespace paraplan
