// corpus_documents.cc: a corpus tokenized with a BPE tokenizer, streamed: one
// input file at a time (a Parquet file a row group at a time), its documents
// (the file, each .jsonl line, or each Parquet row's text) encoded
// in batches on several threads, in chunks cut where the pre-tokenizer splits
// anyway, and the tokens appended to the split's token files as they come.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/bounded_file.h"
#include "runtime/data/token_file.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/corpus_internal.h"
#include "runtime/tokenizer/json_lines.h"
#include "runtime/tokenizer/parquet.h"

namespace paraplan::corpus {

namespace {

namespace fs = std::filesystem;

// A document's text and where its bytes end in the input (the offset the
// validation split compares against).
struct Document {
  std::string_view text;
  uint64_t input_end = 0;
};

// The documents of one input file: the whole text file, or one per non-blank
// line of a .jsonl file ({"text": "..."}, other fields ignored), whose text
// is kept in `owned`.
std::vector<Document> documents_of(const fs::path& file, const std::string& content,
                                   uint64_t input_start, const std::string& field,
                                   std::deque<std::string>& owned) {
  if (file.extension() != ".jsonl") return {Document{content, input_start + content.size()}};
  std::vector<Document> documents;
  for_each_json_line(
      content, file.string(),
      [&](const nlohmann::json& object, const std::string& where, size_t end) {
        if (!object.is_object() || !object.contains(field) || !object[field].is_string())
          throw std::runtime_error(where + ": expected an object whose \"" + field +
                                   "\" is the document's text (--text-field names another field)");
        owned.push_back(object[field].get<std::string>());
        documents.push_back({owned.back(), input_start + end});
      });
  return documents;
}

bool word_character(char c) {
  return c > ' ' && c <= '~';
}  // printable ASCII, not a space
bool ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// Whether all three patterns end a piece before text[at] whatever follows,
// so that text before and after `at` encode apart as they do together:
//   - after a lone '\n' between printable characters ("x\nY": GPT-2's
//     `\s+(?!\S)` would take a longer run, "\n\nY", to the end of a chunk
//     but leave its last '\n' apart in the whole text);
//   - before a space between ASCII letters ("a b": " b" is a piece of its own).
bool safe_cut(std::string_view text, size_t at) {
  if (at < 2 || at + 1 >= text.size()) return false;
  if (text[at - 1] == '\n') return word_character(text[at - 2]) && word_character(text[at]);
  return text[at] == ' ' && ascii_letter(text[at - 1]) && ascii_letter(text[at + 1]);
}

// Cuts `text` into pieces of about `target` bytes at safe cuts (a document
// with none, say a single line of CJK, stays whole).
std::vector<std::string_view> chunks_of(std::string_view text, size_t target) {
  std::vector<std::string_view> chunks;
  size_t begin = 0;
  while (text.size() - begin > 2 * target) {
    size_t cut = begin + target;
    while (cut < text.size() && !safe_cut(text, cut)) ++cut;
    if (cut >= text.size()) break;
    chunks.push_back(text.substr(begin, cut - begin));
    begin = cut;
  }
  chunks.push_back(text.substr(begin));
  return chunks;
}

// One split's token files: a file of at most `shard_tokens` tokens at a
// time. A shard that fills is committed under a hidden name and renamed into
// place by finish(), with the others, so that a run failing halfway leaves
// the earlier outputs as they were; one file that never filled is split.bin,
// otherwise the files are split_NNNNNN.bin.
class SplitWriter {
 public:
  SplitWriter(const std::string& output_dir, std::string split, TokenFormat format,
              int64_t shard_tokens, std::vector<int64_t>* counts)
      : dir_(output_dir),
        split_(std::move(split)),
        format_(format),
        shard_tokens_(shard_tokens > 0 ? shard_tokens : TokenFileWriter::kMaxTokens),
        counts_(counts) {}
  SplitWriter(const SplitWriter&) = delete;
  SplitWriter& operator=(const SplitWriter&) = delete;
  ~SplitWriter() {  // not finished: the hidden shards go
    std::error_code ignored;
    for (const std::string& hidden : hidden_) fs::remove(hidden, ignored);
  }

