// bpe_tokenizer_files.cc: BpeTokenizer from a Hugging Face tokenizer.json or a
// tiktoken ranks file, each field checked with one message naming the file,
// the field and what paraplan reads.
#include <algorithm>
#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/bounded_file.h"
#include "common/json_fields.h"
#include "common/printable_text.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/bpe_tokenizer_reader.h"
#include "runtime/tokenizer/utf8.h"

namespace paraplan {

namespace {

using nlohmann::json;

constexpr const char* kSupported = kSupportedTokenizers;

// A vocab key's bytes, or nullopt with the offending character where one is
// not in the ByteLevel alphabet.
std::optional<std::string> byte_level_bytes(const std::string& key, char32_t& offending) {
  static const std::vector<int> byte_of = [] {
    std::vector<int> table(512, -1);
    const std::array<char32_t, 256> characters = byte_level_characters();
    for (int b = 0; b < 256; ++b) table[characters[b]] = b;
    return table;
  }();
  std::string bytes;
  const auto* s = reinterpret_cast<const unsigned char*>(key.data());
  for (size_t i = 0; i < key.size();) {
    size_t length;  // the JSON parser checked the UTF-8
    const char32_t c = decode_utf8(s + i, key.size() - i, length);
    i += length;
    if (c >= byte_of.size() || byte_of[c] < 0) {
      offending = c;
      return std::nullopt;
    }
    bytes.push_back(static_cast<char>(byte_of[c]));
  }
  return bytes;
}

std::string code_point_text(char32_t c) {
  char text[16];
  std::snprintf(text, sizeof text, "U+%04X", static_cast<unsigned>(c));
  return text;
}

std::string decode_base64(std::string_view text, const std::string& where) {
  auto value = [&](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    throw std::runtime_error(
        where + ": '" + printable_text(std::string(1, c)) +
        "' is not base64; each line is a token's bytes in base64 and its rank");
  };
  std::string bytes;
  uint32_t buffer = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=') break;
    buffer = (buffer << 6) | static_cast<uint32_t>(value(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return bytes;
}

}  // namespace

std::array<char32_t, 256> byte_level_characters() {
  std::array<char32_t, 256> characters{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    characters[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return characters;
}

void BpeTokenizerReader::add_token(BpeTokenizer& tokenizer, int64_t id_given, std::string bytes,
                                   TokenKind kind, const std::string& where) {
  const bool special = kind == TokenKind::kSpecial;
  // Qwen 2 has 151,646 tokens; the bound keeps a stray id from sizing tables.
  constexpr int64_t kMaxId = (1 << 21) - 1;
  if (id_given < 0 || id_given > kMaxId)
    throw std::runtime_error(where + ": id " + std::to_string(id_given) + " is outside [0, " +
                             std::to_string(kMaxId) + "]");
  const auto id = static_cast<int32_t>(id_given);
  if (static_cast<size_t>(id) >= tokenizer.token_bytes_.size()) {
    tokenizer.token_bytes_.resize(id + 1);
    tokenizer.is_special_.resize(id + 1, false);
  }
  if (!tokenizer.token_bytes_[id].empty() || tokenizer.is_special_[id]) {
    if (special && tokenizer.token_bytes_[id] == bytes) {  // GPT-2's <|endoftext|>: both lists
      tokenizer.is_special_[id] = true;
      tokenizer.special_ids_[bytes] = id;
      return;
    }
    throw std::runtime_error(where + ": id " + std::to_string(id) + " is given twice");
  }
  if (bytes.empty())
    throw std::runtime_error(where + ": token " + std::to_string(id) + " is empty");
  tokenizer.is_special_[id] = special;
  if (special) {
    tokenizer.special_ids_[bytes] = id;
  } else if (kind == TokenKind::kOrdinary && !tokenizer.id_of_bytes_.emplace(bytes, id).second) {
    throw std::runtime_error(where + ": token " + std::to_string(id) + " (\"" +
                             printable_text(bytes) + "\") repeats token " +
                             std::to_string(tokenizer.id_of_bytes_.at(bytes)));
  }
  tokenizer.token_bytes_[id] = std::move(bytes);
}

// Every byte must be a token of its own: a piece starts as its bytes.
void BpeTokenizerReader::finish(BpeTokenizer& tokenizer) {
  for (int b = 0; b < 256; ++b) {
    const auto found = tokenizer.id_of_bytes_.find(std::string(1, static_cast<char>(b)));
    if (found == tokenizer.id_of_bytes_.end())
      throw std::runtime_error(tokenizer.source_ + ": byte " + std::to_string(b) +
                               " has no token of its own; a byte-level BPE has all 256. " +
                               kSupported);
    tokenizer.byte_tokens_[b] = found->second;
  }
}

BpeTokenizer BpeTokenizerReader::tiktoken(const std::string& path, const std::string& text) {
  BpeTokenizer tokenizer;
  tokenizer.source_ = path;
  tokenizer.whole_piece_lookup_ = true;
  size_t line_number = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_number;
    if (line.empty()) continue;
    const std::string where = path + " line " + std::to_string(line_number);
    const size_t space = line.find(' ');
    int32_t rank = -1;
    if (space != std::string_view::npos) {
      const std::string_view number = line.substr(space + 1);
      const auto [end_of_number, error] =
          std::from_chars(number.data(), number.data() + number.size(), rank);
      if (error != std::errc() || end_of_number != number.data() + number.size()) rank = -1;
    }
    if (rank < 0)
      throw std::runtime_error(where + ": \"" + printable_text(std::string(line)) +
                               "\" is not \"<base64 bytes> <rank>\"; " + kSupported);
    add_token(tokenizer, rank, decode_base64(line.substr(0, space), where), TokenKind::kOrdinary,
              where);
  }
  const int32_t ranks = tokenizer.vocab_size();
  // The file holds the ranks only; their count says whose they are.
  if (ranks == 50256) {
    tokenizer.pattern_ = PretokenizerPattern::kGpt2;
    add_token(tokenizer, 50256, "<|endoftext|>", TokenKind::kSpecial, path);
  } else if (ranks == 128000) {
    tokenizer.pattern_ = PretokenizerPattern::kLlama3;
    // Llama 3's special tokens (llama_models' tokenizer.py).
    const char* const named[] = {"<|begin_of_text|>",
                                 "<|end_of_text|>",
                                 "<|reserved_special_token_0|>",
                                 "<|reserved_special_token_1|>",
                                 "<|finetune_right_pad_id|>",
                                 "<|step_id|>",
                                 "<|start_header_id|>",
                                 "<|end_header_id|>",
                                 "<|eom_id|>",
                                 "<|eot_id|>",
                                 "<|python_tag|>",
                                 "<|image|>"};
    int32_t id = 128000;
    for (const char* name : named) add_token(tokenizer, id++, name, TokenKind::kSpecial, path);
    for (int reserved = 2; id < 128256; ++reserved)
      add_token(tokenizer, id++, "<|reserved_special_token_" + std::to_string(reserved) + "|>",
                TokenKind::kSpecial, path);
  } else {
    throw std::runtime_error(path + ": a tiktoken file of " + std::to_string(ranks) +
                             " ranks, neither GPT-2's (50256) nor Llama 3's (128000), so its "
                             "pattern and special tokens are unknown; give the model's "
                             "Hugging Face tokenizer.json instead");
  }
  finish(tokenizer);
  for (int32_t id = 0; id < ranks; ++id)
    if (tokenizer.token_bytes_[id].empty())
      throw std::runtime_error(path + ": rank " + std::to_string(id) +
                               " is missing; ranks run 0 to " + std::to_string(ranks - 1));
  // A pair merges when its bytes together are a token, the lower rank first:
  // looked up as pairs come (find_merge), as tiktoken does, so that loading
  // costs the file's size whatever its tokens' lengths.
  tokenizer.merge_by_rank_ = true;
  return tokenizer;
}

void BpeTokenizerReader::read_pre_tokenizer(BpeTokenizer& tokenizer, const json& pre,
                                            const std::string& path) {
  auto type_of = [](const json& node) {
    return node.is_object() && node.contains("type") && node["type"].is_string()
               ? node["type"].get<std::string>()
               : std::string();
  };
  auto byte_level = [&](const json& node, bool inside_sequence) {
    if (type_of(node) != "ByteLevel") return false;
    const bool add_prefix_space = node.value("add_prefix_space", false);
    tokenizer.prefix_space_ = add_prefix_space ? BpeTokenizer::PrefixSpace::kUnlessSpace
                                               : BpeTokenizer::PrefixSpace::kNone;
    // After a Split, Hugging Face adds the space to every piece, not once.
    if (inside_sequence && add_prefix_space)
      throw std::runtime_error(path +
                               ": pre_tokenizer: ByteLevel's add_prefix_space is true after a "
                               "Split (a space before every piece), which paraplan does not do; " +
                               kSupported);
    const bool use_regex = node.value("use_regex", true);
    if (use_regex == inside_sequence)
      throw std::runtime_error(
          path + ": pre_tokenizer: ByteLevel's use_regex is " + (use_regex ? "true" : "false") +
          (inside_sequence ? " after a Split (the pattern would apply twice)"
                           : " with no Split before it (no pattern would split the text)") +
          "; " + kSupported);
    return true;
  };
  if (byte_level(pre, /*inside_sequence=*/false)) {
    tokenizer.pattern_ = PretokenizerPattern::kGpt2;
    return;
  }
  const bool sequence = type_of(pre) == "Sequence" && pre.contains("pretokenizers") &&
                        pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2;
  if (sequence) {
    const json& split = pre["pretokenizers"][0];
    const bool isolated = type_of(split) == "Split" && split.value("behavior", "") == "Isolated" &&
                          !split.value("invert", false) && split.contains("pattern") &&
                          split["pattern"].is_object() && split["pattern"].contains("Regex") &&
                          split["pattern"]["Regex"].is_string();
    if (isolated && byte_level(pre["pretokenizers"][1], /*inside_sequence=*/true)) {
      const std::string regex = split["pattern"]["Regex"].get<std::string>();
      const std::optional<PretokenizerPattern> pattern = pretokenizer_pattern_of(regex);
      if (!pattern)
        throw std::runtime_error(path + ": pre_tokenizer: the Split pattern \"" +
                                 printable_text(regex) + "\" is not one paraplan matches (" +
                                 "GPT-2's, Llama 3's or Qwen 2's); " + kSupported);
      tokenizer.pattern_ = *pattern;
      return;
    }
  }
  throw std::runtime_error(
      path + ": pre_tokenizer is " +
      (pre.is_null() ? std::string("null") : "of type \"" + type_of(pre) + "\"") +
      "; expected ByteLevel, or a Sequence of Split (Isolated, a Regex) and "
      "ByteLevel (use_regex false). " +
      kSupported);
}

void BpeTokenizerReader::read_merges(BpeTokenizer& tokenizer, const json& merges, const json& vocab,
                                     const std::string& path) {
  if (!merges.is_array())
    throw std::runtime_error(path + ": model.merges is " + json_value_text(merges) +
                             ", expected a list of pairs");
  tokenizer.merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& merge = merges[i];
    std::string left, right;
    // "left right" (tokenizers before 0.20) or ["left", "right"].
    if (merge.is_string()) {
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space != std::string::npos && text.find(' ', space + 1) == std::string::npos) {
        left = text.substr(0, space);
        right = text.substr(space + 1);
      }
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    const std::string where = path + ": model.merges[" + std::to_string(i) + "]";
    if (left.empty() || right.empty())
      throw std::runtime_error(where + " is " + json_value_text(merge) +
                               ", expected \"left right\" or [\"left\", \"right\"]");
    auto id_of = [&](const std::string& key) {
      const auto found = vocab.find(key);
      if (found == vocab.end())
        throw std::runtime_error(where + ": \"" + printable_text(key) + "\" is not in model.vocab");
      return found->get<int32_t>();
    };
    const int32_t left_id = id_of(left), right_id = id_of(right), merged = id_of(left + right);
    // A pair listed twice takes its last place, as Hugging Face's merge map
    // (collected from the list in order) does.
    tokenizer.merges_.insert_or_assign(BpeTokenizer::pair_key(left_id, right_id),
                                       BpeTokenizer::Merge{static_cast<uint32_t>(i), merged});
  }
}

// What both kinds of tokenizer.json share: model "BPE", without the options
// that make its tokens other than what it says.
void BpeTokenizerReader::read_model_options(const json& model, const std::string& path) {
  if (!model.is_object() || model.value("type", "") != "BPE")
    throw std::runtime_error(
        path + ": model.type is " +
        json_value_text(model.is_object() ? model.value("type", json()) : model) +
        ", expected \"BPE\"; " + kSupported);
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix) && !model[affix].is_null() && model[affix] != "")
      throw std::runtime_error(path + ": model." + affix + " is " + json_value_text(model[affix]) +
                               "; a byte-pair model of GPT-2's or Llama 2's kind has none. " +
                               kSupported);
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0)
    throw std::runtime_error(path + ": model.dropout is " + json_value_text(model["dropout"]) +
                             "; encoding would be random. Set it to null");
}

