// token_file.cc: reading and writing llm.c token shards (GPT-2 uint16 and
// Llama 3 uint32).
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

TokenFormat token_format_for_vocab(int64_t vocab_size) {
  return vocab_size > 65536 ? TokenFormat::kUint32 : TokenFormat::kUint16;
}

size_t token_bytes(TokenFormat format) {
  return format == TokenFormat::kUint16 ? sizeof(uint16_t) : sizeof(uint32_t);
}

namespace {

void write_tokens(const std::string& path, const void* tokens, size_t count, TokenFormat format) {
  if (count > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::runtime_error(path + ": " + std::to_string(count) +
                             " tokens do not fit the int32 header token count; split the "
                             "corpus into shards of at most 2147483647 tokens");
  const bool wide = format == TokenFormat::kUint32;
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = wide ? kLlama3TokenFileMagic : kTokenFileMagic;
  header[1] = wide ? kLlama3TokenFileVersion : kTokenFileVersion;
  header[2] = static_cast<int32_t>(count);
  AtomicFileWriter writer(path);
  writer.write(header, sizeof(header));
  writer.write(tokens, count * token_bytes(format));
  writer.commit();
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens,
                      TokenFormat format) {
  if (format == TokenFormat::kUint32) {
    write_tokens(path, tokens.data(), tokens.size(), format);
    return;
  }
  std::vector<uint16_t> narrow(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] > 65535)
      throw std::runtime_error(path + ": token " + std::to_string(tokens[i]) + " at position " +
                               std::to_string(i) +
                               " does not fit the GPT-2 format's uint16; write the Llama 3 "
                               "format (uint32 tokens)");
    narrow[i] = static_cast<uint16_t>(tokens[i]);
  }
  write_tokens(path, narrow.data(), narrow.size(), format);
}

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_tokens(path, tokens.data(), tokens.size(), TokenFormat::kUint16);
}

struct TokenFileWriter::Writer {
  explicit Writer(const std::string& path) : file(path) {}
  AtomicFileWriter file;
};

TokenFileWriter::TokenFileWriter(const std::string& path, TokenFormat format)
    : writer_(std::make_unique<Writer>(path)), path_(path), format_(format) {
  // A placeholder count until commit; written (not overwritten) so that the
  // tokens follow it.
  const std::vector<int32_t> header = header_ints();
  writer_->file.write(header.data(), kTokenFileHeaderBytes);
}

TokenFileWriter::~TokenFileWriter() = default;

std::vector<int32_t> TokenFileWriter::header_ints() const {
  const bool wide = format_ == TokenFormat::kUint32;
  std::vector<int32_t> header(kTokenFileHeaderInts, 0);
  header[0] = wide ? kLlama3TokenFileMagic : kTokenFileMagic;
  header[1] = wide ? kLlama3TokenFileVersion : kTokenFileVersion;
  header[2] = static_cast<int32_t>(count_);
  return header;
}

void TokenFileWriter::append(const uint32_t* tokens, size_t count) {
  if (static_cast<int64_t>(count) > kMaxTokens - count_)
    throw std::runtime_error(path_ + ": more than " + std::to_string(kMaxTokens) +
                             " tokens, which the int32 header token count cannot hold; write "
                             "shards");
  if (format_ == TokenFormat::kUint32) {
    writer_->file.write(tokens, count * sizeof(uint32_t));
  } else {
    narrow_.resize(count);
    for (size_t i = 0; i < count; ++i) {
      if (tokens[i] > 65535)
        throw std::runtime_error(path_ + ": token " + std::to_string(tokens[i]) +
                                 " does not fit the GPT-2 format's uint16; write the Llama 3 "
                                 "format (uint32 tokens)");
      narrow_[i] = static_cast<uint16_t>(tokens[i]);
    }
    writer_->file.write(narrow_.data(), count * sizeof(uint16_t));
  }
  count_ += static_cast<int64_t>(count);
}

void TokenFileWriter::commit() {
  commit_as(path_);
}

