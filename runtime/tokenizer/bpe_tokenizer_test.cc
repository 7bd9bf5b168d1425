// bpe_tokenizer_test.cc: merges by priority (not position), the leftmost of
// equal pairs first, the whole-piece lookup, special tokens, both file formats
// on small hand-made tokenizers, and one message per malformed field.
// tests/tokenizer_check.py compares GPT-2's and Llama 3's real tokenizers
// with tiktoken and Hugging Face's tokenizers.
#include "runtime/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/testing/test_temp_dir.h"
#include "runtime/tokenizer/test_tokenizer.h"

namespace paraplan {
namespace {

using nlohmann::json;
using testing::byte_level;
using testing::contains;
using testing::error_of;
using testing::TempDir;
using testing::tokenizer_json;
using testing::write_bytes;

BpeTokenizer load(const TempDir& dir, const json& tokenizer) {
  write_bytes(dir / "tokenizer.json", tokenizer.dump());
  return BpeTokenizer::from_file(dir / "tokenizer.json");
}

std::vector<int32_t> ids(std::initializer_list<int32_t> list) {
  return list;
}

TEST(BpeTokenizer, MergesGoByPriorityNotPosition) {
  TempDir dir;
  // ab = 256, bc = 257; "b c" listed first merges first.
  const BpeTokenizer later = load(dir, tokenizer_json({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(later.encode("abc"), ids({'a', 256}));
  const BpeTokenizer earlier = load(dir, tokenizer_json({{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(earlier.encode("abc"), ids({256, 'c'}));
}

TEST(BpeTokenizer, WrittenAsTokenizerJsonItReadsBackTheSame) {
  TempDir dir;
  json file = tokenizer_json({{"b", "c"}, {"a", "b"}, {" ", "a"}, {" a", "bc"}});
  file["normalizer"] = {{"type", "NFC"}};
  const BpeTokenizer original = load(dir, file);
  write_bytes(dir / "written.json", original.to_hugging_face_json());
  const BpeTokenizer written = BpeTokenizer::from_file(dir / "written.json");
  EXPECT_EQ(written.vocab_size(), original.vocab_size());
  EXPECT_EQ(written.special_token("<|endoftext|>"), original.special_token("<|endoftext|>"));
  EXPECT_TRUE(written.normalizes_to_nfc());
  for (const char* text : {"abc abc abcabc", " a b c", "cafe\u0301 \u6771\u4eac", "x\n\n y"})
    EXPECT_EQ(written.encode(text), original.encode(text)) << text;
  const json back = json::parse(original.to_hugging_face_json());
  EXPECT_EQ(back["model"]["merges"], json::array({byte_level("b") + " " + byte_level("c"),
                                                  byte_level("a") + " " + byte_level("b"),
                                                  byte_level(" ") + " " + byte_level("a"),
                                                  byte_level(" a") + " " + byte_level("bc")}));
  EXPECT_EQ(back["added_tokens"][0]["content"], "<|endoftext|>");
}

TEST(BpeTokenizer, EqualPairsMergeLeftmostFirst) {
  TempDir dir;
  const BpeTokenizer tokenizer = load(dir, tokenizer_json({{"a", "a"}, {"aa", "a"}}));
  // aaa: (a a) a, then aa + a; aaaa: (a a)(a a), and aa + aa is no token;
  // aaaaa: aa aa a, then the second aa + a.
  EXPECT_EQ(tokenizer.encode("aaa"), ids({257}));
  EXPECT_EQ(tokenizer.encode("aaaa"), ids({256, 256}));
  EXPECT_EQ(tokenizer.encode("aaaaa"), ids({256, 257}));
}

TEST(BpeTokenizer, LongRunsMergeAndDecodeBack) {
  TempDir dir;
  const BpeTokenizer tokenizer = load(dir, tokenizer_json({{"=", "="}, {"==", "=="}}));
  const std::string run(100001, '=');
  const std::vector<int32_t> tokens = tokenizer.encode(run);
  EXPECT_EQ(tokens.size(), 25001u);  // 25,000 of "====" and one "="
  EXPECT_EQ(tokens.back(), '=');
  EXPECT_EQ(tokenizer.decode(tokens), run);
}

TEST(BpeTokenizer, APieceThatIsATokenSkipsTheMergesWhereIgnoreMergesSaysSo) {
  TempDir dir;
  json file = tokenizer_json({{"a", "b"}});
  file["model"]["vocab"][byte_level("xyz")] = 300;  // reachable by no merge
  EXPECT_EQ(load(dir, file).encode("xyz"), ids({'x', 'y', 'z'}));
  file["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(dir, file).encode("xyz"), ids({300}));
}

TEST(BpeTokenizer, SpecialTokensAreIdsNotText) {
  TempDir dir;
  const BpeTokenizer tokenizer = load(dir, tokenizer_json({{"a", "b"}}));
  const std::optional<int32_t> end_of_text = tokenizer.special_token("<|endoftext|>");
  ASSERT_TRUE(end_of_text.has_value());
  EXPECT_EQ(*end_of_text, 257);
  EXPECT_EQ(tokenizer.vocab_size(), 258);
  // Ordinary encoding: the text spelling it is text.
  const std::vector<int32_t> spelled = tokenizer.encode("<|endoftext|>");
  EXPECT_EQ(spelled.size(), 13u);  // "<|" "endoftext" "|>", a byte each
  EXPECT_EQ(std::count(spelled.begin(), spelled.end(), 257), 0);
  EXPECT_EQ(tokenizer.decode(ids({256, 257, ' '})), "ab<|endoftext|> ");
  EXPECT_TRUE(contains(error_of([&] {
                         tokenizer.decode(ids({'a', 258}));
                       }),
                       "has no token 258 (position 1); its ids are below 258"));
  EXPECT_EQ(tokenizer.description(), "GPT-2 pattern, 258 tokens (tokenizer.json)");
}

TEST(BpeTokenizer, ASplitBeforeByteLevelNamesItsPattern) {
  TempDir dir;
  json file = tokenizer_json({});
  file["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", std::string(pretokenizer_regex(PretokenizerPattern::kLlama3))}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(load(dir, file).pattern(), PretokenizerPattern::kLlama3);
  file["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+|\\w+";
  EXPECT_TRUE(contains(error_of([&] { load(dir, file); }),
                       "is not one paraplan matches (GPT-2's, Llama 3's or Qwen 2's)"));
  file["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      std::string(pretokenizer_regex(PretokenizerPattern::kQwen2));
  file["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  EXPECT_TRUE(contains(error_of([&] { load(dir, file); }),
                       "ByteLevel's add_prefix_space is true after a Split"));
  file["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = false;
  file["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = true;
  EXPECT_TRUE(
      contains(error_of([&] { load(dir, file); }), "ByteLevel's use_regex is true after a Split"));
}

TEST(BpeTokenizer, EachUnsupportedFieldIsNamed) {
  TempDir dir;
  const std::string path = dir / "tokenizer.json";
  auto refused = [&](const std::function<void(json&)>& edit) {
    json file = tokenizer_json({{"a", "b"}});
    edit(file);
    return error_of([&] { load(dir, file); });
  };
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["type"] = "WordPiece"; }),
                       path + ": model.type is \"WordPiece\", expected \"BPE\""));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["byte_fallback"] = true; }),
                       "model.byte_fallback is true in a byte-level tokenizer"));
  EXPECT_TRUE(contains(refused([](json& f) {
                         f["normalizer"] = {{"type", "NFKC"}};
                       }),
                       "normalizer is \"NFKC\"; paraplan applies none or NFC (Qwen 2's)"));
  EXPECT_TRUE(contains(refused([](json& f) {
                         f["pre_tokenizer"] = {{"type", "Whitespace"}};
                       }),
                       "pre_tokenizer is of type \"Whitespace\""));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["vocab"]["\xE2\x96\x81the"] = 999; }),
                       "U+2581 is not a character of ByteLevel's alphabet"));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["merges"].push_back("a zz"); }),
                       "model.merges[1]: \"zz\" is not in model.vocab"));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["merges"].push_back(3); }),
                       "model.merges[1] is 3, expected \"left right\""));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["vocab"].erase(byte_level('q')); }),
                       "byte 113 has no token of its own"));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["vocab"][byte_level("qq")] = 'a'; }),
                       "id 97 is given twice"));
  write_bytes(dir / "bad.json", "{\"model\": ");
  EXPECT_TRUE(contains(error_of([&] { BpeTokenizer::from_file(dir / "bad.json"); }), "not JSON"));
}

