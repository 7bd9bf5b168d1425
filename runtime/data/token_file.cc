// token_file.cc: reading and writing llm.c token shards.
#include "runtime/data/token_file.h"

#include <sys/mman.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/bounded_file.h"

namespace paraplan {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read in place");

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::runtime_error(path + ": " + std::to_string(tokens.size()) +
                             " tokens do not fit the int32 header token count; split the "
                             "corpus into shards of at most 2147483647 tokens");
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  AtomicFileWriter writer(path);
  writer.write(header, sizeof(header));
  writer.write(tokens.data(), tokens.size() * sizeof(uint16_t));
  writer.commit();
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  // Only a regular file is opened (a named pipe would block, a device never
  // end), and only one the largest shard could be.
  constexpr FileKind kTokenFile{
      "token file", kTokenFileHeaderBytes + uint64_t{std::numeric_limits<int32_t>::max()} * 2};
  const RegularFile file(path, kTokenFile);
  const size_t file_bytes = static_cast<size_t>(file.size());
  if (file_bytes < kTokenFileHeaderBytes) {
    throw std::runtime_error(path + ": file is " + std::to_string(file_bytes) +
                             " bytes, too short for the " + std::to_string(kTokenFileHeaderBytes) +
                             "-byte token file header");
  }
  // The mapping keeps the file alive after the descriptor closes.
  mapping_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (mapping_ == MAP_FAILED) {
    const int map_error = errno;
    mapping_ = nullptr;
    throw std::runtime_error(path + ": cannot map token file: " + std::strerror(map_error));
  }
  mapping_bytes_ = file_bytes;

  int32_t header[3];
  std::memcpy(header, mapping_, sizeof(header));
  std::string problem;
  const int64_t tokens_in_file =
      static_cast<int64_t>((file_bytes - kTokenFileHeaderBytes) / sizeof(uint16_t));
  if (header[0] != kTokenFileMagic) {
    problem = "header magic is " + std::to_string(header[0]) + " but token files start with " +
              std::to_string(kTokenFileMagic) + " (not an llm.c token file?)";
  } else if (header[1] != kTokenFileVersion) {
    problem = "header version is " + std::to_string(header[1]) + " but only version " +
              std::to_string(kTokenFileVersion) + " (uint16 tokens) is supported";
  } else if (header[2] < 0) {
    problem = "header token count " + std::to_string(header[2]) + " is negative";
  } else if (header[2] > tokens_in_file) {
    problem = "header token count " + std::to_string(header[2]) + " but the file holds " +
              std::to_string(tokens_in_file) + " tokens (truncated?)";
  } else if (file_bytes != kTokenFileHeaderBytes + static_cast<size_t>(header[2]) * 2) {
    // llm.c refuses these too: extra bytes mean the header and data disagree.
    problem = "header token count " + std::to_string(header[2]) + " but the file is " +
              std::to_string(file_bytes) + " bytes, not the expected " +
              std::to_string(kTokenFileHeaderBytes + static_cast<size_t>(header[2]) * 2) +
              " (extra data after the tokens?)";
  }
  if (!problem.empty()) {
    release();
    throw std::runtime_error(path + ": " + problem);
  }
  num_tokens_ = header[2];
  tokens_ =
      reinterpret_cast<const uint16_t*>(static_cast<const char*>(mapping_) + kTokenFileHeaderBytes);
}

TokenFile::~TokenFile() {
  release();
}

TokenFile::TokenFile(TokenFile&& other) noexcept {
  *this = std::move(other);
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    num_tokens_ = other.num_tokens_;
    tokens_ = other.tokens_;
    mapping_ = other.mapping_;
    mapping_bytes_ = other.mapping_bytes_;
    other.num_tokens_ = 0;
    other.tokens_ = nullptr;
    other.mapping_ = nullptr;
    other.mapping_bytes_ = 0;
  }
  return *this;
}

void TokenFile::release() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  tokens_ = nullptr;
  num_tokens_ = 0;
}

void TokenFile::validate_vocab(int vocab_size) const {
  for (int64_t i = 0; i < num_tokens_; ++i) {
    if (tokens_[i] >= vocab_size)
      throw std::runtime_error(path_ + ": token " + std::to_string(tokens_[i]) + " at position " +
                               std::to_string(i) + " is >= vocab_size " +
                               std::to_string(vocab_size) +
                               "; tokenize with a matching tokenizer or raise the model's "
                               "vocab_size");
  }
}

}  // namespace paraplan
