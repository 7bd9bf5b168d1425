// bpe_tokenizer.h: byte-pair encoding, the tokenizer of GPT-2, Llama 3 and
// Qwen 2 (byte-level) and of Llama 2 and Mistral (SentencePiece-style):
//   - byte-level: text is split into pieces (pretokenizer.h), each piece's
//     UTF-8 bytes start as one token per byte;
//   - SentencePiece-style: spaces are the vocabulary's "▁" (U+2581), the text
//     gets one before it (SentencePiece's dummy prefix) and is one piece (or
//     one per word, Metaspace's split); each character starts as its token,
//     or as its bytes' <0xNN> tokens where the vocabulary lacks it (byte
//     fallback), or as the unknown token;
// then adjacent tokens merge, the highest-priority pair first, until no pair
// merges. Tokens are held as the bytes they decode to ("▁" as a space,
// <0xNN> as its byte), so both kinds share the encoder and the decoder.
//
// Read from the files users have:
//   - a Hugging Face tokenizer.json, model "BPE": byte-level (no normalizer
//     or NFC, pre-tokenizer ByteLevel or Split + ByteLevel with one of the
//     three patterns, decoder ByteLevel) or SentencePiece-style (the
//     normalizers Prepend "▁" and Replace " " -> "▁", or the pre-tokenizer
//     Metaspace; decoder Replace "▁" -> " ", ByteFallback, Fuse and Strip, as
//     transformers converts Llama 2's and Mistral's tokenizer.model): vocab,
//     merges (priority = list order) and added_tokens;
//   - SentencePiece's own tokenizer.model of a BPE model (Llama 2's,
//     Mistral's original checkpoints), read as transformers converts it;
//   - a tiktoken ranks file (base64 bytes and rank per line): GPT-2's
//     gpt2.tiktoken (50,256 ranks) or Llama 3's tokenizer.model (128,000);
//     the count says which, and so the pattern and special tokens. A pair
//     merges when its bytes together are a token, the lowest rank first.
// Encoding is "ordinary" (tiktoken's encode_ordinary): text that spells a
// special token is encoded as text; special tokens are placed by their ids.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/tokenizer/pretokenizer.h"

namespace paraplan {

class BpeTokenizer {
 public:
  // Reads `path`: a .json file as Hugging Face's format, a protobuf as
  // SentencePiece's model, anything else as tiktoken's. Throws
  // std::runtime_error naming the file, the field and what is supported.
  static BpeTokenizer from_file(const std::string& path);
  // The same from the file's bytes; `path` names it in messages and its
  // extension (.json) or first byte (a protobuf's) picks the format.
  static BpeTokenizer parse(const std::string& text, const std::string& path);

  // Appends the tokens of `text` to `out`; counts the bytes that are not
  // valid UTF-8 (encoded as bytes all the same) where asked.
  void encode(std::string_view text, std::vector<int32_t>& out,
              int64_t* invalid_utf8_bytes = nullptr) const {
    encode_text(text, /*starts_text=*/true, out, invalid_utf8_bytes);
  }
  std::vector<int32_t> encode(std::string_view text) const;
  // The same for text that continues earlier text (a HellaSwag ending after
  // its context, a chunk of a long document): no prefix space, which belongs
  // to the start of a text.
  void encode_continuation(std::string_view text, std::vector<int32_t>& out,
                           int64_t* invalid_utf8_bytes = nullptr) const {
    encode_text(text, /*starts_text=*/false, out, invalid_utf8_bytes);
  }
  std::vector<int32_t> encode_continuation(std::string_view text) const;
  // The bytes of the tokens (special tokens as their text), less the space
  // the tokenizer's decoder strips from the start of a text (Strip, Llama 2's
  // and Mistral's): Hugging Face's decode. Throws on an id the tokenizer
  // does not have, naming it and its position.
  std::string decode(const int32_t* tokens, size_t count) const;
  std::string decode(const std::vector<int32_t>& tokens) const {
    return decode(tokens.data(), tokens.size());
  }
  // The bytes of tokens that continue earlier ones: nothing stripped.
  std::string decode_continuation(const std::vector<int32_t>& tokens) const;

  // One past the largest id: the rows of the model's embedding it needs.
  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  // The id of a special (added) token, e.g. "<|endoftext|>".
  std::optional<int32_t> special_token(std::string_view content) const;
  // The byte-level pattern (meaningless for a SentencePiece-style tokenizer).
  PretokenizerPattern pattern() const { return pattern_; }
  bool normalizes_to_nfc() const { return nfc_; }
  bool is_sentencepiece() const { return metaspace_.enabled; }
  // The token a SentencePiece-style tokenizer gives characters it has no
  // token or bytes for (its unk_token); nullopt where there is none.
  std::optional<int32_t> unknown_token() const {
    return unknown_token_ >= 0 ? std::optional<int32_t>(unknown_token_) : std::nullopt;
  }
  // Whether text cut where corpus.h's long documents are cut (before a space
  // between letters, after a lone newline) encodes as the whole does: true
  // of byte-level patterns, and of a SentencePiece vocabulary where no token
  // has a space after another character or a character after a newline (so
  // no merge crosses the cut; SentencePiece's split_by_whitespace).
  bool cuts_safely_at_spaces() const { return cuts_safely_at_spaces_; }
  // "GPT-2 pattern, 50,257 tokens (tokenizer.json)".
  std::string description() const;
  // This tokenizer as a Hugging Face tokenizer.json (what transformers'
  // AutoTokenizer and `tokenizers` load, and this class reads back to the
  // same tokenizer): its vocabulary in ByteLevel's alphabet, its merges (for
  // a tiktoken file, each token as the pair BPE reaches just below its rank,
  // as Hugging Face converts tiktoken files; tokens no merge reaches are
  // left to ignore_merges), its pattern, normalizer and special tokens
  // (bpe_tokenizer_export.cc); a SentencePiece-style one in its own form
  // (a SentencePiece model as Llama 2's and Mistral's repositories ship it).
  std::string to_hugging_face_json() const;

