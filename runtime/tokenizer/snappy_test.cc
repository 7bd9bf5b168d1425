// snappy_test.cc: Snappy's raw blocks as the format describes them: literals
// (short and with their length after the tag), copies with 1-, 2- and 4-byte
// offsets, a copy overlapping what it writes; and each malformed block
// refused naming where.
#include "runtime/tokenizer/snappy.h"

#include <gtest/gtest.h>

#include <string>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (const int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST(Snappy, LiteralsAndCopiesOfEachOffsetSize) {
  // 8 bytes: the literal "ab" ((2-1) << 2), then a 1-byte-offset copy of 6
  // from 2 back, overlapping its own output: "abababab".
  EXPECT_EQ(snappy_uncompress(bytes({8, 1 << 2, 'a', 'b', 1 | ((6 - 4) << 2), 2}), 100, "x"),
            "abababab");
  // A 2-byte-offset copy (tag 2) and a 4-byte-offset one (tag 3), 3 bytes each.
  EXPECT_EQ(snappy_uncompress(
                bytes({9, 2 << 2, 'x', 'y', 'z', 2 | (2 << 2), 3, 0, 3 | (2 << 2), 6, 0, 0, 0}),
                100, "x"),
            "xyzxyzxyz");
  // A literal of 100 bytes: length - 1 in the byte after tag 60 << 2.
  const std::string hundred(100, 'q');
  EXPECT_EQ(snappy_uncompress(bytes({100, 60 << 2, 99}) + hundred, 1000, "x"), hundred);
}

TEST(Snappy, MalformedBlocksAreRefused) {
  EXPECT_TRUE(contains(error_of([] {
                         snappy_uncompress(bytes({5, 1 << 2, 'a'}), 100, "p.parquet");
                       }),
                       "p.parquet: Snappy block: a literal of 2 bytes runs past its end"));
  EXPECT_TRUE(contains(error_of([] {
                         snappy_uncompress(bytes({8, 1 | (4 << 2), 1}), 100, "p");
                       }),
                       "a copy reaches 1 bytes back, before the start"));
  EXPECT_TRUE(contains(error_of([] {
                         snappy_uncompress(bytes({3, 0, 'a'}), 100, "p");
                       }),
                       "it decompresses to 1 bytes, not its stated 3"));
  EXPECT_TRUE(contains(error_of([] {
                         snappy_uncompress(bytes({0x80, 0x80, 0x80, 0x80, 0x04}), 100, "p");
                       }),
                       "its stated length, 1073741824 bytes, is above 100"));
  EXPECT_TRUE(contains(error_of([] {
                         snappy_uncompress(bytes({1, 1 << 2, 'a', 'b'}), 100, "p");
                       }),
                       "it decompresses past its stated length"));
}

}  // namespace
}  // namespace paraplan
