// tokenizer.h: byte-level tokenization (vocab 256, token = byte value) of text
// corpora into llm.c token files, and the inverse for `paraplan sample`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace paraplan {

inline constexpr int kByteVocabSize = 256;

struct TokenizeResult {
  bool uint32_tokens = false;  // llm.c's Llama 3 format
  std::string train_path;      // output_dir/train.bin
  std::string val_path;        // output_dir/val.bin
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  // The unigram entropy of train.bin's tokens, in nats per token: the loss a
  // model that ignores context reaches.
  double train_unigram_entropy = 0;
  std::vector<std::string> files_read;  // in the order their bytes were concatenated
};

// Reads `inputs` (files, or directories whose regular files are read in sorted
// name order, not recursively, skipping hidden files and files ending in .dat
// or .u8), concatenates their bytes as they are, and writes
// output_dir/train.bin and output_dir/val.bin (created if missing). val.bin
// holds the last `val_fraction` of the bytes, its start moved forward to just
// after the next '\n' so that it begins on a line (when the rest of the corpus
// has one); val_fraction 0 writes an empty val.bin. Throws std::runtime_error
// on a missing input, an empty corpus, a corpus too small to split, a
// val_fraction outside [0, 1), or an output directory that cannot be created.
// vocab_size is the vocabulary of the model the files are for: the tokens are
// bytes whatever it is, but above 65,536 the files use llm.c's Llama 3 format
// (uint32 tokens), which such a model's other shards use (token_file.h).
TokenizeResult tokenize_files(const std::vector<std::string>& inputs, const std::string& output_dir,
                              double val_fraction = 0.1, int64_t vocab_size = kByteVocabSize);

// The bytes of `tokens`; throws if a token is not a byte (outside 0..255).
std::string detokenize(const int32_t* tokens, int64_t count);

}  // namespace paraplan