 private:
  friend class BpeTokenizerReader;
  // Where the prefix space goes: before every text (SentencePiece's dummy
  // prefix, Hugging Face's Prepend normalizer), before a text that does not
  // start with one (ByteLevel's add_prefix_space, Metaspace's "first"), or
  // nowhere.
  enum class PrefixSpace : uint8_t { kNone, kUnlessSpace, kAlways };
  // SentencePiece-style (is_sentencepiece): how the file said it, so that
  // to_hugging_face_json writes it back the same way.
  struct Metaspace {
    bool enabled = false;
    bool split_words = false;          // Metaspace's split: a piece begins at each space
    bool as_pre_tokenizer = false;     // Metaspace pre-tokenizer, else Prepend/Replace normalizers
    bool strip_decoded_space = false;  // the Strip decoder: one leading space off a text
  };
  // Appends the tokens of one byte-level piece (the pattern already applied).
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, bool starts_text, std::vector<int32_t>& out,
                   int64_t* invalid_utf8_bytes) const;
  void encode_metaspace(std::string_view text, bool starts_text, std::vector<int32_t>& out,
                        int64_t* invalid_utf8_bytes) const;
  // Appends a SentencePiece-style piece's first symbols: its characters'
  // tokens, or their fallbacks.
  void append_characters(std::string_view piece, std::vector<int32_t>& symbols,
                         int64_t& invalid_utf8_bytes) const;
  // Merges adjacent symbols by priority (encode_piece's heap) and appends them.
  void merge_and_append(std::vector<int32_t>& symbols, std::vector<int32_t>& out) const;
  struct Merge {
    uint32_t priority;
    int32_t result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  std::optional<Merge> find_merge(int32_t left, int32_t right) const;
  // Every merge as (left, right) ids in priority order (to_hugging_face_json).
  std::vector<std::pair<int32_t, int32_t>> merge_pairs() const;
  // to_hugging_face_json of a SentencePiece-style tokenizer
  // (bpe_tokenizer_metaspace.cc).
  std::string metaspace_hugging_face_json() const;

  std::string source_;  // the file, for messages
  PretokenizerPattern pattern_ = PretokenizerPattern::kGpt2;
  PrefixSpace prefix_space_ = PrefixSpace::kNone;
  Metaspace metaspace_;
  bool cuts_safely_at_spaces_ = true;
  bool nfc_ = false;  // the NFC normalizer (Qwen 2's) before the pattern
  // A piece that is a token is that token without merging (tiktoken always;
  // Hugging Face's ignore_merges, Llama 3's tokenizer.json).
  bool whole_piece_lookup_ = false;
  std::vector<std::string> token_bytes_;  // id -> its bytes; empty: no such id
  std::vector<bool> is_special_;
  std::unordered_map<std::string, int32_t> id_of_bytes_;  // ordinary tokens
  std::unordered_map<std::string, int32_t> special_ids_;
  int32_t byte_tokens_[256] = {};  // byte-level: each byte's token
  // SentencePiece-style: each byte's <0xNN> token (-1: none), the unknown
  // token (-1: none) and whether a run of unknown characters is one token.
  int32_t byte_fallback_tokens_[256] = {};
  int32_t unknown_token_ = -1;
  bool fuse_unknown_ = false;
  std::unordered_map<char32_t, int32_t> character_tokens_;  // one-character tokens
  std::unordered_map<uint64_t, Merge> merges_;              // Hugging Face: by pair
  bool merge_by_rank_ = false;  // tiktoken: the joined bytes' rank, looked up
};

// Hugging Face's ByteLevel alphabet: byte b is written as the character
// byte_level_characters()[b] (printable Latin-1 as itself, the rest from
// U+0100 on).
std::array<char32_t, 256> byte_level_characters();

// The special token before each document, as llm.c's data scripts write it
// (and `paraplan tokenize` by default): <|endoftext|> where the tokenizer has
// it (GPT-2, Qwen 2), else <|begin_of_text|> (Llama 3); empty if neither.
std::string default_document_separator(const BpeTokenizer& tokenizer);

// BpeTokenizer::from_file, refused when its ids do not fit a model of
// `vocab_size` rows (named by `model_source`, e.g. its config.json): a model
// may pad its vocabulary (GPT-2's 50,257 in 50,304), never lack ids.
BpeTokenizer load_tokenizer_for_model(const std::string& path, int64_t vocab_size,
                                      const std::string& model_source);

// The tokenizer file kept beside a checkpoint's or a Hugging Face model's
// config.json in `directory`: tokenizer.json, else its one *.tiktoken file;
// empty when there is none. Throws when there are several *.tiktoken files
// and no tokenizer.json (naming them).
std::string tokenizer_file_in(const std::string& directory);

}  // namespace paraplan
