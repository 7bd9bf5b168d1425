// pretokenizer.cc: the three pre-tokenizer patterns, matched by hand. At each
// position the alternatives are tried in the pattern's order and the first
// that matches wins (leftmost-first, as Rust's regex and Oniguruma do); some
// alternative always matches, so the pieces cover the text.
#include "runtime/tokenizer/pretokenizer.h"

#include <stdexcept>
#include <string>

#include "runtime/tokenizer/unicode_properties.h"
#include "runtime/tokenizer/utf8.h"

namespace paraplan {

namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum Kind : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4, kLineBreak = 8 };

uint8_t kind_of(char32_t code_point) {
  if (code_point < 0x80) {
    const char c = static_cast<char>(code_point);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return kLetter;
    if (c >= '0' && c <= '9') return kNumber;
    if (c == '\n' || c == '\r') return kSpace | kLineBreak;
    if (c == ' ' || (c >= '\t' && c <= '\f')) return kSpace;
    return 0;
  }
  if (code_point == kInvalidUtf8) return 0;
  if (is_unicode_letter(code_point)) return kLetter;
  if (is_unicode_number(code_point)) return kNumber;
  if (is_unicode_white_space(code_point)) return kSpace;
  return 0;
}

// The decoded text and the pattern's alternatives over it. Positions are
// character indexes; each matcher returns the end of its match, or `at`
// where it does not match.
class Matcher {
 public:
  explicit Matcher(const PretokenizeResult::Characters& text)
      : points_(text.code_points), kinds_(text.kinds), size_(text.code_points.size()) {}

  size_t gpt2(size_t at) const {
    if (const size_t end = contraction(at, /*ignore_case=*/false); end != at) return end;
    if (const size_t end = optional_space_then_run(at, kLetter); end != at) return end;
    if (const size_t end = optional_space_then_run(at, kNumber); end != at) return end;
    if (const size_t end = optional_space_then_others(at); end != at) return end;
    return white_space(at);
  }

  // Llama 3's pattern, and Qwen 2's where max_digits is 1.
  size_t llama3(size_t at, size_t max_digits) const {
    if (const size_t end = contraction(at, /*ignore_case=*/true); end != at) return end;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (is(at, kLetter)) return run(at, kLetter);
    if (!is(at, kLineBreak | kLetter | kNumber) && is(at + 1, kLetter)) return run(at + 1, kLetter);
    // \p{N}{1,3}
    if (is(at, kNumber)) {
      size_t end = at;
      while (end < size_ && end - at < max_digits && is(end, kNumber)) ++end;
      return end;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if (const size_t end = optional_space_then_others(at); end != at) return run(end, kLineBreak);
    // \s*[\r\n]+: the white space up to and including its last line break.
    const size_t spaces = run(at, kSpace);
    for (size_t k = spaces; k > at; --k)
      if (is(k - 1, kLineBreak)) return k;
    return white_space(at);
  }

 private:
  bool is(size_t at, uint8_t kind) const { return at < size_ && (kinds_[at] & kind) != 0; }
  bool other(size_t at) const {
    return at < size_ && (kinds_[at] & (kLetter | kNumber | kSpace)) == 0;
  }
  size_t run(size_t at, uint8_t kind) const {
    while (is(at, kind)) ++at;
    return at;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, with (?i) Unicode's simple case folding: ASCII,
  // and U+017F (long s) for s.
  size_t contraction(size_t at, bool ignore_case) const {
    if (points_[at] != U'\'' || at + 1 >= size_) return at;
    auto letter = [&](size_t k) -> char32_t {
      const char32_t c = points_[k];
      if (!ignore_case) return c;
      if (c >= U'A' && c <= U'Z') return c + 32;
      return c == 0x17F ? U's' : c;
    };
    const char32_t first = letter(at + 1);
    if (first == U's' || first == U't' || first == U'm' || first == U'd') return at + 2;
    if (at + 2 >= size_) return at;
    const char32_t second = letter(at + 2);
    if ((first == U'r' && second == U'e') || (first == U'v' && second == U'e') ||
        (first == U'l' && second == U'l'))
      return at + 3;
    return at;
  }

  //  ?\p{L}+ and  ?\p{N}+
  size_t optional_space_then_run(size_t at, uint8_t kind) const {
    const size_t start = points_[at] == U' ' && is(at + 1, kind) ? at + 1 : at;
    return is(start, kind) ? run(start, kind) : at;
  }

  //  ?[^\s\p{L}\p{N}]+
  size_t optional_space_then_others(size_t at) const {
    size_t end = points_[at] == U' ' && other(at + 1) ? at + 1 : at;
    if (!other(end)) return at;
    while (other(end)) ++end;
    return end;
  }

  // \s+(?!\S)|\s+: a run of white space, less its last character when a
  // non-space follows and the run is longer than one (that character goes
  // with the word after it).
  size_t white_space(size_t at) const {
    const size_t end = run(at, kSpace);
    if (end == size_ || end - at == 1) return end;
    return end - 1;
  }

  const std::vector<char32_t>& points_;
  const std::vector<uint8_t>& kinds_;
  const size_t size_;
};

void decode(std::string_view text, PretokenizeResult& result) {
  PretokenizeResult::Characters& characters = result.characters;
  characters.offsets.clear();
  characters.code_points.clear();
  characters.kinds.clear();
  result.invalid_utf8_bytes = 0;
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t at = 0; at < text.size();) {
    size_t length;
    const char32_t code_point = decode_utf8(bytes + at, text.size() - at, length);
    if (code_point == kInvalidUtf8) {
      length = 1;  // a character of its own per byte
      ++result.invalid_utf8_bytes;
    }
    characters.offsets.push_back(static_cast<uint32_t>(at));
    characters.code_points.push_back(code_point);
    characters.kinds.push_back(kind_of(code_point));
    at += length;
  }
  characters.offsets.push_back(static_cast<uint32_t>(text.size()));
}

}  // namespace

