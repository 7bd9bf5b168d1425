// parquet_delta.cc: Parquet's DELTA encodings of strings (parquet_delta.h),
// written from the format's Encodings.md.
#include "runtime/tokenizer/parquet_delta.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "runtime/tokenizer/parquet_format.h"

namespace paraplan::parquet {

namespace {

[[noreturn]] void delta_failure(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": DELTA_BINARY_PACKED values: " + what);
}

// DELTA_BINARY_PACKED: a header (values per block, miniblocks per block, the
// count, the first value), then blocks of a minimum delta, each miniblock's
// bit width, and the miniblocks' deltas bit-packed (least significant bit
// first). Appends `count` values to `values`; returns the bytes read.
size_t delta_binary_packed(std::string_view data, int64_t count, std::vector<int64_t>& values,
                           const std::string& where) {
  size_t at = 0;
  auto varint = [&] {
    const std::optional<uint64_t> value = read_varint(data, at);
    if (!value) delta_failure(where, "a varint past their end, or longer than 10 bytes");
    return *value;
  };
  auto zigzag = [&] {
    const uint64_t value = varint();
    return static_cast<int64_t>(value >> 1) ^ -static_cast<int64_t>(value & 1);
  };
  const uint64_t block = varint(), miniblocks = varint(), total = varint();
  const int64_t first = zigzag();
  if (block == 0 || block % 128 != 0 || block > (1u << 20) || miniblocks == 0 ||
      block % miniblocks != 0 || (block / miniblocks) % 32 != 0)
    delta_failure(where, "blocks of " + std::to_string(block) + " values in " +
                             std::to_string(miniblocks) + " miniblocks");
  if (total != static_cast<uint64_t>(count))
    delta_failure(where,
                  std::to_string(total) + " values where the page has " + std::to_string(count));
  if (total == 0) return at;
  const uint64_t per_miniblock = block / miniblocks;
  values.reserve(values.size() + std::min<uint64_t>(total, data.size() * 8 + 1));
  uint64_t last = static_cast<uint64_t>(first);  // wraps, as the format's arithmetic does
  values.push_back(first);
  for (uint64_t done = 1; done < total;) {
    const uint64_t min_delta = static_cast<uint64_t>(zigzag());
    if (miniblocks > data.size() - at) delta_failure(where, "bit widths past their end");
    const std::string_view widths = data.substr(at, miniblocks);
    at += miniblocks;
    for (uint64_t m = 0; m < miniblocks && done < total; ++m) {
      const int width = static_cast<unsigned char>(widths[m]);
      if (width > 64) delta_failure(where, "a bit width of " + std::to_string(width));
      const uint64_t bytes = per_miniblock * static_cast<uint64_t>(width) / 8;
      if (bytes > data.size() - at) delta_failure(where, "a miniblock past their end");
      for (uint64_t j = 0; j < per_miniblock && done < total; ++j, ++done) {
        last += min_delta + unpack_bits(data.data() + at, j, width);
        values.push_back(static_cast<int64_t>(last));
      }
      at += bytes;  // a miniblock is whole, the last one padded
    }
  }
  return at;
}

// The lengths, then the bytes; returns the bytes read.
size_t delta_lengths_then_bytes(std::string_view data, int64_t count, const std::string& where,
                                const std::function<void(std::string_view)>& emit) {
  std::vector<int64_t> lengths;
  size_t at = delta_binary_packed(data, count, lengths, where);
  for (const int64_t length : lengths) {
    if (length < 0 || static_cast<uint64_t>(length) > data.size() - at)
      throw std::runtime_error(where + ": a DELTA_LENGTH_BYTE_ARRAY value of " +
                               std::to_string(length) + " bytes runs past its page");
    emit(data.substr(at, static_cast<size_t>(length)));
    at += static_cast<size_t>(length);
  }
  return at;
}

}  // namespace

void decode_delta_length_byte_array(std::string_view data, int64_t count, const std::string& where,
                                    const std::function<void(std::string_view)>& emit) {
  delta_lengths_then_bytes(data, count, where, emit);
}

void decode_delta_byte_array(std::string_view data, int64_t count, const std::string& where,
                             const std::function<void(std::string_view)>& emit) {
  std::vector<int64_t> prefixes;
  const size_t at = delta_binary_packed(data, count, prefixes, where);
  std::string previous, value;
  size_t index = 0;
  delta_lengths_then_bytes(data.substr(at), count, where, [&](std::string_view suffix) {
    const int64_t prefix = prefixes[index++];
    if (prefix < 0 || static_cast<uint64_t>(prefix) > previous.size())
      throw std::runtime_error(where + ": a DELTA_BYTE_ARRAY prefix of " + std::to_string(prefix) +
                               " bytes of a value of " + std::to_string(previous.size()));
    value.assign(previous, 0, static_cast<size_t>(prefix));
    value.append(suffix);
    emit(value);
    previous.swap(value);
  });
}

}  // namespace paraplan::parquet