void TokenFileWriter::commit_as(const std::string& path) {
  const std::vector<int32_t> header = header_ints();
  writer_->file.write_at(0, header.data(), kTokenFileHeaderBytes);
  writer_->file.commit_as(path);
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  // Only a regular file is opened (a named pipe would block, a device never
  // end), and only one the largest shard could be (2^31 - 1 uint32 tokens).
  constexpr FileKind kTokenFile{
      "token file", kTokenFileHeaderBytes + uint64_t{std::numeric_limits<int32_t>::max()} * 4};
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
  if (header[0] == kTokenFileMagic) {
    format_ = TokenFormat::kUint16;
    if (header[1] != kTokenFileVersion)
      problem = "header version is " + std::to_string(header[1]) + " but the GPT-2 format (magic " +
                std::to_string(kTokenFileMagic) + ") has version " +
                std::to_string(kTokenFileVersion) + " (uint16 tokens)";
  } else if (header[0] == kLlama3TokenFileMagic) {
    format_ = TokenFormat::kUint32;
    if (header[1] != kLlama3TokenFileVersion)
      problem = "header version is " + std::to_string(header[1]) +
                " but the Llama 3 format (magic " + std::to_string(kLlama3TokenFileMagic) +
                ") has version " + std::to_string(kLlama3TokenFileVersion) + " (uint32 tokens)";
  } else {
    problem = "header magic is " + std::to_string(header[0]) + " but token files start with " +
              std::to_string(kTokenFileMagic) + " (GPT-2, uint16) or " +
              std::to_string(kLlama3TokenFileMagic) +
              " (Llama 3, uint32) (not an llm.c token file?)";
  }
  const size_t width = token_bytes(format_);
  const int64_t tokens_in_file = static_cast<int64_t>((file_bytes - kTokenFileHeaderBytes) / width);
  if (!problem.empty()) {
    // The header names neither format: its sizes mean nothing.
  } else if (header[2] < 0) {
    problem = "header token count " + std::to_string(header[2]) + " is negative";
  } else if (header[2] > tokens_in_file) {
    problem = "header token count " + std::to_string(header[2]) + " but the file holds " +
              std::to_string(tokens_in_file) + " tokens (truncated?)";
  } else if (file_bytes != kTokenFileHeaderBytes + static_cast<size_t>(header[2]) * width) {
    // llm.c refuses these too: extra bytes mean the header and data disagree.
    problem = "header token count " + std::to_string(header[2]) + " but the file is " +
              std::to_string(file_bytes) + " bytes, not the expected " +
              std::to_string(kTokenFileHeaderBytes + static_cast<size_t>(header[2]) * width) +
              " (extra data after the tokens?)";
  }
  if (!problem.empty()) {
    release();
    throw std::runtime_error(path + ": " + problem);
  }
  num_tokens_ = header[2];
  tokens_ = static_cast<const char*>(mapping_) + kTokenFileHeaderBytes;
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
    format_ = other.format_;
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

void TokenFile::read(int64_t first, int64_t count, int32_t* out) const {
  if (format_ == TokenFormat::kUint16) {
    const uint16_t* tokens = static_cast<const uint16_t*>(tokens_) + first;
    for (int64_t k = 0; k < count; ++k) out[k] = tokens[k];
  } else {
    const uint32_t* tokens = static_cast<const uint32_t*>(tokens_) + first;
    for (int64_t k = 0; k < count; ++k) out[k] = static_cast<int32_t>(tokens[k]);
  }
}

void TokenFile::validate_vocab(int vocab_size) const {
  for (int64_t i = 0; i < num_tokens_; ++i) {
    const uint32_t token = (*this)[i];
    if (token >= static_cast<uint32_t>(vocab_size))
      throw std::runtime_error(path_ + ": token " + std::to_string(token) + " at position " +
                               std::to_string(i) + " is >= vocab_size " +
                               std::to_string(vocab_size) +
                               "; tokenize with a matching tokenizer or raise the model's "
                               "vocab_size");
  }
}

}  // namespace paraplan