  void append(const int32_t* tokens, size_t count) {
    while (count > 0) {
      if (!current_) current_ = std::make_unique<TokenFileWriter>(name(-1), format_);
      const size_t room = static_cast<size_t>(shard_tokens_ - current_->count());
      const size_t now = std::min(room, count);
      staging_.assign(tokens, tokens + now);
      if (counts_ != nullptr)
        for (const uint32_t token : staging_) ++(*counts_)[token];
      current_->append(staging_.data(), now);
      tokens_ += static_cast<int64_t>(now);
      tokens += now;
      count -= now;
      if (current_->count() == shard_tokens_) {
        hidden_.push_back(hidden_name(static_cast<int>(hidden_.size())));
        current_->commit_as(hidden_.back());
        current_.reset();
      }
    }
  }

  // Puts the files in place and removes earlier outputs of this split's
  // names; returns the path --data takes (the file, or a glob of the shards)
  // and the number of files.
  std::string finish(int& files) {
    std::vector<std::string> written;
    if (hidden_.empty()) {
      if (!current_) current_ = std::make_unique<TokenFileWriter>(name(-1), format_);
      current_->commit_as(name(-1));
      written.push_back(name(-1));
    } else {
      if (current_ && current_->count() > 0) {
        hidden_.push_back(hidden_name(static_cast<int>(hidden_.size())));
        current_->commit_as(hidden_.back());
      }
      for (size_t shard = 0; shard < hidden_.size(); ++shard) {
        written.push_back(name(static_cast<int>(shard)));
        fs::rename(hidden_[shard], written.back());
      }
      hidden_.clear();
    }
    current_.reset();
    remove_earlier_outputs(written);
    files = static_cast<int>(written.size());
    return written.size() == 1 ? written[0] : (fs::path(dir_) / (split_ + "_*.bin")).string();
  }

  int64_t tokens() const { return tokens_; }

 private:
  std::string name(int shard) const {
    char suffix[16] = "";
    if (shard >= 0) std::snprintf(suffix, sizeof suffix, "_%06d", shard);
    return (fs::path(dir_) / (split_ + suffix + ".bin")).string();
  }
  std::string hidden_name(int shard) const {
    std::string hidden = std::string(".") + fs::path(name(shard)).filename().string();
    hidden += ".partial-" + std::to_string(::getpid());
    return (fs::path(dir_) / hidden).string();
  }
  // split.bin, or split_ and six or more digits .bin.
  bool ours(const std::string& file) const {
    if (file == split_ + ".bin") return true;
    const size_t first = split_.size() + 1;
    if (file.size() < first + 6 + 4 || file.compare(0, first, split_ + "_") != 0 ||
        file.compare(file.size() - 4, 4, ".bin") != 0)
      return false;
    return std::all_of(file.begin() + static_cast<std::ptrdiff_t>(first), file.end() - 4,
                       [](char c) { return c >= '0' && c <= '9'; });
  }
  void remove_earlier_outputs(const std::vector<std::string>& written) const {
    std::set<std::string> kept;
    for (const std::string& path : written) kept.insert(fs::path(path).filename().string());
    std::error_code error;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir_, error)) {
      const std::string file = entry.path().filename().string();
      if (ours(file) && !kept.count(file)) fs::remove(entry.path(), error);
    }
  }

  std::string dir_, split_;
  TokenFormat format_;
  int64_t shard_tokens_;
  std::vector<int64_t>* counts_;
  std::unique_ptr<TokenFileWriter> current_;
  std::vector<std::string> hidden_;  // committed shards, not yet in place
  std::vector<uint32_t> staging_;
  int64_t tokens_ = 0;
};

