// bpe_tokenizer_metaspace.cc: SentencePiece-style BPE tokenizer.json files
// (Llama 2's, Mistral's: what transformers writes for a SentencePiece
// tokenizer.model): where the file says spaces are "▁" and where the prefix
// space goes, its decoder, and its vocabulary in BpeTokenizer's terms (a
// space for "▁", a byte for "<0xNN>"); and the same written back
// (to_hugging_face_json's part for them). Each field is checked, one message
// naming the file, the field and what paraplan reads.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "common/json_fields.h"
#include "common/printable_text.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/bpe_tokenizer_reader.h"
#include "runtime/tokenizer/tokenizer_json_writer.h"
#include "runtime/tokenizer/utf8.h"

namespace paraplan {

namespace {

using nlohmann::json;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string type_of(const json& node) {
  return node.is_object() && node.contains("type") && node["type"].is_string()
             ? node["type"].get<std::string>()
             : std::string();
}

// A field's JSON as the messages show it (objects written out, shortened).
std::string node_text(const json& node) {
  return node.is_structured() ? printable_text(node.dump(), 200) : json_value_text(node);
}

// Replace of the string `from` by `to` (not a Regex pattern).
bool is_replace(const json& node, std::string_view from, std::string_view to) {
  return type_of(node) == "Replace" && node.contains("pattern") && node["pattern"].is_object() &&
         node["pattern"].contains("String") && node["pattern"]["String"] == from &&
         node.value("content", json()) == to;
}

bool is_prepend_metaspace(const json& node) {
  return type_of(node) == "Prepend" && node.value("prepend", json()) == kMetaspace;
}

// The normalizers, as a list (a Sequence's, or the one).
json normalizer_list(const json& normalizer) {
  if (type_of(normalizer) == "Sequence" && normalizer.contains("normalizers") &&
      normalizer["normalizers"].is_array())
    return normalizer["normalizers"];
  return normalizer.is_null() ? json::array() : json::array({normalizer});
}

const char* kTextForms =
    "SentencePiece-style files have the normalizers Prepend \"\xE2\x96\x81\" (optional) and "
    "Replace \" \" -> \"\xE2\x96\x81\" with no pre-tokenizer, or no normalizer and the "
    "pre-tokenizer Metaspace (replacement \"\xE2\x96\x81\")";

}  // namespace

bool BpeTokenizerReader::is_metaspace(const json& root) {
  if (type_of(root.value("pre_tokenizer", json())) == "Metaspace") return true;
  for (const json& node : normalizer_list(root.value("normalizer", json())))
    if (is_replace(node, " ", kMetaspace)) return true;
  return false;
}

void BpeTokenizerReader::read_metaspace_text_form(BpeTokenizer& tokenizer, const json& root,
                                                  const std::string& path) {
  using PrefixSpace = BpeTokenizer::PrefixSpace;
  const json normalizer = root.value("normalizer", json());
  const json pre = root.value("pre_tokenizer", json());
  if (type_of(pre) == "Metaspace") {
    if (!normalizer.is_null())
      throw std::runtime_error(path + ": normalizer is " + node_text(normalizer) +
                               " beside the pre-tokenizer Metaspace; " + kTextForms);
    if (pre.value("replacement", json()) != kMetaspace)
      throw std::runtime_error(path + ": pre_tokenizer.replacement is " +
                               json_value_text(pre.value("replacement", json())) + "; " +
                               kTextForms);
    // "first" and "always" agree on text without special tokens in it (paraplan
    // places those by id); files before tokenizers 0.15 say add_prefix_space.
    const json scheme = pre.value("prepend_scheme", json());
    if (scheme.is_null()) {
      tokenizer.prefix_space_ =
          pre.value("add_prefix_space", true) ? PrefixSpace::kUnlessSpace : PrefixSpace::kNone;
    } else if (scheme == "first" || scheme == "always") {
      tokenizer.prefix_space_ = PrefixSpace::kUnlessSpace;
    } else if (scheme == "never") {
      tokenizer.prefix_space_ = PrefixSpace::kNone;
    } else {
      throw std::runtime_error(path + ": pre_tokenizer.prepend_scheme is " +
                               json_value_text(scheme) +
                               ", expected \"first\", \"always\" or \"never\"");
    }
    // Files before tokenizers 0.19 always split at spaces.
    tokenizer.metaspace_.split_words = pre.value("split", true);
    tokenizer.metaspace_.as_pre_tokenizer = true;
    return;
  }
  if (!pre.is_null())
    throw std::runtime_error(path + ": pre_tokenizer is " + node_text(pre) +
                             " after SentencePiece's normalizers; " + kTextForms);
  const json list = normalizer_list(normalizer);
  const bool prepend = !list.empty() && is_prepend_metaspace(list[0]);
  if (list.size() != (prepend ? 2u : 1u) || !is_replace(list[prepend ? 1 : 0], " ", kMetaspace))
    throw std::runtime_error(path + ": normalizer is " + node_text(normalizer) + "; " + kTextForms);
  tokenizer.prefix_space_ = prepend ? PrefixSpace::kAlways : PrefixSpace::kNone;
}

// Replace "▁" -> " ", then ByteFallback (where the model falls back to
// bytes), Fuse and Strip (one space off the start of the fused text), in that
// order, each but the first optional: what transformers writes.
void BpeTokenizerReader::read_metaspace_decoder(BpeTokenizer& tokenizer, const json& decoder,
                                                bool byte_fallback, const std::string& path) {
  const std::string expected =
      "; expected a Sequence of Replace \"\xE2\x96\x81\" -> \" \", ByteFallback, Fuse and Strip "
      "(content \" \", start 0 or 1, stop 0), as transformers writes for Llama 2 and Mistral";
  const json list = type_of(decoder) == "Sequence" && decoder.contains("decoders") &&
                            decoder["decoders"].is_array()
                        ? decoder["decoders"]
                        : json::array({decoder});
  size_t at = 0;
  if (list.empty() || !is_replace(list[0], kMetaspace, " "))
    throw std::runtime_error(path + ": decoder is " + node_text(decoder) + expected);
  ++at;
  const bool decodes_bytes = at < list.size() && type_of(list[at]) == "ByteFallback";
  at += decodes_bytes;
  if (byte_fallback != decodes_bytes)
    throw std::runtime_error(
        path +
        (byte_fallback ? ": decoder has no ByteFallback though model.byte_fallback is "
                         "true (a <0xNN> token would decode as its name)"
                       : ": decoder has ByteFallback though model.byte_fallback is false "
                         "(paraplan would decode a <0xNN> token as its name)") +
        expected);
  const bool fused = at < list.size() && type_of(list[at]) == "Fuse";
  at += fused;
  if (at < list.size() && type_of(list[at]) == "Strip" && fused) {
    const json& strip = list[at];
    const json start = strip.value("start", json()), stop = strip.value("stop", json());
    if (strip.value("content", json()) != " " || !(start == 0 || start == 1) || stop != 0)
      throw std::runtime_error(path + ": decoder's Strip is " + node_text(strip) + expected);
    tokenizer.metaspace_.strip_decoded_space = start == 1;
    ++at;
  }
  if (at != list.size())
    throw std::runtime_error(path + ": decoder's part " + std::to_string(at) + " is " +
                             node_text(list[at]) + expected);
}

void BpeTokenizerReader::read_metaspace_vocab(BpeTokenizer& tokenizer, const json& model,
                                              const std::string& path) {
  const json vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty())
    throw std::runtime_error(path + ": model.vocab is " + json_value_text(vocab) +
                             ", expected an object of token -> id");
  const bool byte_fallback = model.value("byte_fallback", false);
  for (const auto& [key, id] : vocab.items()) {
    const std::string where = path + ": model.vocab[\"" + printable_text(key) + "\"]";
    if (!id.is_number_integer()) throw std::runtime_error(where + " is not an integer id");
    if (const int byte = byte_fallback ? fallback_byte_of(key) : -1; byte >= 0) {
      add_token(tokenizer, id.get<int64_t>(), std::string(1, static_cast<char>(byte)),
                TokenKind::kByteFallback, where);
      tokenizer.byte_fallback_tokens_[byte] = id.get<int32_t>();
      continue;
    }
    if (key.find(' ') != std::string::npos)
      throw std::runtime_error(where + " has a space, which no SentencePiece-style text has " +
                               "(its spaces are \xE2\x96\x81); " + kSupportedTokenizers);
    std::string bytes;
    for (size_t i = 0; i < key.size(); ++i) {
      if (key.compare(i, kMetaspace.size(), kMetaspace) == 0) {
        bytes.push_back(' ');
        i += kMetaspace.size() - 1;
      } else {
        bytes.push_back(key[i]);
      }
    }
    add_token(tokenizer, id.get<int64_t>(), std::move(bytes), TokenKind::kOrdinary, where);
  }
  if (const json unknown = model.value("unk_token", json()); !unknown.is_null()) {
    if (!unknown.is_string() || !vocab.contains(unknown.get<std::string>()))
      throw std::runtime_error(path + ": model.unk_token is " + json_value_text(unknown) +
                               ", which is not in model.vocab");
    tokenizer.unknown_token_ = vocab[unknown.get<std::string>()].get<int32_t>();
  }
  tokenizer.fuse_unknown_ = model.value("fuse_unk", false);
  tokenizer.whole_piece_lookup_ = model.value("ignore_merges", false);
}

