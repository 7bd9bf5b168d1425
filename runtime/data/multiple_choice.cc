// multiple_choice.cc: llm.c's eval file, and multiple-choice examples as rows
// of tokens and their score (multiple_choice.h).
#include "runtime/data/multiple_choice.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/bounded_file.h"

namespace paraplan {

namespace {

constexpr int32_t kEvalFileMagic = 20240522;
constexpr int32_t kEvalFileVersion = 1;
constexpr int32_t kTokenFileMagics[] = {20240520, 20240801};  // token_file.h's
constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);
constexpr uint16_t kStartExample = 65535;
constexpr size_t kMaxUint16Field = 65534;  // 65535 is the delimiter

std::string example_name(size_t index) {
  return "example " + std::to_string(index);
}

// Reads one example's uint16 values after its three-value header.
class ExampleReader {
 public:
  ExampleReader(const uint8_t* values, size_t count, std::string where)
      : values_(values), count_(count), where_(std::move(where)) {}
  uint16_t next(const char* field) {
    if (position_ >= count_)
      throw std::runtime_error(where_ + ": " + field +
                               ": past the end of the example's <EXAMPLE_BYTES>");
    uint16_t value;
    std::memcpy(&value, values_ + 2 * position_++, sizeof(value));
    return value;
  }
  std::vector<int32_t> tokens(const char* field) {
    const uint16_t length = next(field);
    std::vector<int32_t> out(length);
    for (int32_t& token : out) token = next(field);
    return out;
  }
  bool done() const { return position_ == count_; }

 private:
  const uint8_t* values_;
  size_t count_, position_ = 0;
  std::string where_;
};

std::vector<uint16_t> example_stream(const MultipleChoiceExample& example, size_t index,
                                     const std::string& path) {
  const auto field = [&](size_t value, const char* what) {
    if (value > kMaxUint16Field)
      throw std::runtime_error(path + ": " + example_name(index) + ": " + what + " " +
                               std::to_string(value) + " does not fit llm.c's eval file (at most " +
                               std::to_string(kMaxUint16Field) + ")");
    return static_cast<uint16_t>(value);
  };
  std::vector<uint16_t> stream = {kStartExample, 0, field(index, "the index"),
                                  field(static_cast<size_t>(example.label), "the label"),
                                  field(example.completions.size(), "the completion count")};
  const auto append = [&](const std::vector<int32_t>& tokens) {
    stream.push_back(field(tokens.size(), "a length"));
    for (int32_t token : tokens) {
      if (token < 0)
        throw std::runtime_error(path + ": " + example_name(index) + ": token " +
                                 std::to_string(token) + " is negative");
      stream.push_back(field(static_cast<size_t>(token), "token"));
    }
  };
  append(example.context);
  for (const std::vector<int32_t>& completion : example.completions) append(completion);
  stream[1] = field(stream.size() * sizeof(uint16_t), "the example's bytes");
  return stream;
}

}  // namespace

void check_example(const MultipleChoiceExample& example, const std::string& where) {
  if (example.context.empty())
    throw std::runtime_error(where +
                             ": the context is empty (the first completion token is "
                             "predicted from the context's last)");
  const size_t completions = example.completions.size();
  if (completions < 2 || completions > kMaxCompletions)
    throw std::runtime_error(where + ": " + std::to_string(completions) +
                             " completion(s); a multiple-choice example has 2 to " +
                             std::to_string(kMaxCompletions));
  for (size_t c = 0; c < completions; ++c)
    if (example.completions[c].empty())
      throw std::runtime_error(where + ": completion " + std::to_string(c) + " is empty");
  if (example.label < 0 || static_cast<size_t>(example.label) >= completions)
    throw std::runtime_error(where + ": the label is " + std::to_string(example.label) +
                             "; give the right completion's index, 0.." +
                             std::to_string(completions - 1));
}

