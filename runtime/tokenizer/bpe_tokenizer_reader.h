// bpe_tokenizer_reader.h: the friend that fills a BpeTokenizer's fields from
// its files, shared by the two files that read them: byte-level tokenizers
// and tiktoken files in bpe_tokenizer_files.cc, SentencePiece-style
// tokenizer.json files in bpe_tokenizer_metaspace.cc, SentencePiece's own
// tokenizer.model in bpe_tokenizer_sentencepiece.cc. Internal to
// runtime/tokenizer/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "runtime/tokenizer/bpe_tokenizer.h"

namespace paraplan {

// What the readers' messages say paraplan reads.
inline constexpr const char* kSupportedTokenizers =
    "paraplan reads BPE tokenizers: byte-level (GPT-2's, Llama 3's and Qwen 2's tokenizer.json, "
    "tiktoken's gpt2.tiktoken and Llama 3's tokenizer.model) and SentencePiece-style (Llama 2's "
    "and Mistral's tokenizer.json, or their SentencePiece tokenizer.model of a BPE model)";

// "<0x4A>" -> 0x4A, as byte fallback names bytes; -1 for any other text.
inline int fallback_byte_of(std::string_view key) {
  if (key.size() != 6 || key.substr(0, 3) != "<0x" || key[5] != '>') return -1;
  int value = 0;
  for (const char c : key.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

class BpeTokenizerReader {
 public:
  static BpeTokenizer tiktoken(const std::string& path, const std::string& text);
  static BpeTokenizer hugging_face(const std::string& path, const std::string& text);

  // Whether a tokenizer.json's normalizer or pre-tokenizer is SentencePiece's
  // way with spaces ("▁"): the file is then read by metaspace().
  static bool is_metaspace(const nlohmann::json& root);
  static BpeTokenizer metaspace(const std::string& path, const nlohmann::json& root);
  // SentencePiece's own model file (bpe_tokenizer_sentencepiece.cc).
  static bool is_sentencepiece_model(const std::string& text);
  static BpeTokenizer sentencepiece_model(const std::string& path, const std::string& text);

 private:
  // A token of the vocabulary (looked up by its bytes), a special token
  // (by its text), or a SentencePiece <0xNN> token (by neither: a fallback).
  enum class TokenKind { kOrdinary, kSpecial, kByteFallback };
  static void add_token(BpeTokenizer& tokenizer, int64_t id, std::string bytes, TokenKind kind,
                        const std::string& where);
  static void read_added_tokens(BpeTokenizer& tokenizer, const nlohmann::json& root,
                                const std::string& path);
  static void read_model_options(const nlohmann::json& model, const std::string& path);
  static void finish(BpeTokenizer& tokenizer);
  static void read_pre_tokenizer(BpeTokenizer& tokenizer, const nlohmann::json& pre,
                                 const std::string& path);
  static void read_merges(BpeTokenizer& tokenizer, const nlohmann::json& merges,
                          const nlohmann::json& vocab, const std::string& path);
  // metaspace()'s parts (bpe_tokenizer_metaspace.cc; the last also
  // sentencepiece_model()'s).
  static void read_metaspace_text_form(BpeTokenizer& tokenizer, const nlohmann::json& root,
                                       const std::string& path);
  static void read_metaspace_decoder(BpeTokenizer& tokenizer, const nlohmann::json& decoder,
                                     bool byte_fallback, const std::string& path);
  static void read_metaspace_vocab(BpeTokenizer& tokenizer, const nlohmann::json& model,
                                   const std::string& path);
  static void finish_metaspace(BpeTokenizer& tokenizer);
};

}  // namespace paraplan