// Encodes `documents` on threads, in chunks, and appends their tokens in
// order (each document's after the separator) to `out`.
void encode_batch(const BpeTokenizer& tokenizer, const std::vector<Document>& documents,
                  int32_t separator, const TokenizeOptions& options, SplitWriter& out,
                  int64_t& invalid_utf8_bytes) {
  struct Chunk {
    std::string_view text;
    bool starts_document;
    std::vector<int32_t> tokens;
    int64_t invalid_utf8_bytes = 0;
  };
  std::vector<Chunk> chunks;
  for (const Document& document : documents) {
    bool first = true;
    // A vocabulary with tokens across the cuts encodes each document whole.
    const size_t chunk_bytes = tokenizer.cuts_safely_at_spaces()
                                   ? std::max<size_t>(options.chunk_bytes, 1)
                                   : document.text.size() + 1;
    for (const std::string_view text : chunks_of(document.text, chunk_bytes)) {
      chunks.push_back({text, first, {}});
      first = false;
    }
  }
  if (chunks.empty()) return;
  // The first failure of any thread (memory, say) is rethrown here once all
  // are joined; the others stop at their next chunk.
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto work = [&] {
    try {
      for (size_t i = next++; i < chunks.size(); i = next++)
        if (chunks[i].starts_document)
          tokenizer.encode(chunks[i].text, chunks[i].tokens, &chunks[i].invalid_utf8_bytes);
        else
          tokenizer.encode_continuation(chunks[i].text, chunks[i].tokens,
                                        &chunks[i].invalid_utf8_bytes);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = chunks.size();
    }
  };
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int workers = std::clamp<int>(std::min(threads, 256), 1, static_cast<int>(chunks.size()));
  {
    std::vector<std::jthread> pool;  // joined when the block ends, also by a throw
    for (int t = 1; t < workers; ++t) pool.emplace_back(work);
    work();
  }
  if (failure) std::rethrow_exception(failure);
  for (const Chunk& chunk : chunks) {
    if (chunk.starts_document) out.append(&separator, 1);
    out.append(chunk.tokens.data(), chunk.tokens.size());
    invalid_utf8_bytes += chunk.invalid_utf8_bytes;
  }
}

bool is_parquet(const fs::path& file) {
  return file.extension() == ".parquet";
}

// A Parquet file's documents to `take`, a row group at a time; returns the
// file's size. The documents end evenly over the file's bytes, by their
// place among its rows (the input offset the validation split compares
// against).
uint64_t parquet_documents(const fs::path& file, const std::string& text_field,
                           uint64_t input_start,
                           const std::function<void(const std::vector<Document>&)>& take) {
  const ParquetTextColumn column = ParquetTextColumn::open(file.string(), text_field);
  const double bytes_per_row = column.rows() > 0 ? static_cast<double>(column.file_size()) /
                                                       static_cast<double>(column.rows())
                                                 : 0.0;
  int64_t rows_before = 0;
  for (int group = 0; group < column.row_groups(); ++group) {
    std::vector<std::string> texts;
    column.read_row_group(group, texts);
    const double rows_per_text = texts.empty() ? 0.0
                                               : static_cast<double>(column.rows_in_group(group)) /
                                                     static_cast<double>(texts.size());
    std::vector<Document> documents;
    for (size_t i = 0; i < texts.size(); ++i) {
      const double row_end =
          static_cast<double>(rows_before) + static_cast<double>(i + 1) * rows_per_text;
      const double offset =
          std::min(static_cast<double>(column.file_size()), row_end * bytes_per_row);
      documents.push_back({texts[i], input_start + static_cast<uint64_t>(offset)});
    }
    take(documents);
    rows_before += column.rows_in_group(group);
  }
  return column.file_size();
}

// 0 for a file that cannot be looked at: reading it fails next, naming it.
uint64_t input_size(const fs::path& file) {
  std::error_code error;
  const uint64_t size = fs::file_size(file, error);
  return error ? 0 : size;
}

}  // namespace

