// bpe_tokenizer_export.cc: a BpeTokenizer written as a Hugging Face
// tokenizer.json (BpeTokenizer::to_hugging_face_json), so that a model trained
// from a tiktoken file keeps a tokenizer transformers loads.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/tokenizer_json_writer.h"
#include "runtime/tokenizer/utf8.h"

namespace paraplan {

namespace {

using nlohmann::json;

// A token's bytes in ByteLevel's alphabet.
std::string byte_level_text(const std::string& bytes) {
  static const std::array<char32_t, 256> characters = byte_level_characters();
  std::string text;
  for (const char byte : bytes) append_utf8(characters[static_cast<unsigned char>(byte)], text);
  return text;
}

json byte_level_node(bool use_regex, bool add_prefix_space) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

}  // namespace

std::vector<std::pair<int32_t, int32_t>> BpeTokenizer::merge_pairs() const {
  // (priority, left, right): Hugging Face's merges as read, or a tiktoken
  // file's, each token split where BPE with the ranks below its own stops.
  std::vector<std::tuple<uint32_t, int32_t, int32_t>> merges;
  if (merge_by_rank_) {
    for (int32_t id = 0; id < vocab_size(); ++id) {
      const std::string& bytes = token_bytes_[id];
      if (is_special_[id] || bytes.size() < 2) continue;
      std::vector<std::string> parts;
      for (const char byte : bytes) parts.emplace_back(1, byte);
      while (parts.size() > 2) {
        int32_t best_rank = -1;
        size_t best = 0;
        for (size_t i = 0; i + 1 < parts.size(); ++i) {
          const auto found = id_of_bytes_.find(parts[i] + parts[i + 1]);
          if (found != id_of_bytes_.end() && found->second < id &&
              (best_rank < 0 || found->second < best_rank))
            best_rank = found->second, best = i;
        }
        if (best_rank < 0) break;  // no merge reaches it (Llama 3 has such tokens)
        parts[best] += parts[best + 1];
        parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
      }
      if (parts.size() == 2)
        merges.emplace_back(static_cast<uint32_t>(id), id_of_bytes_.at(parts[0]),
                            id_of_bytes_.at(parts[1]));
    }
  } else {
    for (const auto& [key, merge] : merges_)
      merges.emplace_back(merge.priority, static_cast<int32_t>(key >> 32),
                          static_cast<int32_t>(key & 0xffffffffu));
  }
  std::sort(merges.begin(), merges.end());
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (const auto& [priority, left, right] : merges) pairs.emplace_back(left, right);
  return pairs;
}

std::string BpeTokenizer::to_hugging_face_json() const {
  if (metaspace_.enabled) return metaspace_hugging_face_json();
  json vocab = json::object(), added = json::array();
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (token_bytes_[id].empty()) continue;
    if (is_special_[id])
      added.push_back(tokenizer_json::special_token(id, token_bytes_[id]));
    else
      vocab[byte_level_text(token_bytes_[id])] = id;
  }
  json merge_list = json::array();
  for (const auto& [left, right] : merge_pairs())
    merge_list.push_back(byte_level_text(token_bytes_[left]) + " " +
                         byte_level_text(token_bytes_[right]));
  // GPT-2's pattern is ByteLevel's own; the others a Split before it.
  json pre_tokenizer = byte_level_node(true, prefix_space_ != PrefixSpace::kNone);
  if (pattern_ != PretokenizerPattern::kGpt2) {
    json split = {{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false}};
    split["pattern"] = {{"Regex", std::string(pretokenizer_regex(pattern_))}};
    pre_tokenizer = {{"type", "Sequence"}};
    pre_tokenizer["pretokenizers"] = json::array({split, byte_level_node(false, false)});
  }
  return tokenizer_json::file(added, nfc_ ? json{{"type", "NFC"}} : json(nullptr), pre_tokenizer,
                              byte_level_node(true, true),
                              {{"type", "BPE"},
                               {"dropout", nullptr},
                               {"unk_token", nullptr},
                               {"continuing_subword_prefix", ""},
                               {"end_of_word_suffix", ""},
                               {"fuse_unk", false},
                               {"byte_fallback", false},
                               {"ignore_merges", whole_piece_lookup_},
                               {"vocab", vocab},
                               {"merges", merge_list}});
}

}  // namespace paraplan
