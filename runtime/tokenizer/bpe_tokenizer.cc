// bpe_tokenizer.cc: encoding (pieces, then merges by priority) and decoding.
// The files are read in bpe_tokenizer_files.cc.
#include "runtime/tokenizer/bpe_tokenizer.h"

#include <queue>
#include <stdexcept>

#include "runtime/tokenizer/unicode_normalization.h"
#include "runtime/tokenizer/utf8.h"

namespace paraplan {

namespace {
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
}  // namespace

std::optional<BpeTokenizer::Merge> BpeTokenizer::find_merge(int32_t left, int32_t right) const {
  if (merge_by_rank_) {
    thread_local std::string joined;  // no allocation per pair
    joined.assign(token_bytes_[left]).append(token_bytes_[right]);
    const auto found = id_of_bytes_.find(joined);
    if (found == id_of_bytes_.end()) return std::nullopt;
    return Merge{static_cast<uint32_t>(found->second), found->second};
  }
  const auto found = merges_.find(pair_key(left, right));
  if (found == merges_.end()) return std::nullopt;
  return found->second;
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(byte_tokens_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (whole_piece_lookup_) {
    const auto found = id_of_bytes_.find(std::string(piece));
    if (found != id_of_bytes_.end()) {
      out.push_back(found->second);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  for (const char byte : piece) symbols.push_back(byte_tokens_[static_cast<unsigned char>(byte)]);
  merge_and_append(symbols, out);
}

// The merges of one piece in O(n log n): the pieces of long runs (a line of
// 10,000 '=', a SentencePiece document) would be quadratic by repeated
// scans. Every adjacent pair that merges waits in a heap ordered by
// (priority, position), so the highest-priority pair goes first and the
// leftmost of equals, as tiktoken and Hugging Face both choose; an entry
// whose symbols changed since it was pushed is skipped when it comes up.
void BpeTokenizer::merge_and_append(std::vector<int32_t>& tokens, std::vector<int32_t>& out) const {
  const auto count = static_cast<int32_t>(tokens.size());
  if (count == 0) return;
  thread_local std::vector<int32_t> next, prev;
  next.resize(count);
  prev.resize(count);
  for (int32_t i = 0; i < count; ++i) {
    next[i] = i + 1 < count ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Candidate {
    uint32_t priority;
    int32_t left;
    int32_t left_token, right_token, result;
    bool operator>(const Candidate& other) const {
      return priority != other.priority ? priority > other.priority : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto offer = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const int32_t right_token = tokens[next[left]];
    if (const std::optional<Merge> merge = find_merge(tokens[left], right_token))
      heap.push({merge->priority, left, tokens[left], right_token, merge->result});
  };
  for (int32_t i = 0; i + 1 < count; ++i) offer(i);
  while (!heap.empty()) {
    const Candidate candidate = heap.top();
    heap.pop();
    const int32_t left = candidate.left;
    if (tokens[left] != candidate.left_token || next[left] < 0 ||
        tokens[next[left]] != candidate.right_token)
      continue;  // stale: one of the two merged since
    const int32_t right = next[left];
    tokens[left] = candidate.result;
    next[left] = next[right];
    if (next[left] >= 0) prev[next[left]] = left;
    tokens[right] = -1;
    offer(prev[left]);
    offer(left);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(tokens[i]);
}

void BpeTokenizer::encode_text(std::string_view text, bool starts_text, std::vector<int32_t>& out,
                               int64_t* invalid_utf8_bytes) const {
  if (metaspace_.enabled) {
    encode_metaspace(text, starts_text, out, invalid_utf8_bytes);
    return;
  }
  std::string normalized, prefixed;
  if (nfc_) {  // Hugging Face's order: the normalizer, then the pre-tokenizer
    normalized = to_nfc(text);
    text = normalized;
  }
  if (starts_text && prefix_space_ != PrefixSpace::kNone && !text.empty() &&
      (prefix_space_ == PrefixSpace::kAlways || text[0] != ' ')) {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  PretokenizeResult split;
  pretokenize(pattern_, text, split);
  if (invalid_utf8_bytes != nullptr) *invalid_utf8_bytes += split.invalid_utf8_bytes;
  for (const std::string_view piece : split.pieces) encode_piece(piece, out);
}

// SentencePiece-style: the text as Hugging Face's normalizers (or
// Metaspace) leave it, in this class's terms: a literal "▁" is a space like
// any other, the prefix space goes first, and the text is one piece, or one
// per word (each space begins one, as Metaspace's split does).
void BpeTokenizer::encode_metaspace(std::string_view text, bool starts_text,
                                    std::vector<int32_t>& out, int64_t* invalid_utf8_bytes) const {
  if (text.empty()) return;
  std::string spaced;
  spaced.reserve(text.size() + 1);
  if (starts_text && prefix_space_ != PrefixSpace::kNone &&
      (prefix_space_ == PrefixSpace::kAlways ||
       (text[0] != ' ' && text.substr(0, kMetaspace.size()) != kMetaspace)))
    spaced.push_back(' ');
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == kMetaspace[0] && text.substr(i, kMetaspace.size()) == kMetaspace) {
      spaced.push_back(' ');
      i += kMetaspace.size() - 1;
    } else {
      spaced.push_back(text[i]);
    }
  }
  int64_t invalid = 0;
  thread_local std::vector<int32_t> symbols;
  const std::string_view all(spaced);
  for (size_t begin = 0; begin < all.size();) {
    size_t end = all.size();
    if (metaspace_.split_words) {
      end = all.find(' ', begin + 1);
      if (end == std::string_view::npos) end = all.size();
    }
    const std::string_view piece = all.substr(begin, end - begin);
    begin = end;
    if (whole_piece_lookup_) {  // Hugging Face's ignore_merges
      if (const auto found = id_of_bytes_.find(std::string(piece)); found != id_of_bytes_.end()) {
        out.push_back(found->second);
        continue;
      }
    }
    symbols.clear();
    append_characters(piece, symbols, invalid);
    merge_and_append(symbols, out);
  }
  if (invalid_utf8_bytes != nullptr) *invalid_utf8_bytes += invalid;
}

// Each character is its token where the vocabulary has one, else its bytes'
// <0xNN> tokens where it has them all, else the unknown token, as Hugging
// Face's BPE starts a word: a run of unknown characters is one unknown token
// where the file fuses them, and an unknown token waits for the next known
// character (byte fallbacks go before it). A space falls back as the "▁" it
// is in the file's terms, and a byte that is not valid UTF-8 as its own
// <0xNN> token.
void BpeTokenizer::append_characters(std::string_view piece, std::vector<int32_t>& symbols,
                                     int64_t& invalid_utf8_bytes) const {
  const auto* bytes = reinterpret_cast<const unsigned char*>(piece.data());
  bool unknown_waiting = false;
  for (size_t i = 0, length = 0; i < piece.size(); i += length) {
    const char32_t c = decode_utf8(bytes + i, piece.size() - i, length);
    if (c == kInvalidUtf8) invalid_utf8_bytes += static_cast<int64_t>(length);
    if (const auto found = character_tokens_.find(c); found != character_tokens_.end()) {
      if (unknown_waiting) symbols.push_back(unknown_token_);
      unknown_waiting = false;
      symbols.push_back(found->second);
      continue;
    }
    const std::string_view fallback = c == ' ' ? kMetaspace : piece.substr(i, length);
    bool all_bytes = true;
    for (const char byte : fallback)
      all_bytes &= byte_fallback_tokens_[static_cast<unsigned char>(byte)] >= 0;
    if (all_bytes) {
      for (const char byte : fallback)
        symbols.push_back(byte_fallback_tokens_[static_cast<unsigned char>(byte)]);
      continue;
    }
    // The reader requires an unknown token where the byte tokens are not all there.
    if (unknown_waiting && !fuse_unknown_) symbols.push_back(unknown_token_);
    unknown_waiting = true;
  }
  if (unknown_waiting) symbols.push_back(unknown_token_);
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  encode(text, tokens);
  return tokens;
}

std::vector<int32_t> BpeTokenizer::encode_continuation(std::string_view text) const {
  std::vector<int32_t> tokens;
  encode_continuation(text, tokens);
  return tokens;
}

std::string BpeTokenizer::decode(const int32_t* tokens, size_t count) const {
  std::string text;
  for (size_t i = 0; i < count; ++i) {
    const int32_t token = tokens[i];
    if (token < 0 || token >= vocab_size() || (token_bytes_[token].empty() && !is_special_[token]))
      throw std::runtime_error(source_ + ": has no token " + std::to_string(token) + " (position " +
                               std::to_string(i) + "); its ids are below " +
                               std::to_string(vocab_size()));
    text += token_bytes_[token];
  }
  if (metaspace_.strip_decoded_space && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

std::string BpeTokenizer::decode_continuation(const std::vector<int32_t>& tokens) const {
  // The stripped space is the prefix of a text; a continuation keeps it.
  std::string text = decode(tokens);
  if (metaspace_.strip_decoded_space && !tokens.empty() && !token_bytes_[tokens[0]].empty() &&
      token_bytes_[tokens[0]][0] == ' ')
    text.insert(0, 1, ' ');
  return text;
}

std::optional<int32_t> BpeTokenizer::special_token(std::string_view content) const {
  const auto found = special_ids_.find(std::string(content));
  if (found == special_ids_.end()) return std::nullopt;
  return found->second;
}

}  // namespace paraplan
