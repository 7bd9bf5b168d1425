// multiple_choice_test.cc: llm.c's eval file byte for byte and its errors;
// examples as rows (inputs, targets, scored spans, truncation); the score.
#include "runtime/data/multiple_choice.h"

#include <gtest/gtest.h>

#include <cstring>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// An eval file built by hand from llm.c's description (data_common.py),
// independent of write_eval_file: one example, label 1, context {7, 8},
// completions {9} and {10, 11};
// <EXAMPLE_BYTES> counts all 13 uint16 values of the example.
std::string one_example_file(int32_t magic = 20240522, int32_t version = 1, int32_t count = 1) {
  const std::vector<uint16_t> example = {65535, 26, 0, 1, 2, 2, 7, 8, 1, 9, 2, 10, 11};
  std::string bytes(1024, '\0');
  const int32_t header[4] = {magic, version, count, 26};
  std::memcpy(bytes.data(), header, sizeof(header));
  std::string stream(example.size() * 2, '\0');
  std::memcpy(stream.data(), example.data(), stream.size());
  return bytes + stream;
}

MultipleChoiceExample example(int label, std::vector<int32_t> context,
                              std::vector<std::vector<int32_t>> completions) {
  return MultipleChoiceExample{label, std::move(context), std::move(completions)};
}

TEST(EvalFileTest, ReadsLlmcsLayout) {
  TempDir dir;
  write_bytes(dir / "hellaswag_val.bin", one_example_file());
  const std::vector<MultipleChoiceExample> examples = read_eval_file(dir / "hellaswag_val.bin");
  ASSERT_EQ(examples.size(), 1u);
  EXPECT_EQ(examples[0].label, 1);
  EXPECT_EQ(examples[0].context, (std::vector<int32_t>{7, 8}));
  ASSERT_EQ(examples[0].completions.size(), 2u);
  EXPECT_EQ(examples[0].completions[0], (std::vector<int32_t>{9}));
  EXPECT_EQ(examples[0].completions[1], (std::vector<int32_t>{10, 11}));
}

TEST(EvalFileTest, WritesLlmcsLayoutByteForByte) {
  TempDir dir;
  write_eval_file(dir / "out.bin", {example(1, {7, 8}, {{9}, {10, 11}})});
  EXPECT_EQ(read_bytes(dir / "out.bin"), one_example_file());
}

TEST(EvalFileTest, RoundTripsManyExamples) {
  TempDir dir;
  std::vector<MultipleChoiceExample> examples;
  for (int i = 0; i < 300; ++i)
    examples.push_back(example(i % 4, std::vector<int32_t>(1 + i % 7, i),
                               {{1}, {2, 3}, std::vector<int32_t>(1 + i % 5, 65534), {4}}));
  write_eval_file(dir / "out.bin", examples);
  const std::vector<MultipleChoiceExample> back = read_eval_file(dir / "out.bin");
  ASSERT_EQ(back.size(), examples.size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].label, examples[i].label);
    EXPECT_EQ(back[i].context, examples[i].context);
    EXPECT_EQ(back[i].completions, examples[i].completions);
  }
}

TEST(EvalFileTest, RefusesWhatDoesNotFitTheFormat) {
  TempDir dir;
  EXPECT_TRUE(contains(error_of([&] {
                         write_eval_file(dir / "a.bin", {example(0, {70000}, {{1}, {2}})});
                       }),
                       "token 70000 does not fit llm.c's eval file"));
  EXPECT_TRUE(contains(error_of([&] {
                         write_eval_file(dir / "a.bin", {example(0, {-3}, {{1}, {2}})});
                       }),
                       "example 0: token -3 is negative"));
  EXPECT_TRUE(contains(error_of([&] {
                         write_eval_file(dir / "a.bin", {example(2, {1}, {{1}, {2}})});
                       }),
                       "the label is 2; give the right completion's index, 0..1"));
  EXPECT_FALSE(std::filesystem::exists(dir / "a.bin"));
}