void tokenize_documents(const std::vector<fs::path>& files, const std::string& inputs_named,
                        const std::string& output_dir, const TokenizeOptions& options,
                        TokenizeResult& result) {
  const BpeTokenizer& tokenizer = *options.tokenizer;
  result.separator_name = options.document_separator.empty() ? default_document_separator(tokenizer)
                                                             : options.document_separator;
  const std::optional<int32_t> separator = tokenizer.special_token(result.separator_name);
  if (!separator)
    throw std::runtime_error("tokenize: --document-separator \"" + result.separator_name +
                             "\" is not a special token of " + tokenizer.description() +
                             "; give one of its special tokens, e.g. <|endoftext|>");
  result.separator_token = *separator;
  if (options.shard_tokens < 0 || options.shard_tokens > TokenFileWriter::kMaxTokens)
    throw std::runtime_error("tokenize: --shard-tokens " + std::to_string(options.shard_tokens) +
                             " is outside [0, " + std::to_string(TokenFileWriter::kMaxTokens) +
                             "]; 0 writes one file per split");
  make_output_directory(output_dir);

  uint64_t input_bytes = 0;
  for (const fs::path& file : files) input_bytes += input_size(file);
  // A document ending past this is validation (never the first one).
  const double validation_from = (1.0 - options.val_fraction) * static_cast<double>(input_bytes);
  const TokenFormat format = token_format_for_vocab(tokenizer.vocab_size());
  std::vector<int64_t> counts(static_cast<size_t>(tokenizer.vocab_size()), 0);
  SplitWriter train(output_dir, "train", format, options.shard_tokens, &counts);
  SplitWriter val(output_dir, "val", format, options.shard_tokens, nullptr);
  const size_t batch_bytes = std::max<size_t>(options.chunk_bytes, 1) * 64;

  // Documents to the token files, in batches of about batch_bytes of one
  // split, validation once a document ends past validation_from.
  std::vector<Document> batch;
  size_t held = 0;
  SplitWriter* batch_split = &train;
  auto flush = [&] {
    encode_batch(tokenizer, batch, *separator, options, *batch_split, result.invalid_utf8_bytes);
    batch.clear();
    held = 0;
  };
  auto take = [&](const std::vector<Document>& documents) {
    for (const Document& document : documents) {
      if (document.text.empty()) continue;
      const bool validation = result.documents > 0 && options.val_fraction > 0 &&
                              static_cast<double>(document.input_end) > validation_from;
      SplitWriter* split = validation ? &val : &train;
      if (split != batch_split || held >= batch_bytes) flush();
      batch_split = split;
      batch.push_back(document);
      held += document.text.size();
      ++result.documents;
      result.text_bytes += static_cast<int64_t>(document.text.size());
    }
    flush();  // before what the documents point into goes
  };

  uint64_t input_start = 0;
  TokenizeProgress progress{.files = static_cast<int>(files.size()), .input_bytes = input_bytes};
  auto report = [&](uint64_t input_done) {
    if (!options.progress) return;
    progress.input_bytes_done = std::min(input_done, input_bytes);
    progress.documents = result.documents;
    progress.tokens = train.tokens() + val.tokens();
    options.progress(progress);
  };
  for (const fs::path& file : files) {
    result.files_read.push_back(file.string());
    if (is_parquet(file)) {
      auto take_and_report = [&](const std::vector<Document>& documents) {
        take(documents);
        if (!documents.empty()) report(documents.back().input_end);
      };
      input_start += parquet_documents(file, options.text_field, input_start, take_and_report);
      ++progress.files_done;
      report(input_start);
      continue;
    }
    const std::string content = read_bounded_file(file.string(), kCorpusFile);
    std::deque<std::string> owned;
    std::vector<Document> documents =
        documents_of(file, content, input_start, options.text_field, owned);
    input_start += content.size();
    std::erase_if(documents, [](const Document& d) { return d.text.empty(); });
    // One document in all: split at a line, as byte-level.
    const bool only = files.size() == 1 && documents.size() == 1 && options.val_fraction > 0;
    if (only) {
      const std::string_view whole = documents[0].text;  // in `content` or `owned`
      const size_t split = validation_start(whole, options.val_fraction, inputs_named);
      documents = {{whole.substr(0, split), 0}, {whole.substr(split), input_bytes}};
    }
    take(documents);
    if (only) result.documents = 1;
    ++progress.files_done;
    report(input_start);
  }
  if (result.documents == 0)
    throw std::runtime_error("tokenize: the corpus (" + inputs_named +
                             ") is empty; no text to tokenize");
  result.uint32_tokens = format == TokenFormat::kUint32;
  result.train_tokens = train.tokens();
  result.val_tokens = val.tokens();
  result.train_path = train.finish(result.train_files);
  result.val_path = val.finish(result.val_files);
  result.train_unigram_entropy = unigram_entropy(counts, result.train_tokens);
}

}  // namespace paraplan::corpus
