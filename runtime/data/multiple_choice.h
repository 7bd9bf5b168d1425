// multiple_choice.h: multiple-choice evaluation in llm.c's completion style
// (HellaSwag): each example is a context and several completions, one of them
// right; each completion is scored by the model's mean loss over its tokens
// after the context, and the example counts as right when the right one
// scores lowest (llm.c's dev/data/hellaswag.py "acc_norm", its C eval's only
// figure). The lowest summed loss is reported beside it ("acc").
//
// Examples come from llm.c's eval file (hellaswag_val.bin, read and written
// here) or from HellaSwag's .jsonl through a tokenizer
// (runtime/tokenizer/hellaswag.h). The model sees each completion as a row of
// seq_len tokens (MultipleChoiceRows): the context, then the completion, then
// zeros; causal attention makes the padding irrelevant to the scored tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/sample_source.h"

namespace paraplan {

struct MultipleChoiceExample {
  int label = 0;  // the right completion
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> completions;
};

// The most completions an example may have: HellaSwag's have 4, llm.c
// assumes 4; a bound keeps a hostile file's rows (each a row of seq_len
// tokens to forward) in proportion.
inline constexpr size_t kMaxCompletions = 64;

// Throws std::runtime_error "<where>: <field>: <what is wrong>" unless the
// example is scorable: a non-empty context, 2 to kMaxCompletions
// completions, none empty, and a label among them.
void check_example(const MultipleChoiceExample& example, const std::string& where);

// llm.c's eval file (dev/data/data_common.py write_evalfile): a header of 256
// little-endian int32 (magic 20240522, version 1, the example count, the
// longest example's bytes), then each example as uint16 values: 65535, its
// bytes, its index, the label, the completion count, the context's length and
// tokens, and each completion's length and tokens. Every field is checked;
// an error names the file, the example and the field.
std::vector<MultipleChoiceExample> read_eval_file(const std::string& path);
// Writes it atomically. Throws std::runtime_error naming the path when an
// example does not fit the format (a token or a count above 65,534, an
// example over 65,534 bytes, more than 65,535 examples).
void write_eval_file(const std::string& path, const std::vector<MultipleChoiceExample>& examples);

// The first token id at or above vocab_size, as "example E: ...", or empty.
std::string find_token_outside(const std::vector<MultipleChoiceExample>& examples,
                               int64_t vocab_size);

struct MultipleChoiceScore {
  int64_t examples = 0;
  int64_t right_by_mean = 0;  // llm.c's figure
  int64_t right_by_sum = 0;
  double accuracy() const {
    return examples > 0 ? static_cast<double>(right_by_mean) / examples : 0.0;
  }
  double accuracy_by_sum() const {
    return examples > 0 ? static_cast<double>(right_by_sum) / examples : 0.0;
  }
};

// A score with what it came from: each example's completions' mean loss per
// token.
struct MultipleChoiceEvaluation {
  MultipleChoiceScore score;
  std::vector<std::vector<double>> mean_losses;
};

// The examples as rows of seq_len tokens, one per completion, example after
// example: a SampleSource whose sample r is row r (rows past the last are
// zeros, so evaluation may read whole global batches). A row's targets are
// its next tokens; the scored targets are the completion's tokens, at
// positions context - 1 .. context + completion - 2.
class MultipleChoiceRows final : public SampleSource {
 public:
  // A context too long for its row is cut from the left (the tokens nearest
  // the completion stay), as evaluation harnesses do; truncated_examples()
  // counts them. Throws std::runtime_error naming `name` and the example
  // when a completion alone does not fit (it needs seq_len >= its length).
  MultipleChoiceRows(std::vector<MultipleChoiceExample> examples, int seq_len,
                     const std::string& name);

  void load(int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const override;

  int64_t num_examples() const { return static_cast<int64_t>(examples_.size()); }
  int64_t num_rows() const { return static_cast<int64_t>(rows_.size()); }
  int truncated_examples() const { return truncated_examples_; }
  int seq_len() const { return seq_len_; }
  // Row r's scored target positions [begin, end) within its sequence.
  struct Span {
    int begin = 0, end = 0;
  };
  Span scored_span(int64_t row) const;
  // Each example's completions' mean loss per token, from each row's summed
  // loss over its scored span (rows in order).
  std::vector<std::vector<double>> mean_losses(const std::vector<double>& row_loss_sums) const;
  // The score from the same sums.
  MultipleChoiceScore score(const std::vector<double>& row_loss_sums) const;

 private:
  // A row: its example, its completion and the first context token it keeps.
  struct Row {
    int64_t example;
    int completion;
    int context_begin;  // the first context token kept
  };

  std::vector<MultipleChoiceExample> examples_;
  std::vector<Row> rows_;
  std::vector<int64_t> first_row_;  // per example
  int seq_len_;
  int truncated_examples_ = 0;
};

}  // namespace paraplan
