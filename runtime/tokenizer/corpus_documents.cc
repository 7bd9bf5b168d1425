// corpus_documents.cc: a corpus tokenized with a BPE tokenizer: documents
// read (a text file each, or a .jsonl line each), the separator token before
// each, the later documents held out for validation, and the text encoded on
// several threads in chunks cut where the pre-tokenizer splits anyway.
#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "common/bounded_file.h"
#include "common/json_fields.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/corpus_internal.h"

namespace paraplan::corpus {

namespace {

namespace fs = std::filesystem;

struct Document {
  std::string text;
};

// One document per line of a .jsonl file: {"text": "..."} (other fields
// ignored); blank lines skipped.
void read_json_lines(const fs::path& file, const std::string& field,
                     std::vector<Document>& documents) {
  const std::string content = read_bounded_file(file.string(), kCorpusFile);
  size_t line_number = 0;
  for (size_t at = 0; at < content.size();) {
    size_t end = content.find('\n', at);
    if (end == std::string::npos) end = content.size();
    const std::string_view line(content.data() + at, end - at);
    at = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = file.string() + " line " + std::to_string(line_number);
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {
      throw std::runtime_error(where + ": not JSON (" + error.what() + ")");
    }
    if (!object.is_object() || !object.contains(field) || !object[field].is_string())
      throw std::runtime_error(where + ": expected an object whose \"" + field +
                               "\" is the document's text (--text-field names another field)");
    documents.push_back({object[field].get<std::string>()});
  }
}

std::string default_separator(const BpeTokenizer& tokenizer) {
  for (const char* name : {"<|endoftext|>", "<|begin_of_text|>"})
    if (tokenizer.special_token(name)) return name;
  return "";
}

// Cuts `text` into pieces of about `target` bytes where every pattern splits:
// after a '\n' and before a printable ASCII character (no match of the three
// patterns holds a line break and then a non-space).
std::vector<std::string_view> chunks_of(std::string_view text, size_t target) {
  std::vector<std::string_view> chunks;
  size_t begin = 0;
  while (text.size() - begin > 2 * target) {
    size_t cut = begin + target;
    while (cut < text.size() && !(text[cut - 1] == '\n' && text[cut] > ' ' && text[cut] <= '~'))
      ++cut;
    if (cut >= text.size()) break;
    chunks.push_back(text.substr(begin, cut - begin));
    begin = cut;
  }
  chunks.push_back(text.substr(begin));
  return chunks;
}

// The tokens of `documents` in order, each after `separator`.
std::vector<uint32_t> encode_documents(const BpeTokenizer& tokenizer,
                                       const std::vector<Document>& documents, int32_t separator,
                                       const TokenizeOptions& options,
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
    for (const std::string_view text :
         chunks_of(document.text, std::max<size_t>(options.chunk_bytes, 1))) {
      chunks.push_back({text, first, {}});
      first = false;
    }
  }
  if (chunks.empty()) return {};  // no validation documents
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < chunks.size(); i = next++)
      tokenizer.encode(chunks[i].text, chunks[i].tokens, &chunks[i].invalid_utf8_bytes);
  };
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int workers = std::clamp<int>(threads, 1, static_cast<int>(chunks.size()));
  std::vector<std::thread> pool;
  for (int t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();

  size_t total = 0;
  for (const Chunk& chunk : chunks) total += chunk.tokens.size() + (chunk.starts_document ? 1 : 0);
  std::vector<uint32_t> tokens;
  tokens.reserve(total);
  for (const Chunk& chunk : chunks) {
    if (chunk.starts_document) tokens.push_back(static_cast<uint32_t>(separator));
    tokens.insert(tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
    invalid_utf8_bytes += chunk.invalid_utf8_bytes;
  }
  return tokens;
}

}  // namespace

void tokenize_documents(const std::vector<fs::path>& files, const std::string& inputs_named,
                        const std::string& output_dir, const TokenizeOptions& options,
                        TokenizeResult& result) {
  const BpeTokenizer& tokenizer = *options.tokenizer;
  result.separator_name = options.document_separator.empty() ? default_separator(tokenizer)
                                                             : options.document_separator;
  const std::optional<int32_t> separator = tokenizer.special_token(result.separator_name);
  if (!separator)
    throw std::runtime_error("tokenize: --document-separator \"" + result.separator_name +
                             "\" is not a special token of " + tokenizer.description() +
                             "; give one of its special tokens, e.g. <|endoftext|>");
  result.separator_token = *separator;

  std::vector<Document> documents;
  for (const fs::path& file : files) {
    if (file.extension() == ".jsonl")
      read_json_lines(file, options.text_field, documents);
    else
      documents.push_back({read_bounded_file(file.string(), kCorpusFile)});
    result.files_read.push_back(file.string());
  }
  std::erase_if(documents, [](const Document& document) { return document.text.empty(); });
  if (documents.empty())
    throw std::runtime_error("tokenize: the corpus (" + inputs_named +
                             ") is empty; no text to tokenize");

  result.documents = static_cast<int64_t>(documents.size());  // before one is split in two
  // Validation: the last documents, at least val_fraction of the text; one
  // document is split at a line.
  size_t first_validation = documents.size();
  if (options.val_fraction > 0) {
    if (documents.size() == 1) {
      const size_t split = validation_start(documents[0].text, options.val_fraction, inputs_named);
      Document validation{documents[0].text.substr(split)};
      documents[0].text.resize(split);
      documents.push_back(std::move(validation));
      first_validation = 1;
    } else {
      int64_t total = 0, held = 0;
      for (const Document& document : documents)
        total += static_cast<int64_t>(document.text.size());
      while (first_validation > 1 &&
             static_cast<double>(held) < options.val_fraction * static_cast<double>(total))
        held += static_cast<int64_t>(documents[--first_validation].text.size());
    }
  }
  for (const Document& document : documents)
    result.text_bytes += static_cast<int64_t>(document.text.size());

  const std::vector<Document> validation(
      std::make_move_iterator(documents.begin() + first_validation),
      std::make_move_iterator(documents.end()));
  documents.resize(first_validation);
  const std::vector<uint32_t> train =
      encode_documents(tokenizer, documents, *separator, options, result.invalid_utf8_bytes);
  const std::vector<uint32_t> val =
      encode_documents(tokenizer, validation, *separator, options, result.invalid_utf8_bytes);
  write_splits(train, val, tokenizer.vocab_size(), output_dir, result);
}

}  // namespace paraplan::corpus
