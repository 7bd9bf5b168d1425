// parquet_format.h: the values of parquet.thrift's enums that paraplan's
// Parquet reader reads (parquet.cc, parquet_footer.cc), and their names for
// messages. Internal to runtime/tokenizer/.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace paraplan::parquet {

// parquet.thrift's values paraplan reads.
inline constexpr int64_t kByteArray = 6;                         // Type
inline constexpr int64_t kRequired = 0, kOptional = 1;           // FieldRepetitionType
inline constexpr int kUncompressed = 0, kSnappy = 1, kZstd = 6;  // CompressionCodec
inline constexpr int64_t kPlain = 0, kPlainDictionary = 2, kRle = 3,
                         kRleDictionary = 8;                                   // Encoding
inline constexpr int64_t kDeltaLengthByteArray = 6, kDeltaByteArray = 7;       // Encoding
inline constexpr int64_t kDataPage = 0, kDictionaryPage = 2, kDataPageV2 = 3;  // PageType
inline constexpr uint64_t kMaxPageBytes = uint64_t{1} << 28;                   // 256 MiB

// A ULEB128 varint at data[at], `at` moved past it; nullopt where the data
// ends first or it runs past 10 bytes (the caller names the failure).
inline std::optional<uint64_t> read_varint(std::string_view data, size_t& at) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64 && at < data.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(data[at++]);
    value |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return value;
  }
  return std::nullopt;
}

// The index-th value of `width` bits (at most 64) bit-packed least
// significant bit first from `bytes`, as Parquet packs levels, indices and
// deltas; the caller bounds the bytes.
inline uint64_t unpack_bits(const char* bytes, uint64_t index, int width) {
  uint64_t value = 0;
  for (int b = 0; b < width; ++b) {
    const uint64_t bit = index * static_cast<uint64_t>(width) + static_cast<uint64_t>(b);
    value |= static_cast<uint64_t>((static_cast<unsigned char>(bytes[bit / 8]) >> (bit % 8)) & 1)
             << b;
  }
  return value;
}

inline const char* codec_name(int codec) {
  static const char* const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                      "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
  return codec >= 0 && codec < 8 ? names[codec] : "an unknown codec";
}

inline const char* encoding_name(int64_t encoding) {
  static const char* const names[] = {
      "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
      "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
      "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  return encoding >= 0 && encoding < 10 ? names[encoding] : "an unknown encoding";
}

}  // namespace paraplan::parquet
