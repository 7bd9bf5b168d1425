// parquet.cc: one text column of a Parquet file (parquet.h): the footer's
// metadata, then a row group's pages decompressed and decoded.
#include "runtime/tokenizer/parquet.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>

#include "common/printable_text.h"
#include "common/shared_library.h"
#include "runtime/tokenizer/parquet_delta.h"
#include "runtime/tokenizer/parquet_format.h"
#include "runtime/tokenizer/snappy.h"
#include "runtime/tokenizer/thrift_compact.h"

namespace paraplan {

namespace {

using Type = ThriftCompactReader::Type;
using namespace parquet;

// libzstd, opened on first use (Debian's dpkg itself needs it).
struct Zstd {
  size_t (*decompress)(void*, size_t, const void*, size_t) = nullptr;
  unsigned (*is_error)(size_t) = nullptr;
  const char* (*error_name)(size_t) = nullptr;
};
const Zstd& zstd(const std::string& where) {
  static const Zstd library = [&] {
    const std::string who = where + ": a ZSTD page";
    const std::string fix = "install libzstd1, or rewrite the file with SNAPPY";
    void* handle = open_shared_library("libzstd.so.1", "/usr/lib", who, fix);
    Zstd z;
    resolve_shared_function(handle, "libzstd.so.1", "ZSTD_decompress", z.decompress, who, fix);
    resolve_shared_function(handle, "libzstd.so.1", "ZSTD_isError", z.is_error, who, fix);
    resolve_shared_function(handle, "libzstd.so.1", "ZSTD_getErrorName", z.error_name, who, fix);
    return z;
  }();
  return library;
}

std::string uncompress(int codec, std::string_view bytes, uint64_t size, const std::string& where) {
  if (size > kMaxPageBytes)
    throw std::runtime_error(where + ": a page of " + std::to_string(size) +
                             " bytes uncompressed, above paraplan's 256 MiB");
  if (codec == kUncompressed) {
    if (bytes.size() != size)
      throw std::runtime_error(where + ": an uncompressed page of " + std::to_string(bytes.size()) +
                               " bytes says it has " + std::to_string(size));
    return std::string(bytes);
  }
  if (codec == kSnappy) {
    std::string out = snappy_uncompress(bytes, size, where);
    if (out.size() != size) throw std::runtime_error(where + ": a page's size is not its header's");
    return out;
  }
  const Zstd& z = zstd(where);
  std::string out(size, '\0');
  const size_t written = z.decompress(out.data(), out.size(), bytes.data(), bytes.size());
  if (z.is_error(written) || written != size)
    throw std::runtime_error(
        where + ": a ZSTD page does not decompress to its " + std::to_string(size) + " bytes" +
        (z.is_error(written) ? std::string(" (") + z.error_name(written) + ")" : std::string()));
  return out;
}

[[noreturn]] void hybrid_failure(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": RLE/bit-packed levels or indices: " + what);
}

// Parquet's RLE / bit-packed hybrid of `count` values of `width` bits:
// visit(value, times) for each run (a bit-packed value is a run of one), so
// that levels are counted and indices looked up without holding them.
template <typename Visit>
void for_each_hybrid(std::string_view data, int width, int64_t count, const std::string& where,
                     Visit&& visit) {
  if (width < 0 || width > 32) hybrid_failure(where, "a bit width of " + std::to_string(width));
  size_t at = 0;
  auto fail = [&](const std::string& what) { hybrid_failure(where, what); };
  auto varint = [&] {
    const std::optional<uint64_t> value = read_varint(data, at);
    if (!value) fail("a varint past their end, or longer than 10 bytes");
    return *value;
  };
  for (int64_t left = count; left > 0;) {
    const uint64_t header = varint();
    if (header & 1) {  // bit-packed: groups of 8 values, least significant bit first
      const uint64_t groups = header >> 1;
      if (groups > data.size() - at) fail("a bit-packed run past their end");
      const uint64_t bits = groups * 8 * static_cast<uint64_t>(width);
      if ((bits + 7) / 8 > data.size() - at) fail("a bit-packed run past their end");
      for (uint64_t i = 0; i < groups * 8 && left > 0; ++i, --left)
        visit(static_cast<uint32_t>(unpack_bits(data.data() + at, i, width)), int64_t{1});
      at += (bits + 7) / 8;
    } else {  // a run of one value, in ceil(width / 8) bytes
      const uint64_t run = header >> 1;
      const size_t bytes = static_cast<size_t>(width + 7) / 8;
      if (bytes > data.size() - at) fail("a run's value past their end");
      uint32_t value = 0;
      for (size_t b = 0; b < bytes; ++b)
        value |= static_cast<uint32_t>(static_cast<unsigned char>(data[at + b])) << (8 * b);
      at += bytes;
      if (run == 0) fail("a run of length 0");
      const int64_t times = run < static_cast<uint64_t>(left) ? static_cast<int64_t>(run) : left;
      visit(value, times);
      left -= times;
    }
  }
}

// How many of an optional column's definition levels are 1 (a value, not a
// null).
int64_t present(std::string_view levels, int64_t count, const std::string& where) {
  int64_t values = 0;
  for_each_hybrid(levels, 1, count, where, [&](uint32_t level, int64_t times) {
    if (level > 1) hybrid_failure(where, "a definition level of " + std::to_string(level));
    values += level * times;
  });
  return values;
}

// What a value costs the row group's budget: its bytes and its string.
uint64_t cost_of(size_t bytes) {
  return sizeof(std::string) + bytes;
}

void charge(uint64_t cost, uint64_t& budget, const std::string& where) {
  if (cost > budget)
    throw std::runtime_error(where +
                             ": its text passes the bytes paraplan holds of a row group "
                             "(it reads a group's text into memory)");
  budget -= cost;
}

// PLAIN BYTE_ARRAY values: a 4-byte little-endian length, then the bytes.
void plain_strings(std::string_view data, int64_t count, std::vector<std::string>& out,
                   uint64_t& budget, const std::string& where) {
  size_t at = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (data.size() - at < 4) throw std::runtime_error(where + ": PLAIN values end early");
    uint32_t length = 0;
    for (int b = 0; b < 4; ++b)
      length |= static_cast<uint32_t>(static_cast<unsigned char>(data[at + b])) << (8 * b);
    at += 4;
    if (length > data.size() - at)
      throw std::runtime_error(where + ": a PLAIN value of " + std::to_string(length) +
                               " bytes runs past its page");
    charge(cost_of(length), budget, where);
    out.emplace_back(data.substr(at, length));
    at += length;
  }
}

