// parquet_footer.cc: a Parquet file's footer (parquet.h): "PAR1" at both
// ends, the FileMetaData before the last 8 bytes (its schema, row groups and
// their column chunks), and the text column found in it.
#include <algorithm>
#include <stdexcept>

#include "common/printable_text.h"
#include "runtime/tokenizer/parquet.h"
#include "runtime/tokenizer/parquet_format.h"
#include "runtime/tokenizer/thrift_compact.h"

namespace paraplan {

namespace {

using Type = ThriftCompactReader::Type;
using namespace parquet;

struct SchemaElement {
  std::string name;
  int64_t type = -1, repetition = kRequired, children = 0;
};

struct ChunkMetadata {
  std::vector<std::string> path;
  std::string file_path;  // set: the chunk is in another file
  int64_t type = -1, codec = 0, values = 0, size = 0, data_offset = -1, dictionary_offset = -1;
};

struct RowGroup {
  int64_t rows = 0;
  std::vector<ChunkMetadata> chunks;
};

SchemaElement read_schema_element(ThriftCompactReader& reader) {
  SchemaElement element;
  reader.read_struct([&](int64_t id, int type) {
    if (id == 1 && type == Type::kI32)
      element.type = reader.integer();
    else if (id == 3 && type == Type::kI32)
      element.repetition = reader.integer();
    else if (id == 4 && type == Type::kBinary)
      element.name = std::string(reader.binary());
    else if (id == 5 && type == Type::kI32)
      element.children = reader.integer();
    else
      reader.skip(type);
  });
  return element;
}

ChunkMetadata read_column_chunk(ThriftCompactReader& reader) {
  ChunkMetadata chunk;
  reader.read_struct([&](int64_t id, int type) {
    if (id == 1 && type == Type::kBinary) {
      chunk.file_path = std::string(reader.binary());
    } else if (id == 3 && type == Type::kStruct) {
      reader.read_struct([&](int64_t field, int t) {
        if (field == 1 && t == Type::kI32)
          chunk.type = reader.integer();
        else if (field == 3 && t == Type::kList)
          reader.read_list([&](int element) {
            if (element != Type::kBinary) reader.fail("a column path that is not strings");
            chunk.path.emplace_back(reader.binary());
          });
        else if (field == 4 && t == Type::kI32)
          chunk.codec = reader.integer();
        else if (field == 5 && t == Type::kI64)
          chunk.values = reader.integer();
        else if (field == 7 && t == Type::kI64)
          chunk.size = reader.integer();
        else if (field == 9 && t == Type::kI64)
          chunk.data_offset = reader.integer();
        else if (field == 11 && t == Type::kI64)
          chunk.dictionary_offset = reader.integer();
        else
          reader.skip(t);
      });
    } else {
      reader.skip(type);
    }
  });
  return chunk;
}

RowGroup read_row_group_metadata(ThriftCompactReader& reader) {
  RowGroup group;
  reader.read_struct([&](int64_t id, int type) {
    if (id == 1 && type == Type::kList)
      reader.read_list([&](int element) {
        if (element != Type::kStruct) reader.fail("column chunks that are not structs");
        group.chunks.push_back(read_column_chunk(reader));
      });
    else if (id == 3 && type == Type::kI64)
      group.rows = reader.integer();
    else
      reader.skip(type);
  });
  return group;
}

// The top-level element named `column` (its index in `schema`), or -1; the
// others' names in `names`. The schema is the tree in depth-first order,
// each element followed by its num_children children.
int64_t find_top_level(const std::vector<SchemaElement>& schema, const std::string& column,
                       std::string& names) {
  int64_t found = -1;
  size_t at = 1;
  const int64_t top = schema.empty() ? 0 : schema[0].children;
  for (int64_t child = 0; child < top && at < schema.size(); ++child) {
    if (schema[at].name == column) found = static_cast<int64_t>(at);
    names += (names.empty() ? "\"" : ", \"") + printable_text(schema[at].name) + "\"";
    // Skip the child's subtree.
    int64_t pending = 1;
    while (pending > 0 && at < schema.size()) {
      pending += std::max<int64_t>(schema[at].children, 0) - 1;
      ++at;
    }
  }
  return found;
}

// The text column's chunk of a row group, checked to be one paraplan reads,
// one value a row, within the file's bytes before its footer.
ParquetTextColumn::ColumnChunk column_chunk_of(const RowGroup& group, const std::string& column,
                                               const std::string& where, uint64_t footer_start) {
  const auto chunk = std::find_if(
      group.chunks.begin(), group.chunks.end(),
      [&](const ChunkMetadata& c) { return c.path == std::vector<std::string>{column}; });
  if (chunk == group.chunks.end())
    throw std::runtime_error(where + " has no chunk of column \"" + printable_text(column) + "\"");
  if (!chunk->file_path.empty())
    throw std::runtime_error(where + ": its column is in another file (\"" +
                             printable_text(chunk->file_path) +
                             "\"), which paraplan does not follow");
  if (chunk->codec != kUncompressed && chunk->codec != kSnappy && chunk->codec != kZstd)
    throw std::runtime_error(where + ": compressed with " +
                             codec_name(static_cast<int>(chunk->codec)) +
                             "; paraplan reads UNCOMPRESSED, SNAPPY (pyarrow's default) and "
                             "ZSTD: rewrite it with pyarrow's pq.write_table(table, path)");
  const int64_t start =
      chunk->dictionary_offset > 0 && chunk->dictionary_offset < chunk->data_offset
          ? chunk->dictionary_offset
          : chunk->data_offset;
  if (start < 4 || chunk->size < 0 || chunk->values < 0 || group.rows < 0 ||
      static_cast<uint64_t>(start) > footer_start ||
      static_cast<uint64_t>(chunk->size) > footer_start - static_cast<uint64_t>(start))
    throw std::runtime_error(where + ": its column's pages (" + std::to_string(chunk->size) +
                             " bytes at " + std::to_string(start) + ") are not in the file");
  if (chunk->values != group.rows)  // one value (or null) a row: the column is flat
    throw std::runtime_error(where + ": its column has " + std::to_string(chunk->values) +
                             " values for " + std::to_string(group.rows) + " rows");
  return {.rows = group.rows,
          .values = chunk->values,
          .codec = static_cast<int>(chunk->codec),
          .start = static_cast<uint64_t>(start),
          .size = static_cast<uint64_t>(chunk->size)};
}

}  // namespace

void ParquetTextColumn::read_footer(const std::string& column) {
  if (file_size_ < 12 || read_(0, 4) != "PAR1")
    throw std::runtime_error(name_ + ": not a Parquet file (it does not start with PAR1)");
  const std::string tail = read_(file_size_ - 8, 8);
  if (tail.substr(4) != "PAR1")
    throw std::runtime_error(name_ +
                             ": not a whole Parquet file (it does not end with PAR1; "
                             "a download cut short?)");
  uint64_t length = 0;
  for (int b = 0; b < 4; ++b)
    length |= static_cast<uint64_t>(static_cast<unsigned char>(tail[b])) << (8 * b);
  if (length > file_size_ - 12)
    throw std::runtime_error(name_ + ": its footer of " + std::to_string(length) +
                             " bytes is longer than the file");
  const uint64_t footer_start = file_size_ - 8 - length;
  const std::string metadata = read_(footer_start, length);
  const std::string where = name_ + " (footer)";
  ThriftCompactReader reader(metadata, where);
  std::vector<SchemaElement> schema;
  std::vector<RowGroup> groups;
  reader.read_struct([&](int64_t id, int type) {
    if (id == 2 && type == Type::kList)
      reader.read_list([&](int element) {
        if (element != Type::kStruct) reader.fail("a schema that is not structs");
        schema.push_back(read_schema_element(reader));
      });
    else if (id == 3 && type == Type::kI64)
      rows_ = reader.integer();
    else if (id == 4 && type == Type::kList)
      reader.read_list([&](int element) {
        if (element != Type::kStruct) reader.fail("row groups that are not structs");
        groups.push_back(read_row_group_metadata(reader));
      });
    else
      reader.skip(type);
  });
  int64_t group_rows = 0;
  for (const RowGroup& group : groups) {
    if (group.rows < 0 || group.rows > rows_ - group_rows)
      throw std::runtime_error(name_ + ": its row groups' rows pass its " + std::to_string(rows_));
    group_rows += group.rows;
  }
  if (group_rows != rows_)
    throw std::runtime_error(name_ + ": its row groups hold " + std::to_string(group_rows) +
                             " rows of its " + std::to_string(rows_));
  for (const SchemaElement& element : schema)
    if (element.children < 0 || element.children > static_cast<int64_t>(schema.size()))
      throw std::runtime_error(where + ": an element of " + std::to_string(element.children) +
                               " children in a schema of " + std::to_string(schema.size()));
  std::string names;
  const int64_t index = find_top_level(schema, column, names);
  if (index < 0)
    throw std::runtime_error(name_ + ": no column \"" + printable_text(column) +
                             "\" (--text-field); its columns are " +
                             (names.empty() ? std::string("none") : names));
  const SchemaElement& leaf = schema[static_cast<size_t>(index)];
  if (leaf.children != 0 || leaf.type != kByteArray ||
      (leaf.repetition != kRequired && leaf.repetition != kOptional))
    throw std::runtime_error(name_ + ": column \"" + printable_text(column) +
                             "\" is not a string of each row (" +
                             (leaf.children != 0        ? "a group"
                              : leaf.type != kByteArray ? "not BYTE_ARRAY"
                                                        : "repeated") +
                             "); --text-field names the documents' text");
  optional_ = leaf.repetition == kOptional;
  for (size_t g = 0; g < groups.size(); ++g)
    groups_.push_back(column_chunk_of(groups[g], column, name_ + ": row group " + std::to_string(g),
                                      footer_start));
}

}  // namespace paraplan