std::string_view pretokenizer_regex(PretokenizerPattern pattern) {
  switch (pattern) {
    case PretokenizerPattern::kGpt2:
      return kGpt2Regex;
    case PretokenizerPattern::kLlama3:
      return kLlama3Regex;
    case PretokenizerPattern::kQwen2:
      return kQwen2Regex;
  }
  return {};
}

std::string_view pretokenizer_name(PretokenizerPattern pattern) {
  switch (pattern) {
    case PretokenizerPattern::kGpt2:
      return "GPT-2";
    case PretokenizerPattern::kLlama3:
      return "Llama 3";
    case PretokenizerPattern::kQwen2:
      return "Qwen 2";
  }
  return {};
}

std::optional<PretokenizerPattern> pretokenizer_pattern_of(std::string_view regex) {
  for (const PretokenizerPattern pattern :
       {PretokenizerPattern::kGpt2, PretokenizerPattern::kLlama3, PretokenizerPattern::kQwen2})
    if (regex == pretokenizer_regex(pattern)) return pattern;
  return std::nullopt;
}

void pretokenize(PretokenizerPattern pattern, std::string_view text, PretokenizeResult& result) {
  if (text.size() > UINT32_MAX)
    throw std::runtime_error("pretokenize: a text of " + std::to_string(text.size()) +
                             " bytes; split it below 4 GiB");
  decode(text, result);
  result.pieces.clear();
  const Matcher matcher(result.characters);
  const std::vector<uint32_t>& offsets = result.characters.offsets;
  const size_t size = result.characters.code_points.size();
  for (size_t at = 0; at < size;) {
    size_t end = 0;
    switch (pattern) {
      case PretokenizerPattern::kGpt2:
        end = matcher.gpt2(at);
        break;
      case PretokenizerPattern::kLlama3:
        end = matcher.llama3(at, 3);
        break;
      case PretokenizerPattern::kQwen2:
        end = matcher.llama3(at, 1);
        break;
    }
    result.pieces.push_back(text.substr(offsets[at], offsets[end] - offsets[at]));
    at = end;
  }
}

}  // namespace paraplan