// A page's header fields paraplan reads.
struct PageHeader {
  int64_t type = -1, uncompressed = 0, compressed = 0;
  int64_t values = 0, encoding = 0, level_encoding = kRle;  // v1 and v2
  int64_t nulls = 0, definition_bytes = 0, repetition_bytes = 0;
  bool compressed_v2 = true;
};

PageHeader read_page_header(ThriftCompactReader& reader) {
  PageHeader page;
  reader.read_struct([&](int64_t id, int type) {
    if (id == 1 && type == Type::kI32)
      page.type = reader.integer();
    else if (id == 2 && type == Type::kI32)
      page.uncompressed = reader.integer();
    else if (id == 3 && type == Type::kI32)
      page.compressed = reader.integer();
    else if ((id == 5 || id == 7 || id == 8) && type == Type::kStruct)
      reader.read_struct([&](int64_t field, int t) {
        const bool v2 = id == 8;
        if (field == 1 && t == Type::kI32)
          page.values = reader.integer();
        else if (!v2 && field == 2 && t == Type::kI32)
          page.encoding = reader.integer();
        else if (!v2 && id == 5 && field == 3 && t == Type::kI32)
          page.level_encoding = reader.integer();
        else if (v2 && field == 2 && t == Type::kI32)
          page.nulls = reader.integer();
        else if (v2 && field == 4 && t == Type::kI32)
          page.encoding = reader.integer();
        else if (v2 && field == 5 && t == Type::kI32)
          page.definition_bytes = reader.integer();
        else if (v2 && field == 6 && t == Type::kI32)
          page.repetition_bytes = reader.integer();
        else if (v2 && field == 7 && (t == Type::kTrue || t == Type::kFalse))
          page.compressed_v2 = t == Type::kTrue;
        else
          reader.skip(t);
      });
    else
      reader.skip(type);
  });
  if (page.uncompressed < 0 || page.compressed < 0 || page.values < 0 || page.nulls < 0 ||
      page.definition_bytes < 0 || page.repetition_bytes < 0)
    reader.fail("a page header with a negative size or count");
  return page;
}

