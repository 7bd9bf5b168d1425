// parquet_fuzzer.cc: a Parquet file's text column (runtime/tokenizer/parquet.h),
// its footer (Thrift's compact protocol) and every row group's pages
// (RLE/bit-packed levels and indices, PLAIN and dictionary values, SNAPPY
// and ZSTD pages): accepted or refused in one printable line naming the
// file, never a crash, a hang or memory without bound; an accepted group
// gives at most its rows' values.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "runtime/tokenizer/parquet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string name = "fuzz.parquet";
  fuzz::refused_clearly(name, [&] {
    const ParquetTextColumn column = ParquetTextColumn::from_bytes(
        std::string(reinterpret_cast<const char*>(data), size), name, "text");
    for (int group = 0; group < column.row_groups(); ++group) {
      std::vector<std::string> values;
      column.read_row_group(group, values, uint64_t{64} << 20);
      if (static_cast<int64_t>(values.size()) > column.rows_in_group(group) &&
          column.rows_in_group(group) >= 0)
        fuzz::fail("a row group gave more values than its rows", std::to_string(values.size()));
    }
  });
  return 0;
}