TEST(EvalFileTest, RefusesABadFileNamingTheField) {
  TempDir dir;
  const std::string path = dir / "bad.bin";
  const auto error_for = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    return error_of([&] { read_eval_file(path); });
  };
  EXPECT_TRUE(contains(error_for(one_example_file(20240520)),
                       "header[0] (magic) is 20240520, not 20240522 (llm.c's eval file; this is "
                       "a token shard, for --data or --val-data)"));
  EXPECT_TRUE(contains(error_for(one_example_file(20240522, 2)), "header[1] (version) is 2"));
  // <EXAMPLE_INDEX> is a uint16: example 65536 would be numbered 0.
  EXPECT_TRUE(contains(error_for(one_example_file(20240522, 1, 65536)),
                       "header[2] (examples) is 65536; an eval file holds 1 to 65535 examples"));
  EXPECT_TRUE(contains(error_for(one_example_file(20240522, 1, 2)),
                       "example 1: the file ends (header[2] says 2 examples)"));
  EXPECT_TRUE(contains(error_for(one_example_file() + "xx"), "2 bytes follow the last"));
  EXPECT_TRUE(contains(error_for(std::string(100, 'x')), "shorter than llm.c's eval file header"));
  std::string bytes = one_example_file();
  bytes[1024] = 0;  // the delimiter
  EXPECT_TRUE(contains(error_for(bytes), "example 0: <START_EXAMPLE> is 65280, not 65535"));
  bytes = one_example_file();
  bytes[1024 + 4] = 3;  // the index
  EXPECT_TRUE(contains(error_for(bytes), "example 0: <EXAMPLE_INDEX> is 3"));
  bytes = one_example_file();
  bytes[1024 + 6] = 5;  // the label
  EXPECT_TRUE(contains(error_for(bytes), "example 0: the label is 5"));
  bytes = one_example_file();
  bytes[1024 + 8] = 3;  // three completions: the fields run past the example
  EXPECT_TRUE(contains(error_for(bytes), "a completion: past the end of the example's"));
  bytes = one_example_file();
  bytes[12] = 20;  // header[3]: the longest example, below this one's 26 bytes
  EXPECT_TRUE(contains(error_for(bytes), "<EXAMPLE_BYTES> 26 is invalid"));
  EXPECT_TRUE(contains(error_of([&] { read_eval_file(dir / "missing.bin"); }), "missing.bin"));
}

TEST(MultipleChoiceRowsTest, LaysOutRowsTargetsAndScoredSpans) {
  const MultipleChoiceRows rows({example(1, {7, 8}, {{9}, {10, 11}})}, 6, "set");
  ASSERT_EQ(rows.num_rows(), 2);
  std::vector<int32_t> inputs(3 * 6), targets(3 * 6);
  rows.load(0, 3, inputs.data(), targets.data());  // row 2 is past the end: zeros
  EXPECT_EQ(inputs, (std::vector<int32_t>{7, 8, 9, 0, 0, 0, 7, 8, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(targets,
            (std::vector<int32_t>{8, 9, 0, 0, 0, 0, 8, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  // The context's last token predicts the completion's first.
  EXPECT_EQ(rows.scored_span(0).begin, 1);
  EXPECT_EQ(rows.scored_span(0).end, 2);
  EXPECT_EQ(rows.scored_span(1).begin, 1);
  EXPECT_EQ(rows.scored_span(1).end, 3);
  EXPECT_EQ(rows.truncated_examples(), 0);
}

TEST(MultipleChoiceRowsTest, CutsLongContextsFromTheLeft) {
  // seq_len 4: the longest completion (3 tokens) leaves room for 2 context
  // tokens (the completion's last token is a target, not an input).
  const MultipleChoiceRows rows({example(0, {1, 2, 3, 4, 5}, {{6, 7, 8}, {9}})}, 4, "set");
  EXPECT_EQ(rows.truncated_examples(), 1);
  std::vector<int32_t> inputs(8), targets(8);
  rows.load(0, 2, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<int32_t>{4, 5, 6, 7, 4, 5, 9, 0}));
  EXPECT_EQ(targets, (std::vector<int32_t>{5, 6, 7, 8, 5, 9, 0, 0}));
  EXPECT_EQ(rows.scored_span(0).begin, 1);
  EXPECT_EQ(rows.scored_span(0).end, 4);
  EXPECT_TRUE(
      contains(error_of([] {
                 MultipleChoiceRows({example(0, {1}, {{6, 7, 8, 9, 10}, {9}})}, 4, "hs.bin");
               }),
               "hs.bin: example 0: a completion of 5 tokens does not fit the model's seq_len 4"));
}

TEST(MultipleChoiceRowsTest, ScoresByMeanAsLlmcAndBySum) {
  // Example 0: completion 1 has the lowest mean (6/3 = 2 < 3), completion 0
  // the lowest sum (3 < 6). Example 1: a tie on both, the first wins.
  const MultipleChoiceRows rows(
      {example(1, {1}, {{2}, {3, 4, 5}}), example(0, {1}, {{2, 3}, {4, 5}, {6}})}, 8, "set");
  const MultipleChoiceScore score = rows.score({3.0, 6.0, 4.0, 4.0, 2.5});
  EXPECT_EQ(score.examples, 2);
  EXPECT_EQ(score.right_by_mean, 2);  // 1 for example 0, 0 (the tie's first) for example 1
  EXPECT_EQ(score.right_by_sum, 0);   // 0 for example 0 (label 1), 2 for example 1 (label 0)
  EXPECT_DOUBLE_EQ(score.accuracy(), 1.0);
  EXPECT_DOUBLE_EQ(score.accuracy_by_sum(), 0.0);
}

TEST(MultipleChoiceRowsTest, FindsTokensOutsideTheVocabulary) {
  EXPECT_EQ(find_token_outside({example(0, {1, 2}, {{3}, {4}})}, 5), "");
  EXPECT_EQ(find_token_outside({example(0, {1, 2}, {{3}, {4}}), example(0, {1}, {{3}, {4, 9}})}, 5),
            "example 1: completion 1 token 9");
}

}  // namespace
}  // namespace paraplan