// A data page's non-null values, PLAIN or indices into the dictionary; the
// bytes appended count against `budget`.
void decode_values(int64_t encoding, std::string_view data, int64_t count,
                   const std::optional<std::vector<std::string>>& dictionary,
                   std::vector<std::string>& out, uint64_t& budget, const std::string& where) {
  if (encoding == kPlain) {
    plain_strings(data, count, out, budget, where);
    return;
  }
  if (encoding == kDeltaLengthByteArray || encoding == kDeltaByteArray) {
    const auto append = [&](std::string_view value) {
      charge(cost_of(value.size()), budget, where);
      out.emplace_back(value);
    };
    if (encoding == kDeltaLengthByteArray)
      decode_delta_length_byte_array(data, count, where, append);
    else
      decode_delta_byte_array(data, count, where, append);
    return;
  }
  if (encoding != kPlainDictionary && encoding != kRleDictionary)
    throw std::runtime_error(where + ": values in " + encoding_name(encoding) +
                             "; paraplan reads PLAIN, the dictionary encodings and "
                             "DELTA_(LENGTH_)BYTE_ARRAY: rewrite the file with pyarrow");
  if (!dictionary) throw std::runtime_error(where + ": dictionary indices but no dictionary page");
  if (count == 0) return;
  if (data.empty()) throw std::runtime_error(where + ": dictionary indices without a bit width");
  const int width = static_cast<unsigned char>(data[0]);
  for_each_hybrid(data.substr(1), width, count, where, [&](uint32_t index, int64_t times) {
    if (index >= dictionary->size())
      throw std::runtime_error(where + ": dictionary index " + std::to_string(index) +
                               " of a dictionary of " + std::to_string(dictionary->size()));
    const std::string& value = (*dictionary)[index];
    for (int64_t i = 0; i < times; ++i) {
      charge(cost_of(value.size()), budget, where);
      out.push_back(value);
    }
  });
}

}  // namespace

ParquetTextColumn ParquetTextColumn::open(const std::string& path, const std::string& column) {
  ParquetTextColumn result;
  result.name_ = path;
  std::error_code error;
  result.file_size_ = std::filesystem::file_size(path, error);
  if (error) throw std::runtime_error(path + ": cannot be read (" + error.message() + ")");
  result.read_ = [path](uint64_t offset, uint64_t size) {
    std::ifstream file(path, std::ios::binary);
    std::string bytes(size, '\0');
    file.seekg(static_cast<std::streamoff>(offset));
    if (!file.read(bytes.data(), static_cast<std::streamsize>(size)))
      throw std::runtime_error(path + ": cannot read " + std::to_string(size) + " bytes at " +
                               std::to_string(offset));
    return bytes;
  };
  result.read_footer(column);
  return result;
}

ParquetTextColumn ParquetTextColumn::from_bytes(std::string bytes, const std::string& name,
                                                const std::string& column) {
  ParquetTextColumn result;
  result.name_ = name;
  result.file_size_ = bytes.size();
  result.read_ = [held = std::make_shared<const std::string>(std::move(bytes))](
                     uint64_t offset, uint64_t size) { return held->substr(offset, size); };
  result.read_footer(column);
  return result;
}

