// parquet_delta.h: Parquet's DELTA encodings of string values (parquet.h),
// as Spark, parquet-mr and pyarrow's column_encoding write them:
// DELTA_LENGTH_BYTE_ARRAY (the lengths DELTA_BINARY_PACKED, then the bytes)
// and DELTA_BYTE_ARRAY (each value the previous one's prefix of a
// DELTA_BINARY_PACKED length, then a DELTA_LENGTH_BYTE_ARRAY suffix). Every
// read is bounded by the page; a malformed one throws naming `where`.
// Internal to runtime/tokenizer/.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace paraplan::parquet {

// Calls emit(value) for each of the page's `count` values.
void decode_delta_length_byte_array(std::string_view data, int64_t count, const std::string& where,
                                    const std::function<void(std::string_view)>& emit);
void decode_delta_byte_array(std::string_view data, int64_t count, const std::string& where,
                             const std::function<void(std::string_view)>& emit);

}  // namespace paraplan::parquet
