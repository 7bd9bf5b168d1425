// corpus_internal.h: what corpus.cc (inputs, splits, output) and
// corpus_documents.cc (documents encoded with a BPE tokenizer) share.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/corpus.h"

namespace paraplan::corpus {

// Where validation starts in `text` of `total` bytes when the last
// `val_fraction` of it goes to validation: just after the next '\n' unless
// that leaves nothing. Throws when the text is too small to split.
size_t validation_start(std::string_view text, double val_fraction,
                        const std::string& inputs_named);

// Creates output_dir (and its parents) or throws naming it.
void make_output_directory(const std::string& output_dir);

// -sum p log p of the token counts (of `total` tokens), in nats.
double unigram_entropy(const std::vector<int64_t>& counts, int64_t total);

// Writes train.bin and val.bin into output_dir in the vocabulary's format and
// fills the result's paths, counts and the training tokens' unigram entropy.
void write_splits(const std::vector<uint32_t>& train, const std::vector<uint32_t>& val,
                  int64_t vocab_size, const std::string& output_dir, TokenizeResult& result);

// The BPE path of tokenize_files, on the expanded input files.
void tokenize_documents(const std::vector<std::filesystem::path>& files,
                        const std::string& inputs_named, const std::string& output_dir,
                        const TokenizeOptions& options, TokenizeResult& result);

}  // namespace paraplan::corpus