void ParquetTextColumn::read_row_group(int group, std::vector<std::string>& out,
                                       uint64_t max_bytes) const {
  const ColumnChunk& chunk = groups_.at(static_cast<size_t>(group));
  const std::string where = name_ + ": row group " + std::to_string(group);
  const std::string bytes = read_(chunk.start, chunk.size);
  const std::string_view all(bytes);
  std::optional<std::vector<std::string>> dictionary;
  uint64_t budget = max_bytes;  // PLAIN values are bounded by their pages
  size_t at = 0;
  for (int64_t seen = 0; seen < chunk.values;) {
    if (at >= all.size())
      throw std::runtime_error(where + ": its pages end after " + std::to_string(seen) + " of " +
                               std::to_string(chunk.values) + " values");
    ThriftCompactReader reader(all.substr(at), where);
    const PageHeader page = read_page_header(reader);
    at += reader.position();
    if (static_cast<uint64_t>(page.compressed) > all.size() - at)
      throw std::runtime_error(where + ": a page of " + std::to_string(page.compressed) +
                               " bytes runs past the column's");
    const std::string_view body = all.substr(at, static_cast<size_t>(page.compressed));
    at += body.size();
    if (page.type == kDictionaryPage) {
      if (dictionary) throw std::runtime_error(where + ": a second dictionary page");
      if (page.encoding != kPlain && page.encoding != kPlainDictionary)
        throw std::runtime_error(where + ": a dictionary in " + encoding_name(page.encoding));
      if (page.values > page.uncompressed / 4 + 1)
        throw std::runtime_error(where + ": a dictionary of more values than its bytes hold");
      dictionary.emplace();
      uint64_t dictionary_budget = kMaxPageBytes;  // bounded by its page
      plain_strings(uncompress(chunk.codec, body, page.uncompressed, where), page.values,
                    *dictionary, dictionary_budget, where);
      continue;
    }
    if (page.type != kDataPage && page.type != kDataPageV2) continue;  // an index page
    if (page.values > chunk.values - seen)
      throw std::runtime_error(where + ": a page of " + std::to_string(page.values) +
                               " values, more than the column's " +
                               std::to_string(chunk.values - seen) + " left");
    seen += page.values;
    std::string data;
    std::string_view values;
    int64_t count = page.values;
    if (page.type == kDataPage) {
      data = uncompress(chunk.codec, body, page.uncompressed, where);
      values = data;
      if (optional_) {  // the levels: RLE, after their 4-byte length
        if (page.level_encoding != kRle)
          throw std::runtime_error(where + ": definition levels in " +
                                   encoding_name(page.level_encoding) + "; paraplan reads RLE");
        if (values.size() < 4)
          throw std::runtime_error(where + ": a data page too short for its definition levels");
        uint32_t length = 0;
        for (int b = 0; b < 4; ++b)
          length |= static_cast<uint32_t>(static_cast<unsigned char>(values[b])) << (8 * b);
        if (length > values.size() - 4)
          throw std::runtime_error(where + ": definition levels past their page");
        count = present(values.substr(4, length), page.values, where);
        values = values.substr(4 + length);
      }
    } else {  // v2: levels uncompressed before the values
      const auto repetition = static_cast<uint64_t>(page.repetition_bytes);
      const auto definition = static_cast<uint64_t>(page.definition_bytes);
      if (repetition > body.size() || definition > body.size() - repetition ||
          static_cast<uint64_t>(page.uncompressed) < repetition + definition)
        throw std::runtime_error(where + ": a v2 page's levels run past it");
      const uint64_t levels = repetition + definition;
      if (optional_) count = present(body.substr(repetition, definition), page.values, where);
      const std::string_view rest = body.substr(static_cast<size_t>(levels));
      const uint64_t size = static_cast<uint64_t>(page.uncompressed) - levels;
      data = page.compressed_v2 ? uncompress(chunk.codec, rest, size, where)
                                : uncompress(kUncompressed, rest, size, where);
      values = data;
    }
    decode_values(page.encoding, values, count, dictionary, out, budget, where);
  }
}

}  // namespace paraplan
