// bpe_tokenizer_metaspace_test.cc: SentencePiece-style tokenizer.json files
// (Llama 2's and Mistral's form) on a small hand-made vocabulary: the prefix
// space in each of the file's three forms, merges across a whole text or
// within words, byte fallback and the unknown token, decoding with and
// without Strip, continuations, the file written back, and one message per
// malformed field. tests/tokenizer_check.py compares Mistral's real
// tokenizers with sentencepiece and Hugging Face's tokenizers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/testing/test_temp_dir.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/test_tokenizer.h"

namespace paraplan {
namespace {

using nlohmann::json;
using testing::contains;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;
using Ids = std::vector<int32_t>;

const std::string kSpace = "\xE2\x96\x81";  // U+2581

// "▁" 259, a 260, b 261, e 262, h 263, l 264, o 265, é 266; merges ▁h 267,
// el 268, lo 269, ▁hel 270, ▁▁ 271, ab 272, ▁ab 273.
json small_vocabulary() {
  return testing::sentencepiece_json({kSpace, "a", "b", "e", "h", "l", "o", "\xC3\xA9"},
                                     {{kSpace, "h"},
                                      {"e", "l"},
                                      {"l", "o"},
                                      {kSpace + "h", "el"},
                                      {kSpace, kSpace},
                                      {"a", "b"},
                                      {kSpace, "ab"}});
}

BpeTokenizer load(const TempDir& dir, const json& file) {
  write_bytes(dir / "tokenizer.json", file.dump());
  return BpeTokenizer::from_file(dir / "tokenizer.json");
}

// The same vocabulary with the pre-tokenizer Metaspace instead of the
// normalizers (transformers' non-legacy form).
json as_metaspace(json file, const std::string& scheme, bool split) {
  file["normalizer"] = nullptr;
  file["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", scheme}, {"split", split}};
  return file;
}

TEST(SentencePieceTokenizer, EncodesTheWholeTextAfterAPrefixSpace) {
  TempDir dir;
  const BpeTokenizer tokenizer = load(dir, small_vocabulary());
  EXPECT_TRUE(tokenizer.is_sentencepiece());
  EXPECT_EQ(tokenizer.description(), "SentencePiece-style, 274 tokens (tokenizer.json)");
  EXPECT_EQ(default_document_separator(tokenizer), "<s>");
  // "▁hello": ▁h, el, lo, then ▁hel (merges by priority, not position).
  EXPECT_EQ(tokenizer.encode("hello"), Ids({270, 269}));
  // Legacy's Prepend adds the space before a space too, as sentencepiece does.
  EXPECT_EQ(tokenizer.encode(" hello"), Ids({259, 270, 269}));
  EXPECT_EQ(tokenizer.encode("ab ab"), Ids({273, 273}));  // one piece: the spaces are "▁"
  EXPECT_EQ(tokenizer.encode("a" + kSpace + "b"), tokenizer.encode("a b"));
  EXPECT_EQ(tokenizer.encode(""), Ids({}));
  // A continuation has no prefix space: a context's tokens and its ending's
  // are the whole text's.
  EXPECT_EQ(tokenizer.encode_continuation(" ab"), Ids({273}));
  EXPECT_EQ(tokenizer.encode_continuation("ab"), Ids({272}));
  // Decoding strips the text's prefix space (Strip), a continuation keeps it.
  EXPECT_EQ(tokenizer.decode(Ids({270, 269})), "hello");
  EXPECT_EQ(tokenizer.decode(Ids({259, 270, 269})), " hello");
  EXPECT_EQ(tokenizer.decode_continuation(Ids({270, 269})), " hello");
  EXPECT_EQ(tokenizer.decode(Ids({1, 270, 269})), "<s> hello");
  EXPECT_TRUE(tokenizer.cuts_safely_at_spaces());
}

TEST(SentencePieceTokenizer, MetaspaceSetsWhereThePrefixGoesAndWhetherWordsSplit) {
  TempDir dir;
  const BpeTokenizer first = load(dir, as_metaspace(small_vocabulary(), "first", false));
  EXPECT_EQ(first.encode("hello"), Ids({270, 269}));
  EXPECT_EQ(first.encode(" hello"), Ids({270, 269}));  // already starts with one
  const BpeTokenizer never = load(dir, as_metaspace(small_vocabulary(), "never", false));
  EXPECT_EQ(never.encode("hello"), Ids({263, 268, 269}));
  // A merge across a space ("b▁", 274) applies to the whole text, not
  // within words (Metaspace's split), and makes long documents encode whole.
  json crossing = small_vocabulary();
  crossing["model"]["merges"].push_back("b " + kSpace);
  crossing["model"]["vocab"]["b" + kSpace] = 274;
  const BpeTokenizer whole = load(dir, as_metaspace(crossing, "first", false));
  EXPECT_EQ(whole.encode("b b"), Ids({259, 274, 261}));
  EXPECT_FALSE(whole.cuts_safely_at_spaces());
  const BpeTokenizer words = load(dir, as_metaspace(crossing, "first", true));
  EXPECT_EQ(words.encode("b b"), Ids({259, 261, 259, 261}));
  // ignore_merges: a piece that is a token is taken whole.
  json whole_pieces = small_vocabulary();
  whole_pieces["model"]["vocab"][kSpace + "ba"] = 280;  // no merge reaches it
  EXPECT_EQ(load(dir, whole_pieces).encode("ba"), Ids({259, 261, 260}));
  whole_pieces["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(dir, whole_pieces).encode("ba"), Ids({280}));
}

TEST(SentencePieceTokenizer, CharactersOutsideTheVocabularyFallBackToBytes) {
  TempDir dir;
  const BpeTokenizer tokenizer = load(dir, small_vocabulary());
  EXPECT_EQ(tokenizer.encode("x"), Ids({259, 3 + 'x'}));
  EXPECT_EQ(tokenizer.encode("\xC3\xA9"), Ids({259, 266}));  // é is a token
  const std::string snowman = "\xE2\x98\x83";
  EXPECT_EQ(tokenizer.encode(snowman), Ids({259, 3 + 0xE2, 3 + 0x98, 3 + 0x83}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("x" + snowman + "a")), "x" + snowman + "a");
  // Bytes that are not UTF-8 are their byte tokens, counted.
  int64_t invalid = 0;
  Ids out;
  tokenizer.encode("a\xFF", out, &invalid);
  EXPECT_EQ(out, Ids({259, 260, 3 + 0xFF}));
  EXPECT_EQ(invalid, 1);
  EXPECT_EQ(tokenizer.decode(out), "a\xFF");
}

TEST(SentencePieceTokenizer, WithoutByteTokensTheUnknownTokenStandsIn) {
  TempDir dir;
  json file = small_vocabulary();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    file["model"]["vocab"].erase(name);
  }
  file["model"]["byte_fallback"] = false;
  file["decoder"]["decoders"].erase(1);                          // no ByteFallback
  EXPECT_EQ(load(dir, file).encode("xyb"), Ids({259, 0, 261}));  // a run is one <unk>
  file["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(dir, file).encode("xyb"), Ids({259, 0, 0, 261}));
  // Some byte tokens: a character with all of its falls back to them, and a
  // waiting unknown token goes after them, at the next known character (as
  // Hugging Face's BPE orders them); such a vocabulary encodes documents whole.
  json some_bytes = small_vocabulary();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (b != 'x') some_bytes["model"]["vocab"].erase(name);
  }
  const BpeTokenizer partial = load(dir, some_bytes);
  EXPECT_EQ(partial.encode("zxzb"), Ids({259, 3 + 'x', 0, 261}));
  EXPECT_FALSE(partial.cuts_safely_at_spaces());
  file["model"]["unk_token"] = nullptr;
  EXPECT_TRUE(contains(error_of([&] { load(dir, file); }),
                       "model.unk_token is null and model.vocab lacks some of the 256 <0xNN> "
                       "tokens byte_fallback needs"));
}

TEST(SentencePieceTokenizer, WritesItselfAsATokenizerJsonThatReadsBackTheSame) {
  TempDir dir;
  const std::string text = " hello ab" + kSpace + "x\xE2\x98\x83  b\xFF";
  for (const json& file : {small_vocabulary(), as_metaspace(small_vocabulary(), "first", true),
                           as_metaspace(small_vocabulary(), "never", false)}) {
    const BpeTokenizer tokenizer = load(dir, file);
    const json written = json::parse(tokenizer.to_hugging_face_json());
    EXPECT_EQ(written["normalizer"], file["normalizer"]);
    EXPECT_EQ(written["pre_tokenizer"], file["pre_tokenizer"]);
    EXPECT_EQ(written["model"]["vocab"], file["model"]["vocab"]);
    write_bytes(dir / "written.json", written.dump());
    const BpeTokenizer read_back = BpeTokenizer::from_file(dir / "written.json");
    EXPECT_EQ(read_back.encode(text), tokenizer.encode(text));
    EXPECT_EQ(read_back.decode(tokenizer.encode(text)), tokenizer.decode(tokenizer.encode(text)));
    EXPECT_EQ(read_back.special_token("</s>"), 2);
  }
}

TEST(SentencePieceTokenizer, EachUnsupportedFieldIsNamed) {
  TempDir dir;
  const std::string path = dir / "tokenizer.json";
  auto refused = [&](const std::function<void(json&)>& edit) {
    json file = small_vocabulary();
    edit(file);
    return error_of([&] { load(dir, file); });
  };
  EXPECT_TRUE(contains(refused([](json& f) {
                         f["pre_tokenizer"] = {{"type", "Whitespace"}};
                       }),
                       path + ": pre_tokenizer is {\"type\":\"Whitespace\"} after "
                              "SentencePiece's normalizers"));
  EXPECT_TRUE(contains(refused([](json& f) {
                         f["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}});
                       }),
                       path + ": normalizer is {"));
  EXPECT_TRUE(contains(refused([](json& f) {
                         f = as_metaspace(f, "first", false);
                         f["pre_tokenizer"]["replacement"] = "_";
                       }),
                       "pre_tokenizer.replacement is \"_\""));
  EXPECT_TRUE(contains(refused([](json& f) { f = as_metaspace(f, "sometimes", false); }),
                       "pre_tokenizer.prepend_scheme is \"sometimes\", expected \"first\""));
  EXPECT_TRUE(contains(refused([](json& f) { f["decoder"]["decoders"].erase(1); }),
                       "decoder has no ByteFallback though model.byte_fallback is true"));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["byte_fallback"] = false; }),
                       "decoder has ByteFallback though model.byte_fallback is false"));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["fuse_unk"] = "yes"; }),
                       path + ": a field is not of the type it must be"));
  EXPECT_TRUE(contains(refused([](json& f) { f["decoder"]["decoders"][3]["start"] = 2; }),
                       "decoder's Strip is"));
  EXPECT_TRUE(contains(refused([](json& f) {
                         f["decoder"] = {{"type", "ByteLevel"}};
                       }),
                       path + ": decoder is {\"type\":\"ByteLevel\"}; expected a Sequence of "
                              "Replace"));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["vocab"]["a b"] = 400; }),
                       "model.vocab[\"a b\"] has a space"));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["unk_token"] = "<nothing>"; }),
                       "model.unk_token is \"<nothing>\", which is not in model.vocab"));
  EXPECT_TRUE(contains(refused([](json& f) { f["model"]["merges"].push_back("a zz"); }),
                       "model.merges[7]: \"zz\" is not in model.vocab"));
}

