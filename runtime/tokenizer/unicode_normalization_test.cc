// unicode_normalization_test.cc: NFC on the cases its algorithm has to get
// right; each expected string is Python's unicodedata.normalize("NFC", ...).
// tests/tokenizer_check.py compares whole corpora with Hugging Face's NFC.
#include "runtime/tokenizer/unicode_normalization.h"

#include <gtest/gtest.h>

namespace paraplan {
namespace {

TEST(Nfc, ComposesOrdersAndLeavesWhatIsAlreadyComposed) {
  EXPECT_EQ(to_nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(to_nfc("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(to_nfc("caf\u00e9"), "caf\u00e9");
  // Marks out of canonical order: dot below (220) sorts before circumflex
  // (230), and both compose onto the a.
  EXPECT_EQ(to_nfc("a\u0302\u0323"), "\u1ead");
  // A mark of the same class between blocks the second: U+0301 after U+0300.
  EXPECT_EQ(to_nfc("a\u0300\u0301"), "\u00e0\u0301");
  // A singleton decomposes and composes to the letter: the Angstrom sign.
  EXPECT_EQ(to_nfc("\u212b"), "\u00c5");
  // Composition exclusions stay apart: U+0958 (Devanagari qa).
  EXPECT_EQ(to_nfc("\u0958"), "\u0915\u093c");
  // Hangul: jamo L V T compose; a syllable stays.
  EXPECT_EQ(to_nfc("\u1100\u1161\u11a8"), "\uac01");
  EXPECT_EQ(to_nfc("\uac01"), "\uac01");
  // A leading mark composes with nothing.
  EXPECT_EQ(to_nfc("\u0301e"), "\u0301e");
  // Leading marks are still ordered: dot below (220) first.
  EXPECT_EQ(to_nfc("\u0301\u0302\u0323e"), "\u0323\u0301\u0302e");
  // Two starters compose (Oriya), and a syllable does not take U+11A7 (the T
  // base is not a trailing consonant).
  EXPECT_EQ(to_nfc("\u0b47\u0b3e"), "\u0b4b");
  EXPECT_EQ(to_nfc("\u1100\u1161\u11a7"), "\uac00\u11a7");
  // A mark of a lower class first does not block: cedilla (202) then acute.
  EXPECT_EQ(to_nfc("e\u0301\u0327"), "\u0229\u0301");
  // Composition after an ASCII stretch and inside mixed text.
  EXPECT_EQ(to_nfc("x = cafe\u0301; y = \u00e9"), "x = caf\u00e9; y = \u00e9");
}

TEST(Nfc, BytesThatAreNotUtf8PassThroughAndComposeWithNothing) {
  EXPECT_EQ(to_nfc("e\xff\u0301"), "e\xff\u0301");
  EXPECT_EQ(to_nfc("\xc3("), "\xc3(");
}

}  // namespace
}  // namespace paraplan
