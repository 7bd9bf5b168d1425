// test_tokenizer.h: small BPE tokenizer.json files for the tests of this
// folder: byte-level (the 256 bytes as ids 0..255, the merges given, and
// <|endoftext|> after them) and SentencePiece-style (as transformers writes
// Llama 2's and Mistral's). Header-only, tests only.
#pragma once

#include <cstdio>
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

// A SentencePiece-style tokenizer.json in the form transformers writes for
// Llama 2 and Mistral (legacy: the normalizers Prepend "▁" and Replace " " ->
// "▁"; decoder Replace, ByteFallback, Fuse, Strip): <unk>, <s> and </s> as
// ids 0..2 (added tokens too), the 256 <0xNN> tokens as 3..258, then
// `characters` (UTF-8, "▁" for a space), then each merge's result in order.
inline nlohmann::json sentencepiece_json(
    const std::vector<std::string>& characters,
    const std::vector<std::pair<std::string, std::string>>& merges) {
  using nlohmann::json;
  const std::string space = "\xE2\x96\x81";
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const std::string& c : characters) vocab[c] = next++;
  json merge_list = json::array();
  for (const auto& [left, right] : merges) {
    merge_list.push_back(left + " " + right);
    if (!vocab.contains(left + right)) vocab[left + right] = next++;
  }
  json added = json::array();
  for (const char* special : {"<unk>", "<s>", "</s>"})
    added.push_back({{"id", vocab[special]}, {"content", special}, {"special", true}});
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}};
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", space}}, replace})}}},
          {"pre_tokenizer", nullptr},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             json::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

}  // namespace paraplan::testing