TEST(BpeTokenizer, AnNfcNormalizerComposesBeforeThePattern) {
  TempDir dir;
  json file = tokenizer_json({});
  const std::string decomposed = "cafe\xCC\x81";  // e + U+0301
  EXPECT_EQ(load(dir, file).encode(decomposed).size(), 6u);
  file["normalizer"] = {{"type", "NFC"}};
  const BpeTokenizer nfc = load(dir, file);
  EXPECT_EQ(nfc.encode(decomposed), nfc.encode("caf\xC3\xA9"));  // U+00E9
  EXPECT_EQ(nfc.encode(decomposed).size(), 5u);
}

TEST(BpeTokenizer, MergesAsPairsReadAsTheirStringForm) {
  TempDir dir;
  json file = tokenizer_json({{"b", "c"}, {"a", "b"}});
  file["model"]["merges"] =
      json::array({json::array({"b", "c"}), json::array({"a", "b"})});  // tokenizers 0.20 and later
  EXPECT_EQ(load(dir, file).encode("abc"), ids({'a', 256}));
}

std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string text;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t value = 0;
    for (size_t k = 0; k < 3; ++k)
      value = value << 8 | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) text += k <= n ? alphabet[(value >> (18 - 6 * k)) & 63] : '=';
  }
  return text;
}

