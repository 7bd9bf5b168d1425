// pretokenizer.h: the split of text into the pieces a byte-level BPE encodes
// one at a time, as the tokenizer's regular expression finds them. paraplan
// matches the three patterns byte-level BPE models use by hand (no regex
// engine), exactly as Rust's regex and Oniguruma evaluate them:
//   GPT-2 (tiktoken r50k_base; Hugging Face ByteLevel's own pattern)
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3 (tiktoken cl100k_base; GPT-3.5/4 too)
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//     ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen 2 (Llama 3's with \p{N} for \p{N}{1,3}: one digit a piece).
// Text is UTF-8; a byte that is not part of valid UTF-8 is a character of
// its own that is neither a letter, a number nor a space (and is kept, so
// decoding gives the bytes back).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace paraplan {

enum class PretokenizerPattern { kGpt2, kLlama3, kQwen2 };

// The pattern's regular expression, as tokenizer files write it.
std::string_view pretokenizer_regex(PretokenizerPattern pattern);
std::string_view pretokenizer_name(PretokenizerPattern pattern);
// Which of the three `regex` is (compared as written), or nullopt.
std::optional<PretokenizerPattern> pretokenizer_pattern_of(std::string_view regex);

struct PretokenizeResult {
  std::vector<std::string_view> pieces;  // into the text, in order, covering it
  int64_t invalid_utf8_bytes = 0;
  // The text decoded, kept between calls for its capacity.
  struct Characters {
    std::vector<uint32_t> offsets;  // byte offset of each character, then the size
    std::vector<char32_t> code_points;
    std::vector<uint8_t> kinds;
  } characters;
};

// Splits `text` into pieces, as the pattern's find-all does; clears and
// refills `result` (its vectors keep their capacity between calls).
void pretokenize(PretokenizerPattern pattern, std::string_view text, PretokenizeResult& result);

}  // namespace paraplan