// SentencePiece's model file (protobuf), written field by field.
struct Proto {
  std::string bytes;
  Proto& varint(uint64_t value) {
    for (; value >= 0x80; value >>= 7) bytes.push_back(static_cast<char>(value | 0x80));
    bytes.push_back(static_cast<char>(value));
    return *this;
  }
  Proto& number(int field, uint64_t value) { return varint(field << 3).varint(value); }
  Proto& text(int field, const std::string& value) {
    varint(field << 3 | 2).varint(value.size());
    bytes += value;
    return *this;
  }
  Proto& real(int field, float value) {
    varint(field << 3 | 5);
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>(bits >> (8 * i)));
    return *this;
  }
};

// small_vocabulary() as sentencepiece trains it: the same pieces and ids,
// each multi-character piece scored by its merge's place.
std::string small_model(int model_type = 2, const std::string& normalizer = "identity",
                        bool remove_extra_whitespaces = false) {
  Proto model;
  auto piece = [&](const std::string& text, float score, int type) {
    Proto p;
    p.text(1, text).real(2, score).number(3, type);
    model.text(1, p.bytes);
  };
  piece("<unk>", 0, 2);
  piece("<s>", 0, 3);
  piece("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    piece(name, 0, 6);
  }
  int character = 0;
  for (const std::string& c :
       {kSpace, std::string("a"), std::string("b"), std::string("e"), std::string("h"),
        std::string("l"), std::string("o"), std::string("\xC3\xA9")})
    piece(c, -100.0f - static_cast<float>(character++), 1);
  int merge = 0;
  for (const std::string& merged :
       {kSpace + "h", std::string("el"), std::string("lo"), kSpace + "hel", kSpace + kSpace,
        std::string("ab"), kSpace + "ab"})
    piece(merged, -1.0f - static_cast<float>(merge++), 1);
  Proto trainer, normalizing;
  trainer.number(3, model_type).number(35, 1);
  normalizing.text(1, normalizer).number(3, 1).number(4, remove_extra_whitespaces).number(5, 1);
  model.text(2, trainer.bytes).text(3, normalizing.bytes);
  return model.bytes;
}

