// parquet.h: one text column of an Apache Parquet file, the format Hugging
// Face datasets (FineWeb, FineWeb-Edu, and every dataset's parquet export)
// and datatrove write, so that `paraplan tokenize --input data/*.parquet`
// reads them as they are downloaded. Read a row group at a time (a FineWeb
// shard is about 2 GB): the footer's metadata (Thrift's compact protocol),
// then the column's pages: data pages v1 and v2, PLAIN, dictionary
// (PLAIN_DICTIONARY, RLE_DICTIONARY) and DELTA (DELTA_LENGTH_BYTE_ARRAY,
// DELTA_BYTE_ARRAY; parquet_delta.h) encodings, definition levels of an
// optional column (a null row is no document), codecs UNCOMPRESSED, SNAPPY
// (snappy.h) and ZSTD (libzstd, opened on first use). Written from the
// format's specification (github.com/apache/parquet-format); checked
// against pyarrow (tests/parquet_check.py). Anything else (a nested or
// repeated column, BYTE_STREAM_SPLIT, other codecs) is refused naming the file,
// the field and what paraplan reads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace paraplan {

class ParquetTextColumn {
 public:
  // Reads `path`'s footer and finds `column`, a top-level string column
  // ("text" in FineWeb). Throws std::runtime_error naming the file.
  static ParquetTextColumn open(const std::string& path, const std::string& column);
  // The same over a file's bytes (tests, fuzzing); `name` names it.
  static ParquetTextColumn from_bytes(std::string bytes, const std::string& name,
                                      const std::string& column);

  int row_groups() const { return static_cast<int>(groups_.size()); }
  int64_t rows() const { return rows_; }
  int64_t rows_in_group(int group) const { return groups_[group].rows; }
  uint64_t file_size() const { return file_size_; }
  // Appends the values of row group `group` (nulls left out), in row order;
  // throws where they would hold more than `max_bytes` (each value's bytes
  // and its string; a dictionary repeats a value without bound).
  void read_row_group(int group, std::vector<std::string>& out,
                      uint64_t max_bytes = uint64_t{1} << 34) const;

  struct ColumnChunk {
    int64_t rows = 0;
    int64_t values = 0;  // the column's values, nulls included
    int codec = 0;
    uint64_t start = 0, size = 0;  // its pages' bytes in the file
  };

 private:
  ParquetTextColumn() = default;
  void read_footer(const std::string& column);

  std::string name_;
  uint64_t file_size_ = 0;
  // Bytes [offset, offset + size) of the file.
  std::function<std::string(uint64_t offset, uint64_t size)> read_;
  std::vector<ColumnChunk> groups_;
  int64_t rows_ = 0;
  bool optional_ = false;  // definition levels precede the values
};

}  // namespace paraplan
