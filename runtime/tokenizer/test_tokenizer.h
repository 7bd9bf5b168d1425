// test_tokenizer.h: small byte-level BPE tokenizer.json files for the tests
// of this folder: the 256 bytes as ids 0..255, the merges given, and
// <|endoftext|> after them. Header-only, tests only.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tokenizer/utf8.h"

namespace paraplan::testing {

// Hugging Face's ByteLevel character for byte b, as UTF-8.
inline std::string byte_level(unsigned char b) {
  int next = 256, code = -1;
  for (int x = 0; x <= b; ++x) {
    const bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
    code = printable ? x : next++;
  }
  std::string text;
  append_utf8(static_cast<char32_t>(code), text);
  return text;
}

inline std::string byte_level(const std::string& bytes) {
  std::string text;
  for (const char c : bytes) text += byte_level(static_cast<unsigned char>(c));
  return text;
}

// A tokenizer.json: the 256 bytes (ids 0..255 in byte order), then `merges`
// (each "left right" in bytes; the merged token gets the next id), and
// <|endoftext|> as an added token after them.
inline nlohmann::json tokenizer_json(
    const std::vector<std::pair<std::string, std::string>>& merges) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level(static_cast<unsigned char>(b))] = b;
  json merge_list = json::array();
  int next = 256;
  for (const auto& [left, right] : merges) {
    merge_list.push_back(byte_level(left) + " " + byte_level(right));
    if (!vocab.contains(byte_level(left + right))) vocab[byte_level(left + right)] = next++;
  }
  return {
      {"version", "1.0"},
      {"added_tokens", {{{"id", next}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

}  // namespace paraplan::testing
