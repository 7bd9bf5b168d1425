// hellaswag_test.cc: HellaSwag's .jsonl rendered as llm.c renders it, through
// a tokenizer and byte-level, and its errors naming the line and the field.
#include "runtime/tokenizer/hellaswag.h"

#include <gtest/gtest.h>

#include "runtime/testing/test_temp_dir.h"
#include "runtime/tokenizer/test_tokenizer.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

constexpr const char* kLine =
    R"({"ind": 24, "activity_label": "Roof shingle removal", "ctx": "A man is on a roof. he",)"
    R"( "split": "val", "label": 1, "endings": ["is using wrap.", "starts pulling up roofing."]})";

TEST(HellaSwagTest, RendersAsLlmcWithATokenizer) {
  TempDir dir;
  write_bytes(dir / "tokenizer.json", testing::tokenizer_json({{" ", "i"}, {" i", "s"}}).dump());
  const BpeTokenizer tokenizer = BpeTokenizer::from_file(dir / "tokenizer.json");
  write_bytes(dir / "hellaswag_val.jsonl", std::string(kLine) + "\n\n" + kLine + "\n");
  const std::vector<MultipleChoiceExample> examples =
      read_multiple_choice_set(dir / "hellaswag_val.jsonl", &tokenizer);
  ASSERT_EQ(examples.size(), 2u);  // the blank line skipped
  EXPECT_EQ(examples[0].label, 1);
  EXPECT_EQ(examples[0].context, tokenizer.encode("A man is on a roof. he"));
  ASSERT_EQ(examples[0].completions.size(), 2u);
  // The space before each ending: " is" is one token.
  EXPECT_EQ(examples[0].completions[0], tokenizer.encode(" is using wrap."));
  EXPECT_EQ(examples[0].completions[0][0], 257);
  EXPECT_EQ(examples[0].completions[1], tokenizer.encode(" starts pulling up roofing."));
}

// Through a SentencePiece-style tokenizer each ending continues the context:
// "▁is", not "▁▁is", so the context's tokens and an ending's are the whole
// text's, as lm-evaluation-harness splits them.
TEST(HellaSwagTest, EndingsContinueTheContextWithASentencePieceTokenizer) {
  TempDir dir;
  const std::string space = "\xE2\x96\x81";
  write_bytes(
      dir / "tokenizer.json",
      testing::sentencepiece_json({space, "i", "s", "a"}, {{space, "i"}, {space + "i", "s"}})
          .dump());
  const BpeTokenizer tokenizer = BpeTokenizer::from_file(dir / "tokenizer.json");
  write_bytes(dir / "hellaswag_val.jsonl", std::string(kLine) + "\n");
  const std::vector<MultipleChoiceExample> examples =
      read_multiple_choice_set(dir / "hellaswag_val.jsonl", &tokenizer);
  ASSERT_EQ(examples.size(), 1u);
  EXPECT_EQ(examples[0].completions[0][0], 264);  // ▁is (▁ 259, i 260, s 261, a 262, ▁i 263)
  for (const auto& [ending, tokens] :
       {std::pair{"is using wrap.", examples[0].completions[0]},
        std::pair{"starts pulling up roofing.", examples[0].completions[1]}}) {
    std::vector<int32_t> joined = examples[0].context;
    joined.insert(joined.end(), tokens.begin(), tokens.end());
    EXPECT_EQ(joined, tokenizer.encode(std::string("A man is on a roof. he ") + ending)) << ending;
  }
}

TEST(HellaSwagTest, RendersBytesForByteLevelModels) {
  TempDir dir;
  write_bytes(dir / "hs.jsonl", R"({"ctx": "ab", "endings": ["c", "de"], "label": "0"})"
                                "\n");
  const std::vector<MultipleChoiceExample> examples =
      read_hellaswag_jsonl(dir / "hs.jsonl", nullptr);
  ASSERT_EQ(examples.size(), 1u);
  EXPECT_EQ(examples[0].label, 0);  // a string label, as the Hugging Face dataset writes it
  EXPECT_EQ(examples[0].context, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(examples[0].completions[0], (std::vector<int32_t>{' ', 'c'}));
  EXPECT_EQ(examples[0].completions[1], (std::vector<int32_t>{' ', 'd', 'e'}));
}

TEST(HellaSwagTest, RefusesBadLinesNamingTheLineAndField) {
  TempDir dir;
  const auto error_for = [&](const std::string& line) {
    write_bytes(dir / "hs.jsonl", std::string(kLine) + "\n" + line + "\n");
    return error_of([&] { read_hellaswag_jsonl(dir / "hs.jsonl", nullptr); });
  };
  EXPECT_TRUE(contains(error_for("{not json"), "hs.jsonl line 2: not JSON"));
  EXPECT_TRUE(contains(error_for(R"({"endings": ["a", "b"], "label": 0})"),
                       "line 2: expected an object whose \"ctx\" is the context's text"));
  EXPECT_TRUE(contains(error_for(R"({"ctx": "a", "endings": ["a", "b"]})"),
                       "line 2: no \"label\" (the test split's labels are not public"));
  EXPECT_TRUE(contains(error_for(R"({"ctx": "a", "endings": ["a", "b"], "label": 2})"),
                       "line 2: the label is 2; give the right completion's index, 0..1"));
  EXPECT_TRUE(contains(error_for(R"({"ctx": "a", "endings": ["a", 3], "label": 0})"),
                       "line 2: \"endings\" holds 3, not a text"));
  EXPECT_TRUE(contains(error_for(R"({"ctx": "a", "endings": "a", "label": 0})"),
                       "line 2: expected \"endings\", an array"));
  EXPECT_TRUE(contains(error_for(R"({"ctx": "", "endings": ["a", "b"], "label": 0})"),
                       "line 2: the context is empty"));
  EXPECT_TRUE(contains(error_for(R"({"ctx": "a", "endings": ["a", "b"], "label": "x"})"),
                       "line 2: \"label\" is \"x\""));
  // Not narrowed into range: 2^32 + 1 is not 1.
  EXPECT_TRUE(contains(error_for(R"({"ctx": "a", "endings": ["a", "b"], "label": 4294967297})"),
                       "line 2: \"label\" is 4294967297"));
  EXPECT_TRUE(contains(error_for(R"({"ctx": "a", "endings": ["a", "b"], "label": -1})"),
                       "line 2: \"label\" is -1"));
  // Counted before any ending is encoded.
  std::string many = R"({"ctx": "a", "label": 0, "endings": [)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"x\"";
  EXPECT_TRUE(contains(error_for(many + "]}"),
                       "line 2: 65 endings; a multiple-choice example has 2 to 64"));
  EXPECT_TRUE(contains(error_for(R"({"ctx": "a", "endings": ["a"], "label": 0})"),
                       "line 2: 1 endings; a multiple-choice example has 2 to 64"));
  write_bytes(dir / "empty.jsonl", "\n");
  EXPECT_TRUE(contains(error_of([&] { read_hellaswag_jsonl(dir / "empty.jsonl", nullptr); }),
                       "empty.jsonl: no examples"));
}

}  // namespace
}  // namespace paraplan