TEST(SentencePieceModel, ReadsAsTheTokenizerJsonTransformersMakesOfIt) {
  TempDir dir;
  write_bytes(dir / "tokenizer.model", small_model());
  const BpeTokenizer model = BpeTokenizer::from_file(dir / "tokenizer.model");
  const BpeTokenizer converted = load(dir, small_vocabulary());
  EXPECT_TRUE(model.is_sentencepiece());
  EXPECT_EQ(model.description(), "SentencePiece-style, 274 tokens (tokenizer.model)");
  for (const std::string text :
       {"hello", " hello", "ab ab", "x\xE2\x98\x83\xC3\xA9 ab  hello", "a\xFF", ""}) {
    EXPECT_EQ(model.encode(text), converted.encode(text)) << text;
    EXPECT_EQ(model.decode(model.encode(text)), converted.decode(converted.encode(text)));
  }
  EXPECT_EQ(model.special_token("<s>"), 1);
  EXPECT_EQ(model.unknown_token(), 0);
  EXPECT_EQ(json::parse(model.to_hugging_face_json())["model"]["fuse_unk"], true);
  // Kept as the tokenizer.json of the models' repositories: the same file.
  const json written = json::parse(model.to_hugging_face_json());
  const json expected = small_vocabulary();
  EXPECT_EQ(written["model"]["vocab"], expected["model"]["vocab"]);
  EXPECT_EQ(written["model"]["merges"], expected["model"]["merges"]);
  EXPECT_EQ(written["normalizer"], expected["normalizer"]);
  EXPECT_EQ(written["decoder"], expected["decoder"]);
}

