// eval_set_fuzzer.cc: multiple-choice evaluation sets (--hellaswag): llm.c's
// eval file (runtime/data/multiple_choice.h) or HellaSwag's .jsonl encoded
// byte by byte (runtime/tokenizer/hellaswag.h); the input's first byte picks
// which (its top bit) and the rows' seq_len (the low 6 bits + 1); the rest is
// the file. An accepted set must lay out as rows whose scored targets are
// exactly each completion's tokens, score on any losses, and (an eval file)
// write and read back equal.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "runtime/data/multiple_choice.h"
#include "runtime/tokenizer/hellaswag.h"

namespace {

using namespace paraplan;

// A file in the temporary directory, removed at exit.
struct TemporaryFile {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("eval_set_fuzzer_" + std::to_string(::getpid()) + ".bin"))
                         .string();
  ~TemporaryFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

void check_rows(const std::vector<MultipleChoiceExample>& examples, int seq_len,
                const std::string& path) {
  const MultipleChoiceRows rows(examples, seq_len, path);
  std::vector<int32_t> inputs(static_cast<size_t>(seq_len)), targets(inputs.size());
  int64_t row = 0;
  for (const MultipleChoiceExample& example : examples)
    for (const std::vector<int32_t>& completion : example.completions) {
      rows.load(row, 1, inputs.data(), targets.data());
      const MultipleChoiceRows::Span span = rows.scored_span(row++);
      if (span.begin < 0 || span.end > seq_len ||
          span.end - span.begin != static_cast<int>(completion.size()))
        fuzz::fail("a scored span outside its row, or not the completion's length", path);
      for (int i = span.begin; i < span.end; ++i)
        if (targets[i] != completion[i - span.begin])
          fuzz::fail("a scored target that is not the completion's token", path);
      // The context's kept tail predicts the completion's first token.
      if (inputs[span.begin] != example.context.back())
        fuzz::fail("the completion does not follow the context's last token", path);
    }
  if (row != rows.num_rows()) fuzz::fail("rows not one per completion", path);
  const MultipleChoiceScore score = rows.score(std::vector<double>(row, 1.0));
  if (score.examples != static_cast<int64_t>(examples.size()) ||
      score.right_by_mean > score.examples)
    fuzz::fail("a score that does not count the examples", path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool jsonl = (data[0] & 0x80) != 0;
  const int seq_len = (data[0] & 0x3f) + 1;
  static fuzz::MemoryFile file;
  const std::string& path = file.hold(data + 1, size - 1);
  fuzz::refused_clearly(path, [&] {
    const std::vector<MultipleChoiceExample> examples =
        jsonl ? read_hellaswag_jsonl(path, nullptr) : read_eval_file(path);
    check_rows(examples, seq_len, path);
    if (jsonl) return;
    // Written atomically (a temporary file beside it): a real directory.
    static const TemporaryFile temporary;
    const std::string& written = temporary.path;
    try {
      write_eval_file(written, examples);
    } catch (const std::runtime_error& error) {
      // The reader takes a token of 65535, which llm.c's writer refuses too.
      if (std::string_view(error.what()).find("does not fit llm.c's eval file") ==
          std::string_view::npos)
        fuzz::fail("the writer refused what the reader accepted", error.what());
      return;
    }
    const std::vector<MultipleChoiceExample> back = read_eval_file(written);
    if (back.size() != examples.size()) fuzz::fail("written and read back, another count", path);
    for (size_t i = 0; i < back.size(); ++i)
      if (back[i].label != examples[i].label || back[i].context != examples[i].context ||
          back[i].completions != examples[i].completions)
        fuzz::fail("written and read back, another example", path);
  });
  return 0;
}