void BpeTokenizerReader::finish_metaspace(BpeTokenizer& tokenizer) {
  bool all_bytes = true;
  for (const int32_t token : tokenizer.byte_fallback_tokens_) all_bytes &= token >= 0;
  // Unknown characters fuse and wait for a known one across any cut.
  if (!all_bytes) tokenizer.cuts_safely_at_spaces_ = false;
  if (!all_bytes && tokenizer.unknown_token_ < 0)
    throw std::runtime_error(tokenizer.source_ +
                             ": model.unk_token is null and model.vocab lacks some of the 256 "
                             "<0xNN> tokens byte_fallback needs, so a character outside the "
                             "vocabulary would have no token; give the file its unk_token");
  // One-character tokens, looked up by code point as encoding starts each
  // piece; and whether a token crosses the cuts of long documents.
  for (const auto& [bytes, id] : tokenizer.id_of_bytes_) {
    size_t length = 0;
    const char32_t c =
        decode_utf8(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), length);
    if (c != kInvalidUtf8 && length == bytes.size()) tokenizer.character_tokens_[c] = id;
    for (size_t i = 1; i < bytes.size(); ++i)
      if ((bytes[i] == ' ' && bytes[i - 1] != ' ') || bytes[i - 1] == '\n')
        tokenizer.cuts_safely_at_spaces_ = false;
  }
}