TEST(SentencePieceModel, WhatItCannotEncodeExactlyIsNamed) {
  TempDir dir;
  auto refused = [&](const std::string& bytes) {
    write_bytes(dir / "tokenizer.model", bytes);
    return error_of([&] { BpeTokenizer::from_file(dir / "tokenizer.model"); });
  };
  EXPECT_TRUE(contains(refused(small_model(1)),
                       "trainer_spec.model_type is 1 (Unigram, T5's and ALBERT's kind); paraplan "
                       "reads SentencePiece BPE models (2)"));
  EXPECT_TRUE(contains(refused(small_model(2, "nmt_nfkc")),
                       "normalizer_spec.name is \"nmt_nfkc\"; paraplan applies no normalization"));
  EXPECT_TRUE(contains(refused(small_model(2, "identity", true)),
                       "normalizer_spec.remove_extra_whitespaces is true"));
  EXPECT_TRUE(contains(refused(small_model().substr(0, 1000)), "not a SentencePiece model"));
  Proto not_a_number;
  not_a_number.text(1, Proto().text(1, "a").real(2, std::nanf("")).number(3, 1).bytes);
  EXPECT_TRUE(contains(refused(not_a_number.bytes + small_model()),
                       "a piece's score is not a finite number"));
  Proto user_defined;
  user_defined.text(1, Proto().text(1, "[DOC]").real(2, 0).number(3, 4).bytes);
  EXPECT_TRUE(contains(refused(user_defined.bytes + small_model()),
                       "piece 0 (\"[DOC]\") is of type 4 (USER_DEFINED"));
}

}  // namespace
}  // namespace paraplan
