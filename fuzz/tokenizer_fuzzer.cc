// tokenizer_fuzzer.cc: a tokenizer file (runtime/tokenizer/bpe_tokenizer.h;
// the first byte picks tokenizer.json or another name, where a file starting
// with 0x0A is a SentencePiece model and anything else a tiktoken file; the
// rest is the file), then the rest of the input as text: the three patterns' pieces must
// cover it exactly, its display form (to_valid_utf8) must be valid UTF-8 and
// the text itself where the text was valid, NFC must be idempotent, and an
// accepted tokenizer must decode its encoding back to the same bytes (of the
// normalized text where it normalizes; a SentencePiece-style one its
// continuation, with "▁" as a space, where no character was unknown), valid
// UTF-8 or not, and write itself as a tokenizer.json that reads back
// encoding the same.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/pretokenizer.h"
#include "runtime/tokenizer/unicode_normalization.h"
#include "runtime/tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string name = data[0] & 1 ? "tokenizer.json" : "gpt2.tiktoken";

  PretokenizeResult split;
  for (const PretokenizerPattern pattern :
       {PretokenizerPattern::kGpt2, PretokenizerPattern::kLlama3, PretokenizerPattern::kQwen2}) {
    pretokenize(pattern, text, split);
    std::string joined;
    for (const std::string_view piece : split.pieces) {
      if (piece.empty()) fuzz::fail("an empty piece", std::string(pretokenizer_name(pattern)));
      joined += piece;
    }
    if (joined != text) fuzz::fail("the pieces do not cover the text", text);
  }
  const std::string shown = to_valid_utf8(text);
  pretokenize(PretokenizerPattern::kGpt2, shown, split);
  if (split.invalid_utf8_bytes != 0) fuzz::fail("to_valid_utf8 left invalid UTF-8", text);
  pretokenize(PretokenizerPattern::kGpt2, text, split);
  if (split.invalid_utf8_bytes == 0 && shown != text)
    fuzz::fail("to_valid_utf8 changed valid UTF-8", text);

  const std::string nfc = to_nfc(text);
  if (to_nfc(nfc) != nfc) fuzz::fail("NFC is not idempotent", text);

  fuzz::refused_clearly(name, [&] {
    const BpeTokenizer tokenizer = BpeTokenizer::parse(text, name);
    if (tokenizer.is_sentencepiece()) {
      // The prefix space and Strip make the start of a text lossy (as in
      // Hugging Face's); a continuation is not, but for unknown characters.
      // (A vocabulary without "▁" gives a space back as "▁", as Hugging
      // Face's ByteFallback decodes it.)
      auto spaced = [](std::string text) {
        for (size_t at; (at = text.find("\xE2\x96\x81")) != std::string::npos;)
          text.replace(at, 3, " ");
        return text;
      };
      const std::vector<int32_t> tokens = tokenizer.encode_continuation(text);
      const std::optional<int32_t> unknown = tokenizer.unknown_token();
      const bool has_unknown =
          unknown && std::find(tokens.begin(), tokens.end(), *unknown) != tokens.end();
      if (!has_unknown && spaced(tokenizer.decode_continuation(tokens)) != spaced(text))
        fuzz::fail("decode_continuation(encode_continuation(text)) is not the text", text);
    } else if (tokenizer.decode(tokenizer.encode(text)) !=
               (tokenizer.normalizes_to_nfc() ? nfc : text)) {
      fuzz::fail("decode(encode(text)) is not the text (or its NFC, where it normalizes)", text);
    }
    // Written as a tokenizer.json (what train keeps beside checkpoints), it
    // reads back as a tokenizer that encodes the same.
    const std::string written = tokenizer.to_hugging_face_json();
    try {
      if (BpeTokenizer::parse(written, "written.json").encode(text) != tokenizer.encode(text))
        fuzz::fail("the tokenizer.json it writes encodes otherwise", written);
    } catch (const std::runtime_error& error) {
      fuzz::fail("the tokenizer.json it writes is refused", error.what());
    }
  });
  return 0;
}