BpeTokenizer BpeTokenizerReader::metaspace(const std::string& path, const json& root) {
  BpeTokenizer tokenizer;
  tokenizer.source_ = path;
  tokenizer.metaspace_.enabled = true;
  std::fill(std::begin(tokenizer.byte_fallback_tokens_), std::end(tokenizer.byte_fallback_tokens_),
            -1);
  const json model = root.value("model", json());
  read_metaspace_text_form(tokenizer, root, path);
  const bool byte_fallback = model.value("byte_fallback", false);
  read_metaspace_decoder(tokenizer, root.value("decoder", json()), byte_fallback, path);
  read_metaspace_vocab(tokenizer, model, path);
  read_added_tokens(tokenizer, root, path);
  finish_metaspace(tokenizer);
  read_merges(tokenizer, model.value("merges", json()), model["vocab"], path);
  return tokenizer;
}

std::string BpeTokenizer::metaspace_hugging_face_json() const {
  auto is_fallback = [&](int32_t id) {
    const std::string& bytes = token_bytes_[id];
    return !is_special_[id] && bytes.size() == 1 &&
           byte_fallback_tokens_[static_cast<unsigned char>(bytes[0])] == id;
  };
  auto key_of = [&](int32_t id) {
    const std::string& bytes = token_bytes_[id];
    if (is_fallback(id)) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(bytes[0]));
      return std::string(name);
    }
    if (is_special_[id]) return bytes;
    std::string key;
    for (const char byte : bytes)
      key += byte == ' ' ? std::string(kMetaspace) : std::string(1, byte);
    return key;
  };
  json vocab = json::object(), added = json::array();
  bool byte_fallback = false;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (token_bytes_[id].empty()) continue;
    const auto looked_up = id_of_bytes_.find(token_bytes_[id]);
    const bool in_vocab = looked_up != id_of_bytes_.end() && looked_up->second == id;
    const bool fallback = is_fallback(id);
    byte_fallback |= fallback;
    if (in_vocab || fallback) vocab[key_of(id)] = id;
    if (is_special_[id]) added.push_back(tokenizer_json::special_token(id, token_bytes_[id]));
  }
  json merge_list = json::array();
  // "left right", as tokenizers before 0.20 read them (keys hold no space).
  for (const auto& [left, right] : merge_pairs())
    merge_list.push_back(key_of(left) + " " + key_of(right));
  const json replace = {
      {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", std::string(kMetaspace)}};
  json normalizer = nullptr, pre_tokenizer = nullptr;
  if (metaspace_.as_pre_tokenizer) {
    pre_tokenizer = {{"type", "Metaspace"},
                     {"replacement", std::string(kMetaspace)},
                     {"prepend_scheme", prefix_space_ == PrefixSpace::kNone ? "never" : "first"},
                     {"split", metaspace_.split_words}};
  } else {
    normalizer = {{"type", "Sequence"}, {"normalizers", json::array()}};
    if (prefix_space_ == PrefixSpace::kAlways)
      normalizer["normalizers"].push_back(
          {{"type", "Prepend"}, {"prepend", std::string(kMetaspace)}});
    normalizer["normalizers"].push_back(replace);
  }
  json decoders = json::array({{{"type", "Replace"},
                                {"pattern", {{"String", std::string(kMetaspace)}}},
                                {"content", " "}}});
  if (byte_fallback) decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  if (metaspace_.strip_decoded_space)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return tokenizer_json::file(
      added, normalizer, pre_tokenizer, {{"type", "Sequence"}, {"decoders", decoders}},
      {{"type", "BPE"},
       {"dropout", nullptr},
       {"unk_token", unknown_token_ >= 0 ? json(key_of(unknown_token_)) : json(nullptr)},
       {"continuing_subword_prefix", nullptr},
       {"end_of_word_suffix", nullptr},
       {"fuse_unk", fuse_unknown_},
       {"byte_fallback", byte_fallback},
       {"ignore_merges", whole_piece_lookup_},
       {"vocab", vocab},
       {"merges", merge_list}});
}

}  // namespace paraplan
