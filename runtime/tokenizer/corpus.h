// corpus.h: `paraplan tokenize`: text corpora into llm.c token files
// (train.bin, val.bin), byte-level (token = byte, vocab 256) or with a BPE
// tokenizer (bpe_tokenizer.h); and the bytes of byte-level tokens for
// `paraplan sample`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace paraplan {

class BpeTokenizer;

inline constexpr int kByteVocabSize = 256;

// Where a tokenizer's run stands (TokenizeOptions::progress).
struct TokenizeProgress {
  int files_done = 0, files = 0;  // whole input files
  uint64_t input_bytes_done = 0, input_bytes = 0;
  int64_t documents = 0;
  int64_t tokens = 0;  // train and validation, separators included
};

struct TokenizeOptions {
  double val_fraction = 0.1;
  // Byte-level: the vocabulary of the model the files are for. The tokens are
  // bytes whatever it is, but above 65,536 the files use llm.c's Llama 3
  // format (uint32 tokens), which such a model's other shards use. With a
  // tokenizer, its vocabulary decides.
  int64_t vocab_size = kByteVocabSize;
  const BpeTokenizer* tokenizer = nullptr;  // nullptr: byte-level
  // With a tokenizer: the special token written before each document (as
  // llm.c's data scripts do); empty: <|endoftext|> where the tokenizer has it
  // (GPT-2, Qwen 2), else <|begin_of_text|> (Llama 3).
  std::string document_separator;
  std::string text_field = "text";  // the field of a .jsonl line holding its document
  int threads = 0;                  // encoding threads (at most 256); 0: one per hardware thread
  // A document over twice this is encoded in chunks of about this many bytes
  // (on several threads; the tokens are the same).
  size_t chunk_bytes = size_t{1} << 20;
  // With a tokenizer: write each split as shards of this many tokens
  // (train_000000.bin, ...; llm.c's fineweb.py writes 10^8); 0: one file per
  // split (train.bin, val.bin) unless it outgrows the 2^31 - 1 tokens one
  // file's header counts, which starts shards of that size.
  int64_t shard_tokens = 0;
  // With a tokenizer: called after each input file and each Parquet row
  // group, on the calling thread (`paraplan tokenize` prints it); may be empty.
  std::function<void(const TokenizeProgress&)> progress;
};

struct TokenizeResult {
  bool uint32_tokens = false;  // llm.c's Llama 3 format
  // output_dir/train.bin, or output_dir/train_*.bin when sharded (a glob
  // --data takes); the same for val.
  std::string train_path;
  std::string val_path;
  int train_files = 1, val_files = 1;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  // The unigram entropy of train.bin's tokens, in nats per token: the loss a
  // model that ignores context reaches.
  double train_unigram_entropy = 0;
  std::vector<std::string> files_read;  // in the order their bytes were concatenated
  // With a tokenizer:
  int64_t documents = 0;           // train and validation
  int64_t text_bytes = 0;          // the documents' UTF-8 bytes
  int32_t separator_token = -1;    // before each document
  std::string separator_name;      // its text
  int64_t invalid_utf8_bytes = 0;  // encoded as bytes, as all text is
};

// Reads `inputs` (files, or directories whose regular files are read in sorted
// name order, not recursively, skipping hidden files and files ending in .dat,
// .u8 or .bin) and writes output_dir/train.bin and output_dir/val.bin (created if
// missing).
//
// Byte-level: the files' bytes are concatenated as they are; val.bin holds the
// last `val_fraction` of them, its start moved forward to just after the next
// '\n' so that it begins on a line (when the rest of the corpus has one).
//
// With a tokenizer: each text file is a document, and each line of a .jsonl
// file (a JSON object) is one, its `text_field`, and each row of a Parquet
// file's `text_field` column (parquet.h; read a row group at a time, a
// row's bytes in the input counted as the file's size over its rows); every
// document is encoded
// after the separator token. Validation is the last documents: those ending
// past (1 - val_fraction) of the input's bytes (a .jsonl document's bytes are
// its line), never the first; a corpus of one document is split in two at a
// line, as byte-level. Files are read one at a time and encoded in batches on
// `threads` threads (the tokens are the same whatever their number), and the
// tokens stream to disk, so a corpus need not fit in memory twice; shards
// as `shard_tokens` says. Earlier outputs of the same names (train.bin,
// train_NNNNNN.bin, and val's) go once the new ones are written.
//
// val_fraction 0 writes an empty val.bin. Throws std::runtime_error on a
// missing input, an empty corpus, a corpus too small to split, a
// val_fraction outside [0, 1), a bad .jsonl line (naming file and line), a
// separator the tokenizer does not have, or an output directory that cannot
// be created.
TokenizeResult tokenize_files(const std::vector<std::string>& inputs, const std::string& output_dir,
                              const TokenizeOptions& options = {});

// The bytes of `tokens`; throws if a token is not a byte (outside 0..255).
std::string detokenize(const int32_t* tokens, int64_t count);

}  // namespace paraplan