void BpeTokenizerReader::read_added_tokens(BpeTokenizer& tokenizer, const json& root,
                                           const std::string& path) {
  const json added = root.value("added_tokens", json::array());
  for (size_t i = 0; added.is_array() && i < added.size(); ++i) {
    const std::string where = path + ": added_tokens[" + std::to_string(i) + "]";
    const json& token = added[i];
    if (!token.is_object() || !token.contains("id") || !token["id"].is_number_integer() ||
        !token.contains("content") || !token["content"].is_string())
      throw std::runtime_error(where + " is not {\"id\": N, \"content\": \"...\"}");
    add_token(tokenizer, token["id"].get<int64_t>(), token["content"].get<std::string>(),
              TokenKind::kSpecial, where);
  }
}

BpeTokenizer BpeTokenizerReader::hugging_face(const std::string& path, const std::string& text) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& error) {
    throw std::runtime_error(path + ": not JSON (" + error.what() + ")");
  }
  if (!root.is_object()) throw std::runtime_error(path + ": not a JSON object");
  const json model = root.value("model", json());
  read_model_options(model, path);
  if (is_metaspace(root)) return metaspace(path, root);
  BpeTokenizer tokenizer;
  tokenizer.source_ = path;
  if (model.value("byte_fallback", false))
    throw std::runtime_error(path +
                             ": model.byte_fallback is true in a byte-level tokenizer (every "
                             "byte is a token already; SentencePiece-style tokenizers, Llama "
                             "2's and Mistral's, have the normalizer Replace \" \" -> \"\u2581\" "
                             "or the pre-tokenizer Metaspace); " +
                             std::string(kSupported));
  // None, or Qwen 2's NFC.
  if (const json normalizer = root.value("normalizer", json()); !normalizer.is_null()) {
    tokenizer.nfc_ = normalizer.is_object() && normalizer.value("type", "") == "NFC";
    if (!tokenizer.nfc_)
      throw std::runtime_error(path + ": normalizer is " +
                               (normalizer.is_object() && normalizer.contains("type")
                                    ? json_value_text(normalizer["type"])
                                    : json_value_text(normalizer)) +
                               "; paraplan applies none or NFC (Qwen 2's) before a byte-level "
                               "pattern. " +
                               kSupported);
  }
  const json decoder = root.value("decoder", json());
  if (!decoder.is_object() || decoder.value("type", "") != "ByteLevel")
    throw std::runtime_error(path + ": decoder is not ByteLevel; " + std::string(kSupported));
  read_pre_tokenizer(tokenizer, root.value("pre_tokenizer", json()), path);
  tokenizer.whole_piece_lookup_ = model.value("ignore_merges", false);

  const json vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty())
    throw std::runtime_error(path + ": model.vocab is " + json_value_text(vocab) +
                             ", expected an object of token -> id");
  for (const auto& [key, id] : vocab.items()) {
    const std::string where = path + ": model.vocab[\"" + printable_text(key) + "\"]";
    if (!id.is_number_integer()) throw std::runtime_error(where + " is not an integer id");
    char32_t offending = 0;
    const std::optional<std::string> bytes = byte_level_bytes(key, offending);
    if (!bytes)
      throw std::runtime_error(where + ": " + code_point_text(offending) +
                               " is not a character of ByteLevel's alphabet; " + kSupported);
    add_token(tokenizer, id.get<int64_t>(), *bytes, TokenKind::kOrdinary, where);
  }
  read_added_tokens(tokenizer, root, path);
  finish(tokenizer);
  read_merges(tokenizer, model.value("merges", json()), vocab, path);
  return tokenizer;
}

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  return parse(read_bounded_file(path, kTokenizerFile), path);
}

