// bpe_tokenizer_sentencepiece.cc: SentencePiece's own tokenizer.model (its
// ModelProto, protobuf) of a BPE model, as Llama 2's and Mistral's original
// checkpoints ship it, read into the SentencePiece-style BpeTokenizer that
// transformers' conversion of the same file gives (bpe_tokenizer_metaspace.cc):
// the dummy prefix as Prepend "▁", NORMAL pieces as the vocabulary, BYTE
// pieces as the byte fallback, CONTROL pieces as special tokens, and the
// merges derived from the pieces' scores as transformers derives them (a
// pair merges into a piece when both halves are pieces, the higher score
// first). sentencepiece's encoding is the reference (tests/tokenizer_check.py).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/printable_text.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/bpe_tokenizer_reader.h"
#include "runtime/tokenizer/utf8.h"

namespace paraplan {

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

// Protobuf's wire format, as much as ModelProto needs: each call reads one
// thing or throws naming the file and what was cut short.
class WireReader {
 public:
  WireReader(std::string_view data, const std::string& where) : data_(data), where_(where) {}
  bool done() const { return at_ >= data_.size(); }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) fail("a varint runs past the end");
      const auto byte = static_cast<unsigned char>(data_[at_++]);
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail("a varint is longer than 10 bytes");
  }
  // The next field's number and wire type.
  std::pair<uint64_t, int> tag() {
    const uint64_t key = varint();
    return {key >> 3, static_cast<int>(key & 7)};
  }
  std::string_view bytes() {
    const uint64_t length = varint();
    if (length > data_.size() - at_)
      fail("a field of " + std::to_string(length) + " bytes runs past the end");
    const std::string_view value = data_.substr(at_, length);
    at_ += length;
    return value;
  }
  float fixed32() {
    if (data_.size() - at_ < 4) fail("a 4-byte field runs past the end");
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i)
      bits |= static_cast<uint32_t>(static_cast<unsigned char>(data_[at_ + i])) << (8 * i);
    at_ += 4;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        return;
      case 1:
        at_ + 8 <= data_.size() ? void(at_ += 8) : fail("an 8-byte field runs past the end");
        return;
      case 2:
        bytes();
        return;
      case 5:
        fixed32();
        return;
    }
    fail("wire type " + std::to_string(wire_type) + " is not protobuf's");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(where_ + ": not a SentencePiece model (protobuf ModelProto): " + what +
                             " at byte " + std::to_string(at_));
  }

 private:
  std::string_view data_;
  size_t at_ = 0;
  const std::string& where_;
};

constexpr size_t kMaxPieces = size_t{1} << 21;  // BpeTokenizer's ids
constexpr size_t kMaxPieceBytes = 1024;

