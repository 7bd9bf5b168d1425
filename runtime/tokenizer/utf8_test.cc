// utf8_test.cc: decoding and the display form (U+FFFD per maximal invalid
// subpart, as Python's errors="replace" gives: the expected strings below are
// Python's).
#include "runtime/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace paraplan {
namespace {

TEST(Utf8, DecodesEachLengthAndRefusesOverlongFormsAndSurrogates) {
  size_t length = 0;
  auto decode = [&](const std::string& bytes) {
    return decode_utf8(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), length);
  };
  EXPECT_EQ(decode("A"), U'A');
  EXPECT_EQ(decode("\xC3\xA9"), U'\u00E9');
  EXPECT_EQ(length, 2u);
  EXPECT_EQ(decode("\xE6\x9D\xB1"), U'\u6771');
  EXPECT_EQ(decode("\xF0\x9F\x99\x82"), U'\U0001F642');
  EXPECT_EQ(length, 4u);
  EXPECT_EQ(decode("\xC0\xAF"), kInvalidUtf8);  // overlong '/'
  EXPECT_EQ(length, 1u);
  EXPECT_EQ(decode("\xED\xA0\x80"), kInvalidUtf8);  // a surrogate
  EXPECT_EQ(length, 1u);
  EXPECT_EQ(decode("\xE6\x9D"), kInvalidUtf8);  // cut short: both bytes are one subpart
  EXPECT_EQ(length, 2u);
}

TEST(Utf8, EachMaximalInvalidSubpartBecomesOneReplacementCharacter) {
  // Python: b"...".decode("utf-8", errors="replace").encode()
  EXPECT_EQ(to_valid_utf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(to_valid_utf8("a\xAC"
                          "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(to_valid_utf8("\xE6\x9D"
                          "x"),
            "\xEF\xBF\xBD"
            "x");
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\x99"), "\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(to_valid_utf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace paraplan
