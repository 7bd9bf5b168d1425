// snappy.h: Snappy's raw block format decompressed (Parquet's SNAPPY codec,
// pyarrow's and datatrove's default for Hugging Face datasets): a varint of
// the uncompressed length, then literals and back-references. Written from
// the format description (github.com/google/snappy, format_description.txt).
#pragma once

#include <string>
#include <string_view>

namespace paraplan {

// The block's bytes; throws std::runtime_error naming `where` when the block
// is malformed or decompresses to other than its stated length (at most
// `max_bytes`).
std::string snappy_uncompress(std::string_view block, size_t max_bytes, const std::string& where);

}  // namespace paraplan