namespace {

// The header's four fields, checked: magic, version, examples, longest.
std::array<int32_t, 4> eval_file_header(const std::vector<uint8_t>& bytes,
                                        const std::string& path) {
  // HellaSwag's own text under another name than *.jsonl, said as such.
  const std::string text_hint = !bytes.empty() && bytes[0] == '{'
                                    ? "; this looks like HellaSwag's text: name it *.jsonl"
                                    : "";
  if (bytes.size() < kHeaderBytes)
    throw std::runtime_error(path + ": " + std::to_string(bytes.size()) +
                             " bytes, shorter than llm.c's eval file header (1024 bytes)" +
                             text_hint);
  std::array<int32_t, 4> header;
  std::memcpy(header.data(), bytes.data(), sizeof(header));
  if (header[0] != kEvalFileMagic) {
    const bool shard = std::find(std::begin(kTokenFileMagics), std::end(kTokenFileMagics),
                                 header[0]) != std::end(kTokenFileMagics);
    const std::string what = shard ? "; this is a token shard, for --data or --val-data)"
                             : !text_hint.empty() ? text_hint + ")"
                                                  : ", as dev/data/hellaswag.py writes it)";
    throw std::runtime_error(path + ": header[0] (magic) is " + std::to_string(header[0]) +
                             ", not " + std::to_string(kEvalFileMagic) + " (llm.c's eval file" +
                             what);
  }
  if (header[1] != kEvalFileVersion)
    throw std::runtime_error(path + ": header[1] (version) is " + std::to_string(header[1]) +
                             ", not 1");
  // <EXAMPLE_INDEX> is a uint16: llm.c writes and reads fewer than 2^16.
  if (header[2] < 1 || header[2] > 65535)
    throw std::runtime_error(path + ": header[2] (examples) is " + std::to_string(header[2]) +
                             "; an eval file holds 1 to 65535 examples");
  return header;
}

// Example `index` at `offset`, which moves past it.
MultipleChoiceExample read_example(const std::vector<uint8_t>& bytes, size_t& offset, int32_t index,
                                   const std::array<int32_t, 4>& header, const std::string& path) {
  const std::string where = path + ": " + example_name(index);
  uint16_t head[3];
  if (bytes.size() - offset < sizeof(head))
    throw std::runtime_error(where + ": the file ends (header[2] says " +
                             std::to_string(header[2]) + " examples)");
  std::memcpy(head, bytes.data() + offset, sizeof(head));
  if (head[0] != kStartExample)
    throw std::runtime_error(where + ": <START_EXAMPLE> is " + std::to_string(head[0]) +
                             ", not 65535");
  // llm.c reads an example into a buffer of header[3] bytes.
  if (head[1] < sizeof(head) + 8 || head[1] % 2 != 0 || head[1] > bytes.size() - offset ||
      static_cast<int32_t>(head[1]) > header[3])
    throw std::runtime_error(where + ": <EXAMPLE_BYTES> " + std::to_string(head[1]) +
                             " is invalid (even, at least 14, within the file and at most "
                             "header[3], the longest example: " +
                             std::to_string(header[3]) + ")");
  if (head[2] != static_cast<uint16_t>(index))
    throw std::runtime_error(where + ": <EXAMPLE_INDEX> is " + std::to_string(head[2]));
  ExampleReader reader(bytes.data() + offset + sizeof(head), (head[1] - sizeof(head)) / 2, where);
  MultipleChoiceExample example;
  example.label = reader.next("<LABEL>");
  example.completions.resize(reader.next("<NUM_COMPLETIONS>"));
  example.context = reader.tokens("the context");
  for (std::vector<int32_t>& completion : example.completions)
    completion = reader.tokens("a completion");
  if (!reader.done())
    throw std::runtime_error(where + ": <EXAMPLE_BYTES> " + std::to_string(head[1]) +
                             " is more than the example's fields hold");
  check_example(example, where);
  offset += head[1];
  return example;
}

}  // namespace

std::vector<MultipleChoiceExample> read_eval_file(const std::string& path) {
  const std::vector<uint8_t> bytes =
      read_bounded_file<std::vector<uint8_t>>(path, kEvaluationSetFile);
  const std::array<int32_t, 4> header = eval_file_header(bytes, path);
  std::vector<MultipleChoiceExample> examples;
  size_t offset = kHeaderBytes;
  for (int32_t i = 0; i < header[2]; ++i)
    examples.push_back(read_example(bytes, offset, i, header, path));
  if (offset != bytes.size())
    throw std::runtime_error(path + ": " + std::to_string(bytes.size() - offset) +
                             " bytes follow the last of the header's " + std::to_string(header[2]) +
                             " examples");
  return examples;
}

void write_eval_file(const std::string& path, const std::vector<MultipleChoiceExample>& examples) {
  if (examples.empty() || examples.size() > 65535)
    throw std::runtime_error(path + ": " + std::to_string(examples.size()) +
                             " examples; llm.c's eval file holds 1..65535");
  std::vector<uint16_t> stream;
  size_t longest = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    check_example(examples[i], path + ": " + example_name(i));
    const std::vector<uint16_t> one = example_stream(examples[i], i, path);
    longest = std::max(longest, one.size() * sizeof(uint16_t));
    stream.insert(stream.end(), one.begin(), one.end());
  }
  int32_t header[256] = {kEvalFileMagic, kEvalFileVersion, static_cast<int32_t>(examples.size()),
                         static_cast<int32_t>(longest)};
  AtomicFileWriter writer(path);
  writer.write(header, sizeof(header));
  writer.write(stream.data(), stream.size() * sizeof(uint16_t));
  writer.commit();
}