// sentencepiece_model.proto's enums and the fields paraplan reads.
enum PieceType {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};
struct Piece {
  std::string text;
  float score = 0;
  int type = kNormal;
};
struct ModelFile {
  std::vector<Piece> pieces;
  int model_type = 1;  // UNIGRAM unless said
  bool byte_fallback = false;
  bool whitespace_as_suffix = false;
  std::string normalizer_name;
  bool has_charsmap = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

Piece read_piece(std::string_view data, const std::string& where) {
  WireReader reader(data, where);
  Piece piece;
  while (!reader.done()) {
    const auto [field, wire] = reader.tag();
    if (field == 1 && wire == 2)
      piece.text = std::string(reader.bytes());
    else if (field == 2 && wire == 5)
      piece.score = reader.fixed32();
    else if (field == 3 && wire == 0)
      piece.type = static_cast<int>(reader.varint());
    else
      reader.skip(wire);
  }
  if (!std::isfinite(piece.score)) reader.fail("a piece's score is not a finite number");
  // sentencepiece's pieces are at most 16 characters (max_sentencepiece_length).
  if (piece.text.size() > kMaxPieceBytes)
    reader.fail("a piece of " + std::to_string(piece.text.size()) + " bytes, above " +
                std::to_string(kMaxPieceBytes));
  return piece;
}

ModelFile read_model_file(const std::string& text, const std::string& path) {
  ModelFile model;
  WireReader reader(text, path);
  while (!reader.done()) {
    const auto [field, wire] = reader.tag();
    if (field == 1 && wire == 2) {
      if (model.pieces.size() == kMaxPieces)
        reader.fail("more than " + std::to_string(kMaxPieces) + " pieces");
      model.pieces.push_back(read_piece(reader.bytes(), path));
    } else if (field == 2 && wire == 2) {  // TrainerSpec
      WireReader trainer(reader.bytes(), path);
      while (!trainer.done()) {
        const auto [f, w] = trainer.tag();
        if (f == 3 && w == 0)
          model.model_type = static_cast<int>(trainer.varint());
        else if (f == 35 && w == 0)
          model.byte_fallback = trainer.varint() != 0;
        else if (f == 24 && w == 0)
          model.whitespace_as_suffix = trainer.varint() != 0;
        else
          trainer.skip(w);
      }
    } else if (field == 3 && wire == 2) {  // NormalizerSpec
      WireReader normalizer(reader.bytes(), path);
      while (!normalizer.done()) {
        const auto [f, w] = normalizer.tag();
        if (f == 1 && w == 2)
          model.normalizer_name = std::string(normalizer.bytes());
        else if (f == 2 && w == 2)
          model.has_charsmap = !normalizer.bytes().empty();
        else if (f == 3 && w == 0)
          model.add_dummy_prefix = normalizer.varint() != 0;
        else if (f == 4 && w == 0)
          model.remove_extra_whitespaces = normalizer.varint() != 0;
        else if (f == 5 && w == 0)
          model.escape_whitespaces = normalizer.varint() != 0;
        else
          normalizer.skip(w);
      }
    } else {
      reader.skip(wire);
    }
  }
  return model;
}

// What paraplan encodes exactly as sentencepiece: BPE, no normalization but
// the dummy prefix and "▁" for spaces.
void check_model_file(const ModelFile& model, const std::string& path) {
  const std::string instead =
      "; give the model's tokenizer.json instead, if transformers can make one";
  if (model.pieces.empty()) throw std::runtime_error(path + ": a SentencePiece model of no pieces");
  if (model.model_type != 2)
    throw std::runtime_error(
        path + ": trainer_spec.model_type is " + std::to_string(model.model_type) +
        (model.model_type == 1 ? " (Unigram, T5's and ALBERT's kind)" : "") +
        "; paraplan reads SentencePiece BPE models (2), Llama 2's and Mistral's");
  if (model.has_charsmap || (!model.normalizer_name.empty() && model.normalizer_name != "identity"))
    throw std::runtime_error(
        path + ": normalizer_spec.name is \"" + printable_text(model.normalizer_name) +
        "\"; paraplan applies no normalization rules (\"identity\")" + instead);
  if (model.remove_extra_whitespaces || !model.escape_whitespaces || model.whitespace_as_suffix)
    throw std::runtime_error(
        path + ": " +
        (model.remove_extra_whitespaces ? "normalizer_spec.remove_extra_whitespaces is true"
         : !model.escape_whitespaces    ? "normalizer_spec.escape_whitespaces is false"
                                        : "trainer_spec.treat_whitespace_as_suffix is true") +
        "; paraplan keeps spaces as \"\xE2\x96\x81\" before words, as Llama 2's and Mistral's "
        "models do" +
        instead);
}

// transformers' merges (convert_slow_tokenizer's generate_merges): each
// piece BPE can reach (NORMAL: sentencepiece merges into no other) from each
// split into two pieces, ordered by score (higher first), then the longer
// left half, then the piece's id and the halves' ids.
struct MergeCandidate {
  float negative_score;
  int64_t negative_left_characters, negative_right_characters;
  int32_t merged, left, right;
  auto key() const {
    return std::tie(negative_score, negative_left_characters, negative_right_characters, merged,
                    left, right);
  }
};

std::vector<MergeCandidate> transformers_merges(const ModelFile& model) {
  std::unordered_map<std::string_view, int32_t> id_of_piece;
  for (size_t i = 0; i < model.pieces.size(); ++i)
    id_of_piece.emplace(model.pieces[i].text, static_cast<int32_t>(i));
  auto characters = [](std::string_view text) {
    return static_cast<int64_t>(std::count_if(text.begin(), text.end(), [](char c) {
      return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    }));
  };
  std::vector<MergeCandidate> merges;
  for (size_t i = 0; i < model.pieces.size(); ++i) {
    const Piece& piece = model.pieces[i];
    if (piece.type != kNormal) continue;
    const std::string_view text = piece.text;
    for (size_t cut = 1; cut < text.size(); ++cut) {
      if ((static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) continue;  // mid-character
      const auto left = id_of_piece.find(text.substr(0, cut));
      const auto right = id_of_piece.find(text.substr(cut));
      if (left != id_of_piece.end() && right != id_of_piece.end())
        merges.push_back({-piece.score, -characters(text.substr(0, cut)),
                          -characters(text.substr(cut)), static_cast<int32_t>(i), left->second,
                          right->second});
    }
  }
  std::sort(merges.begin(), merges.end(),
            [](const MergeCandidate& a, const MergeCandidate& b) { return a.key() < b.key(); });
  return merges;
}

}  // namespace

bool BpeTokenizerReader::is_sentencepiece_model(const std::string& text) {
  // A ModelProto starts with its first piece: field 1, length-delimited.
  return !text.empty() && text[0] == '\x0A';
}

BpeTokenizer BpeTokenizerReader::sentencepiece_model(const std::string& path,
                                                     const std::string& text) {
  const ModelFile model = read_model_file(text, path);
  check_model_file(model, path);
  BpeTokenizer tokenizer;
  tokenizer.source_ = path;
  tokenizer.metaspace_.enabled = true;
  tokenizer.metaspace_.strip_decoded_space = model.add_dummy_prefix;
  tokenizer.fuse_unknown_ = true;  // sentencepiece's, and transformers' fuse_unk
  tokenizer.prefix_space_ = model.add_dummy_prefix ? BpeTokenizer::PrefixSpace::kAlways
                                                   : BpeTokenizer::PrefixSpace::kNone;
  std::fill(std::begin(tokenizer.byte_fallback_tokens_), std::end(tokenizer.byte_fallback_tokens_),
            -1);
  for (size_t i = 0; i < model.pieces.size(); ++i) {
    const Piece& piece = model.pieces[i];
    const auto id = static_cast<int32_t>(i);
    const std::string where =
        path + ": piece " + std::to_string(i) + " (\"" + printable_text(piece.text) + "\")";
    if (piece.type < kNormal || piece.type > kByte)
      throw std::runtime_error(where + " is of type " + std::to_string(piece.type) +
                               ", not one of sentencepiece's (1 to 6)");
    switch (static_cast<PieceType>(piece.type)) {
      case kNormal: {
        std::string bytes;
        for (size_t at = 0; at < piece.text.size(); ++at) {
          if (piece.text.compare(at, kMetaspace.size(), kMetaspace) == 0) {
            bytes.push_back(' ');
            at += kMetaspace.size() - 1;
          } else {
            bytes.push_back(piece.text[at]);
          }
        }
        add_token(tokenizer, id, std::move(bytes), TokenKind::kOrdinary, where);
        break;
      }
      // In the vocabulary and special, as transformers writes them.
      case kUnknown:
        add_token(tokenizer, id, piece.text, TokenKind::kOrdinary, where);
        add_token(tokenizer, id, piece.text, TokenKind::kSpecial, where);
        tokenizer.unknown_token_ = id;
        break;
      case kControl:
        add_token(tokenizer, id, piece.text, TokenKind::kOrdinary, where);
        add_token(tokenizer, id, piece.text, TokenKind::kSpecial, where);
        break;
      case kByte: {
        const int value = fallback_byte_of(piece.text);
        if (!model.byte_fallback || value < 0)
          throw std::runtime_error(where +
                                   " is a BYTE piece but not <0xNN> of a byte_fallback model");
        add_token(tokenizer, id, std::string(1, static_cast<char>(value)), TokenKind::kByteFallback,
                  where);
        tokenizer.byte_fallback_tokens_[value] = id;
        break;
      }
      case kUserDefined:
      case kUnused:
        throw std::runtime_error(
            where + " is of type " + std::to_string(piece.type) +
            (piece.type == kUserDefined ? " (USER_DEFINED, matched in text before BPE)"
                                        : " (UNUSED)") +
            ", which paraplan does not encode; give the model's tokenizer.json instead");
    }
  }
  finish_metaspace(tokenizer);
  const std::vector<MergeCandidate> merges = transformers_merges(model);
  for (size_t priority = 0; priority < merges.size(); ++priority) {
    const auto& [score, left_characters, right_characters, merged, left, right] = merges[priority];
    tokenizer.merges_.emplace(BpeTokenizer::pair_key(left, right),
                              BpeTokenizer::Merge{static_cast<uint32_t>(priority), merged});
  }
  return tokenizer;
}

}  // namespace paraplan