TEST(BpeTokenizer, ATiktokenFileMergesByTheRankOfTheJoinedBytes) {
  TempDir dir;
  // GPT-2's count of ranks: the 256 bytes, "bc" (256), "ab" (257), "abcd"
  // (258), then tokens no merge reaches (0xFF and two bytes, and one of 4 MiB)
  // up to 50,256.
  std::string file;
  int rank = 0;
  auto add = [&](const std::string& bytes) {
    file += base64(bytes) + " " + std::to_string(rank++) + "\n";
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  add("bc");
  add("ab");
  add("abcd");
  for (int x = 0, fillers = 50256 - rank - 1; x < fillers; ++x)
    add(std::string{'\xFF', static_cast<char>(x >> 8), static_cast<char>(x & 0xFF)});
  add(std::string(size_t{1} << 22, '\xFE'));  // 4 MiB: loading stays linear in the file

  write_bytes(dir / "gpt2.tiktoken", file);
  const BpeTokenizer tokenizer = BpeTokenizer::from_file(dir / "gpt2.tiktoken");
  EXPECT_EQ(tokenizer.pattern(), PretokenizerPattern::kGpt2);
  EXPECT_EQ(tokenizer.special_token("<|endoftext|>"), 50256);
  EXPECT_EQ(tokenizer.encode("abc"), ids({'a', 256}));  // bc merges first
  EXPECT_EQ(tokenizer.encode("abcd"), ids({258}));      // a whole piece that is a token
  EXPECT_EQ(tokenizer.encode("abcde"), ids({'a', 256, 'd', 'e'}));

  write_bytes(dir / "short.tiktoken", "YQ== 0\nYg== 1\n");
  EXPECT_TRUE(contains(error_of([&] { BpeTokenizer::from_file(dir / "short.tiktoken"); }),
                       "a tiktoken file of 2 ranks, neither GPT-2's (50256) nor Llama 3's"));
  write_bytes(dir / "bad.tiktoken", "YQ== 0\nY!== 1\n");
  EXPECT_TRUE(contains(error_of([&] { BpeTokenizer::from_file(dir / "bad.tiktoken"); }),
                       "bad.tiktoken line 2: '!' is not base64"));
  write_bytes(dir / "words.tiktoken", "YQ== zero\n");
  EXPECT_TRUE(contains(error_of([&] { BpeTokenizer::from_file(dir / "words.tiktoken"); }),
                       "line 1: \"YQ== zero\" is not \"<base64 bytes> <rank>\""));
}

}  // namespace
}  // namespace paraplan