std::string find_token_outside(const std::vector<MultipleChoiceExample>& examples,
                               int64_t vocab_size) {
  const auto outside = [&](const std::vector<int32_t>& tokens) {
    return std::find_if(tokens.begin(), tokens.end(),
                        [&](int32_t t) { return t < 0 || t >= vocab_size; });
  };
  for (size_t i = 0; i < examples.size(); ++i) {
    if (auto it = outside(examples[i].context); it != examples[i].context.end())
      return example_name(i) + ": context token " + std::to_string(*it);
    for (size_t c = 0; c < examples[i].completions.size(); ++c)
      if (auto it = outside(examples[i].completions[c]); it != examples[i].completions[c].end())
        return example_name(i) + ": completion " + std::to_string(c) + " token " +
               std::to_string(*it);
  }
  return "";
}

MultipleChoiceRows::MultipleChoiceRows(std::vector<MultipleChoiceExample> examples, int seq_len,
                                       const std::string& name)
    : examples_(std::move(examples)), seq_len_(seq_len) {
  for (size_t e = 0; e < examples_.size(); ++e) {
    const MultipleChoiceExample& example = examples_[e];
    check_example(example, name + ": " + example_name(e));
    size_t longest = 0;
    for (const std::vector<int32_t>& completion : example.completions)
      longest = std::max(longest, completion.size());
    // A row holds its inputs: the context and all but the completion's last token.
    if (longest > static_cast<size_t>(seq_len))
      throw std::runtime_error(name + ": " + example_name(e) + ": a completion of " +
                               std::to_string(longest) +
                               " tokens does not fit the model's seq_len " +
                               std::to_string(seq_len) + " with any of its context");
    const size_t kept = std::min(example.context.size(), seq_len + 1 - longest);
    if (kept < example.context.size()) ++truncated_examples_;
    first_row_.push_back(num_rows());
    for (size_t c = 0; c < example.completions.size(); ++c)
      rows_.push_back(Row{.example = static_cast<int64_t>(e),
                          .completion = static_cast<int>(c),
                          .context_begin = static_cast<int>(example.context.size() - kept)});
  }
}

MultipleChoiceRows::Span MultipleChoiceRows::scored_span(int64_t row) const {
  const Row& r = rows_.at(static_cast<size_t>(row));
  const MultipleChoiceExample& example = examples_[static_cast<size_t>(r.example)];
  const int context = static_cast<int>(example.context.size()) - r.context_begin;
  const int completion = static_cast<int>(example.completions[r.completion].size());
  return Span{context - 1, context + completion - 1};
}

void MultipleChoiceRows::load(int64_t first_sample, int count, int32_t* inputs,
                              int32_t* targets) const {
  const size_t T = static_cast<size_t>(seq_len_);
  std::fill(inputs, inputs + count * T, 0);
  std::fill(targets, targets + count * T, 0);
  std::vector<int32_t> sequence;
  for (int i = 0; i < count; ++i) {
    const int64_t row = first_sample + i;
    if (row < 0 || row >= num_rows()) continue;
    const Row& r = rows_[static_cast<size_t>(row)];
    const MultipleChoiceExample& example = examples_[static_cast<size_t>(r.example)];
    const std::vector<int32_t>& completion = example.completions[r.completion];
    sequence.assign(example.context.begin() + r.context_begin, example.context.end());
    sequence.insert(sequence.end(), completion.begin(), completion.end());
    const size_t length = sequence.size();  // <= T + 1
    std::copy_n(sequence.begin(), std::min(length, T), inputs + i * T);
    std::copy_n(sequence.begin() + 1, length - 1, targets + i * T);
  }
}

std::vector<std::vector<double>> MultipleChoiceRows::mean_losses(
    const std::vector<double>& row_loss_sums) const {
  if (row_loss_sums.size() < static_cast<size_t>(num_rows()))
    throw std::logic_error("MultipleChoiceRows: fewer loss sums than rows");
  std::vector<std::vector<double>> means(examples_.size());
  for (size_t e = 0; e < examples_.size(); ++e)
    for (size_t c = 0; c < examples_[e].completions.size(); ++c)
      means[e].push_back(row_loss_sums[static_cast<size_t>(first_row_[e]) + c] /
                         static_cast<double>(examples_[e].completions[c].size()));
  return means;
}

MultipleChoiceScore MultipleChoiceRows::score(const std::vector<double>& row_loss_sums) const {
  const std::vector<std::vector<double>> means = mean_losses(row_loss_sums);
  MultipleChoiceScore score;
  for (size_t e = 0; e < examples_.size(); ++e) {
    int best_mean = 0, best_sum = 0;
    for (size_t c = 1; c < means[e].size(); ++c) {
      const double sum = row_loss_sums[static_cast<size_t>(first_row_[e]) + c];
      // The first of equal scores wins, as in llm.c.
      if (means[e][c] < means[e][best_mean]) best_mean = static_cast<int>(c);
      if (sum < row_loss_sums[static_cast<size_t>(first_row_[e]) + best_sum])
        best_sum = static_cast<int>(c);
    }
    ++score.examples;
    score.right_by_mean += best_mean == examples_[e].label;
    score.right_by_sum += best_sum == examples_[e].label;
  }
  return score;
}

}  // namespace paraplan
