// bpe_tokenizer.cc: encoding (pieces, then merges by priority) and decoding.
// The files are read in bpe_tokenizer_files.cc.
#include "runtime/tokenizer/bpe_tokenizer.h"

#include <queue>
#include <stdexcept>

#include "runtime/tokenizer/unicode_normalization.h"

namespace paraplan {

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

// The merges of one piece in O(n log n): the pieces of long runs (a line of
// 10,000 '=') would be quadratic by repeated scans. Every adjacent pair that
// merges waits in a heap ordered by (priority, position), so the
// highest-priority pair goes first and the leftmost of equals, as tiktoken and
// Hugging Face both choose; an entry whose symbols changed since it was pushed
// is skipped when it comes up.
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
  struct Symbol {
    int32_t token;
    int32_t next;  // -1: the last
    int32_t prev;  // -1: the first
  };
  const int32_t count = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(count);
  for (int32_t i = 0; i < count; ++i)
    symbols[i] = {byte_tokens_[static_cast<unsigned char>(piece[i])], i + 1 < count ? i + 1 : -1,
                  i - 1};
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
    if (left < 0 || symbols[left].next < 0) return;
    const int32_t right_token = symbols[symbols[left].next].token;
    if (const std::optional<Merge> merge = find_merge(symbols[left].token, right_token))
      heap.push({merge->priority, left, symbols[left].token, right_token, merge->result});
  };
  for (int32_t i = 0; i + 1 < count; ++i) offer(i);
  while (!heap.empty()) {
    const Candidate candidate = heap.top();
    heap.pop();
    Symbol& left = symbols[candidate.left];
    if (left.token != candidate.left_token || left.next < 0 ||
        symbols[left.next].token != candidate.right_token)
      continue;  // stale: one of the two merged since
    const int32_t right = left.next;
    left.token = candidate.result;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = candidate.left;
    symbols[right].token = -1;
    offer(left.prev);
    offer(candidate.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].token);
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out,
                          int64_t* invalid_utf8_bytes) const {
  std::string normalized, prefixed;
  if (nfc_) {  // Hugging Face's order: the normalizer, then the pre-tokenizer
    normalized = to_nfc(text);
    text = normalized;
  }
  if (add_prefix_space_ && !text.empty() && text[0] != ' ') {
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

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens;
  encode(text, tokens);
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
  return text;
}

std::optional<int32_t> BpeTokenizer::special_token(std::string_view content) const {
  const auto found = special_ids_.find(std::string(content));
  if (found == special_ids_.end()) return std::nullopt;
  return found->second;
}

}  // namespace paraplan