BpeTokenizer BpeTokenizer::parse(const std::string& text, const std::string& path) {
  if (std::filesystem::path(path).extension() == ".json") {
    try {
      return BpeTokenizerReader::hugging_face(path, text);
    } catch (const nlohmann::json::exception& error) {  // a field of the wrong type
      throw std::runtime_error(path + ": a field is not of the type it must be (" +
                               printable_text(error.what(), 200) + ")");
    }
  }
  if (BpeTokenizerReader::is_sentencepiece_model(text))
    return BpeTokenizerReader::sentencepiece_model(path, text);
  return BpeTokenizerReader::tiktoken(path, text);
}

std::string default_document_separator(const BpeTokenizer& tokenizer) {
  for (const char* name : {"<|endoftext|>", "<|begin_of_text|>", "<s>", "<bos>"})
    if (tokenizer.special_token(name)) return name;
  return "";
}

BpeTokenizer load_tokenizer_for_model(const std::string& path, int64_t vocab_size,
                                      const std::string& model_source) {
  BpeTokenizer tokenizer = BpeTokenizer::from_file(path);
  if (tokenizer.vocab_size() > vocab_size)
    throw std::runtime_error(path + ": " + tokenizer.description() + ", more than the " +
                             std::to_string(vocab_size) + " of " + model_source +
                             "'s vocab_size; give the tokenizer the model is trained with");
  return tokenizer;
}

std::string tokenizer_file_in(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path json = fs::path(directory) / "tokenizer.json";
  if (fs::is_regular_file(json, error)) return json.string();
  std::vector<std::string> tiktoken;
  for (fs::directory_iterator entry(directory, error), end; !error && entry != end;
       entry.increment(error))
    if (entry->path().extension() == ".tiktoken") tiktoken.push_back(entry->path().string());
  if (tiktoken.size() > 1) {
    std::sort(tiktoken.begin(), tiktoken.end());
    throw std::runtime_error(directory + ": holds " + tiktoken[0] + " and " + tiktoken[1] +
                             "; keep one tokenizer beside config.json, or give --tokenizer");
  }
  return tiktoken.empty() ? std::string() : tiktoken[0];
}

std::string BpeTokenizer::description() const {
  const std::string kind = metaspace_.enabled
                               ? std::string("SentencePiece-style")
                               : std::string(pretokenizer_name(pattern_)) + " pattern";
  return kind + ", " + std::to_string(vocab_size()) + " tokens (" +
         std::filesystem::path(source_).filename().string() + ")";
}

}  // namespace paraplan
