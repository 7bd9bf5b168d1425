// pretokenizer_test.cc: the three patterns' pieces on the cases where they
// differ (contractions and case, digits, a space before a word, runs of white
// space and line breaks), invalid UTF-8, and the patterns recognized by name.
// tests/tokenizer_check.py compares whole corpora with tiktoken and Hugging
// Face's tokenizers.
#include "runtime/tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include "runtime/tokenizer/unicode_properties.h"

namespace paraplan {
namespace {

std::vector<std::string> pieces(PretokenizerPattern pattern, std::string_view text) {
  PretokenizeResult result;
  pretokenize(pattern, text, result);
  return {result.pieces.begin(), result.pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(Pretokenizer, Gpt2KeepsASpaceWithTheWordAfterIt) {
  EXPECT_EQ(pieces(PretokenizerPattern::kGpt2, "Hello world  again\n\nx"),
            (Pieces{"Hello", " world", " ", " again", "\n", "\n", "x"}));
  EXPECT_EQ(pieces(PretokenizerPattern::kGpt2, "tail   "), (Pieces{"tail", "   "}));
}

TEST(Pretokenizer, ContractionsAreCaseSensitiveOnlyForGpt2) {
  EXPECT_EQ(pieces(PretokenizerPattern::kGpt2, "don't DON'T we'll"),
            (Pieces{"don", "'t", " DON", "'", "T", " we", "'ll"}));
  EXPECT_EQ(pieces(PretokenizerPattern::kLlama3, "don't DON'T we'LL"),
            (Pieces{"don", "'t", " DON", "'T", " we", "'LL"}));
  // (?i) folds U+017F (long s) to s.
  EXPECT_EQ(pieces(PretokenizerPattern::kLlama3, "it'\xC5\xBF"), (Pieces{"it", "'\xC5\xBF"}));
}

TEST(Pretokenizer, DigitsGoInRunsOfThreeForLlama3AndOneForQwen2) {
  EXPECT_EQ(pieces(PretokenizerPattern::kGpt2, "x 1234567"), (Pieces{"x", " 1234567"}));
  EXPECT_EQ(pieces(PretokenizerPattern::kLlama3, "x 1234567"),
            (Pieces{"x", " ", "123", "456", "7"}));
  EXPECT_EQ(pieces(PretokenizerPattern::kQwen2, "x 123"), (Pieces{"x", " ", "1", "2", "3"}));
}

TEST(Pretokenizer, Llama3TakesAnyNonLetterBeforeAWordAndLineBreaksWithPunctuation) {
  EXPECT_EQ(pieces(PretokenizerPattern::kLlama3, "a\tb.\n\nc  \n d"),
            (Pieces{"a", "\tb", ".\n\n", "c", "  \n", " d"}));
  EXPECT_EQ(pieces(PretokenizerPattern::kGpt2, "a\tb.\n\nc"),
            (Pieces{"a", "\t", "b", ".", "\n", "\n", "c"}));
}

TEST(Pretokenizer, UnicodeLettersNumbersAndSpaces) {
  // "café" with a combining accent: the mark is not a letter.
  EXPECT_EQ(pieces(PretokenizerPattern::kGpt2, "cafe\xCC\x81 \xE6\x9D\xB1\xE4\xBA\xAC"),
            (Pieces{"cafe", "\xCC\x81", " \xE6\x9D\xB1\xE4\xBA\xAC"}));
  // U+00A0 (no-break space) is white space, and U+0661 an Arabic-Indic digit.
  EXPECT_EQ(pieces(PretokenizerPattern::kGpt2, "a\xC2\xA0\xD9\xA1"),
            (Pieces{"a", "\xC2\xA0", "\xD9\xA1"}));
  EXPECT_TRUE(is_unicode_letter(U'\u6771'));
  EXPECT_TRUE(is_unicode_number(U'\u00BD'));
  EXPECT_TRUE(is_unicode_white_space(U'\u3000'));
  EXPECT_FALSE(is_unicode_white_space(0x1C));  // Python's isspace says yes; Unicode no
  EXPECT_FALSE(is_unicode_letter(U'\u0301'));
}

TEST(Pretokenizer, InvalidUtf8BytesAreCharactersOfTheirOwnAndKept) {
  PretokenizeResult result;
  const std::string text = "ab\xFF\xC3(\xED\xA0\x80!";  // a stray byte, a cut pair, a surrogate
  pretokenize(PretokenizerPattern::kGpt2, text, result);
  EXPECT_EQ(result.invalid_utf8_bytes, 5);
  std::string joined;
  for (const std::string_view piece : result.pieces) joined += piece;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(result.pieces.front(), "ab");
}

TEST(Pretokenizer, PatternsAreRecognizedAsWritten) {
  for (const PretokenizerPattern pattern :
       {PretokenizerPattern::kGpt2, PretokenizerPattern::kLlama3, PretokenizerPattern::kQwen2})
    EXPECT_EQ(pretokenizer_pattern_of(pretokenizer_regex(pattern)), pattern);
  EXPECT_EQ(pretokenizer_pattern_of("\\s+"), std::nullopt);
}

}  // namespace
}  // namespace paraplan
