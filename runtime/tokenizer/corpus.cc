// corpus.cc: `paraplan tokenize`: the inputs, the train/validation split, the
// token files written, and the byte-level path.
#include "runtime/tokenizer/corpus.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "common/bounded_file.h"
#include "runtime/data/token_file.h"
#include "runtime/tokenizer/corpus_internal.h"

namespace paraplan {
namespace fs = std::filesystem;

namespace {

// Not text: fortune's index files, llm.c-style binary dumps and token files
// (a tokenize output written into its input directory).
bool skipped_in_directory(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name.empty() || name[0] == '.') return true;
  const std::string ext = path.extension().string();
  return ext == ".dat" || ext == ".u8" || ext == ".bin";
}

std::vector<fs::path> expand_inputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) throw std::runtime_error("tokenize: no input files given; pass --input");
  std::vector<fs::path> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    const fs::file_status status = fs::status(input, error);
    if (!fs::exists(status))
      throw std::runtime_error(input + ": input does not exist; pass a text file or a directory");
    if (fs::is_directory(status)) {
      std::vector<fs::path> entries;
      for (const fs::directory_entry& entry : fs::directory_iterator(input))
        if (entry.is_regular_file() && !skipped_in_directory(entry.path()))
          entries.push_back(entry.path());
      std::sort(entries.begin(), entries.end());
      files.insert(files.end(), entries.begin(), entries.end());
    } else if (fs::is_regular_file(status)) {
      files.push_back(input);
    } else {
      throw std::runtime_error(input + ": not a regular file or directory");
    }
  }
  return files;
}

std::vector<uint32_t> bytes_to_tokens(const std::string& corpus, size_t begin, size_t end) {
  std::vector<uint32_t> tokens(end - begin);
  for (size_t i = begin; i < end; ++i) tokens[i - begin] = static_cast<unsigned char>(corpus[i]);
  return tokens;
}

}  // namespace

namespace corpus {

size_t validation_start(std::string_view text, double val_fraction,
                        const std::string& inputs_named) {
  const size_t total = text.size();
  if (val_fraction == 0.0) return total;
  const size_t val_bytes = static_cast<size_t>(
      std::ceil(static_cast<double>(total) * val_fraction - 1e-9));  // 1e-9: 0.1 is not exact
  if (total < 2 || val_bytes >= total)
    throw std::runtime_error("tokenize: the corpus (" + inputs_named + ") holds " +
                             std::to_string(total) + " bytes, too small to split " +
                             std::to_string(val_fraction) +
                             " of it off for validation; add text or lower val_fraction");
  size_t split = total - val_bytes;
  // Start validation on a line: just after the next '\n', unless that would
  // leave the validation split empty.
  if (text[split - 1] != '\n') {
    const size_t newline = text.find('\n', split);
    if (newline != std::string::npos && newline + 1 < total) split = newline + 1;
  }
  return split;
}

void make_output_directory(const std::string& output_dir) {
  std::error_code error;
  fs::create_directories(output_dir, error);
  if (error || !fs::is_directory(output_dir))
    throw std::runtime_error(output_dir + ": cannot create output directory" +
                             (error ? ": " + error.message() : std::string()));
}

double unigram_entropy(const std::vector<int64_t>& counts, int64_t total) {
  // The loss of a model that ignores context, the first floor a training run
  // should go below.
  double entropy = 0;
  for (const int64_t count : counts)
    if (count > 0) {
      const double p = static_cast<double>(count) / static_cast<double>(total);
      entropy -= p * std::log(p);
    }
  return entropy;
}

void write_splits(const std::vector<uint32_t>& train, const std::vector<uint32_t>& val,
                  int64_t vocab_size, const std::string& output_dir, TokenizeResult& result) {
  make_output_directory(output_dir);
  result.train_path = (fs::path(output_dir) / "train.bin").string();
  result.val_path = (fs::path(output_dir) / "val.bin").string();
  const TokenFormat format = token_format_for_vocab(vocab_size);
  result.uint32_tokens = format == TokenFormat::kUint32;
  write_token_file(result.train_path, train, format);
  write_token_file(result.val_path, val, format);
  result.train_tokens = static_cast<int64_t>(train.size());
  result.val_tokens = static_cast<int64_t>(val.size());
  std::vector<int64_t> counts(static_cast<size_t>(vocab_size), 0);
  for (const uint32_t token : train) ++counts[token];
  result.train_unigram_entropy = unigram_entropy(counts, result.train_tokens);
}

}  // namespace corpus

TokenizeResult tokenize_files(const std::vector<std::string>& inputs, const std::string& output_dir,
                              const TokenizeOptions& options) {
  if (!(options.val_fraction >= 0.0 && options.val_fraction < 1.0))
    throw std::runtime_error("tokenize: val_fraction " + std::to_string(options.val_fraction) +
                             " is outside [0, 1); use e.g. 0.1 for a 10% validation split");
  const std::vector<fs::path> files = expand_inputs(inputs);
  std::string inputs_named;
  for (const std::string& input : inputs)
    inputs_named += (inputs_named.empty() ? "" : ", ") + input;
  TokenizeResult result;
  if (options.tokenizer != nullptr) {
    corpus::tokenize_documents(files, inputs_named, output_dir, options, result);
    return result;
  }

  if (options.vocab_size < kByteVocabSize)
    throw std::runtime_error("tokenize: vocab_size " + std::to_string(options.vocab_size) +
                             " cannot hold the byte-level tokens 0..255; use 256 or more");
  std::string text;
  for (const fs::path& file : files) {
    if (file.extension() == ".jsonl" || file.extension() == ".parquet")
      throw std::runtime_error(file.string() + ": a " + file.extension().string() +
                               " corpus needs --tokenizer, which reads its documents; "
                               "byte-level tokenization takes files as they are");
    text += read_bounded_file(file.string(), kCorpusFile);
    result.files_read.push_back(file.string());
  }
  if (text.empty())
    throw std::runtime_error("tokenize: the corpus (" + inputs_named +
                             ") is empty; no bytes to tokenize");
  const size_t split = corpus::validation_start(text, options.val_fraction, inputs_named);
  corpus::write_splits(bytes_to_tokens(text, 0, split), bytes_to_tokens(text, split, text.size()),
                       options.vocab_size, output_dir, result);
  return result;
}

std::string detokenize(const int32_t* tokens, int64_t count) {
  std::string text(static_cast<size_t>(count), '\0');
  for (int64_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || tokens[i] >= kByteVocabSize)
      throw std::runtime_error("detokenize: token " + std::to_string(tokens[i]) + " at position " +
                               std::to_string(i) +
                               " is not a byte (0..255); the byte-level tokenizer has vocab 256");
    text[static_cast<size_t>(i)] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return text;
}

}  // namespace paraplan
