// unicode_normalization.cc: NFC by UAX #15's algorithm over the generated
// tables.
#include "runtime/tokenizer/unicode_normalization.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/tokenizer/unicode_normalization_tables.h"
#include "runtime/tokenizer/utf8.h"

namespace paraplan {

namespace {

using namespace normalization;

// An invalid byte travels as a value above Unicode's range (kByteMark + the
// byte): combining class 0, no decomposition, no composition.
constexpr char32_t kByteMark = 0x110000;

// Hangul syllables (Unicode's section 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t c) {
  if (c < 0x300 || c >= kByteMark) return 0;
  const CombiningClassRange* end = kCombiningClasses + kCombiningClassCount;
  const CombiningClassRange* after = std::upper_bound(
      kCombiningClasses, end, c,
      [](char32_t value, const CombiningClassRange& range) { return value < range.first; });
  if (after == kCombiningClasses || c > (after - 1)->last) return 0;
  return (after - 1)->combining_class;
}

const CanonicalMapping* mapping_of(char32_t c) {
  if (c < 0xC0 || c >= kByteMark) return nullptr;
  const CanonicalMapping* end = kCanonicalMappings + kCanonicalMappingCount;
  const CanonicalMapping* found = std::lower_bound(
      kCanonicalMappings, end, c,
      [](const CanonicalMapping& mapping, char32_t value) { return mapping.code_point < value; });
  return found != end && found->code_point == c ? found : nullptr;
}

void decompose(char32_t c, std::vector<char32_t>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const int index = static_cast<int>(c - kSBase);
    out.push_back(kLBase + index / kNCount);
    out.push_back(kVBase + (index % kNCount) / kTCount);
    if (index % kTCount != 0) out.push_back(kTBase + index % kTCount);
    return;
  }
  if (const CanonicalMapping* mapping = mapping_of(c)) {
    decompose(mapping->first, out);
    if (mapping->second != 0) decompose(mapping->second, out);
    return;
  }
  out.push_back(c);
}

// The primary composite of first + second, or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount)
    return first + (second - kTBase);
  // first (21 bits) and second (21 bits) as one key.
  static const std::unordered_map<uint64_t, char32_t> composites = [] {
    std::unordered_map<uint64_t, char32_t> table;
    for (size_t i = 0; i < kCanonicalMappingCount; ++i)
      if (kCanonicalMappings[i].composes)
        table[uint64_t{kCanonicalMappings[i].first} << 21 | kCanonicalMappings[i].second] =
            kCanonicalMappings[i].code_point;
    return table;
  }();
  if (first >= kByteMark || second >= kByteMark) return 0;
  const auto found = composites.find(uint64_t{first} << 21 | second);
  return found == composites.end() ? 0 : found->second;
}

// Canonical ordering: each run of combining marks stably sorted by class
// (insertion sort: runs are a few marks long, and it allocates nothing).
void order_marks(std::vector<char32_t>& text) {
  for (size_t at = 1; at < text.size(); ++at) {
    const char32_t c = text[at];
    const uint8_t c_class = combining_class(c);
    if (c_class == 0) continue;
    size_t to = at;
    while (to > 0 && combining_class(text[to - 1]) > c_class) {
      text[to] = text[to - 1];
      --to;
    }
    text[to] = c;
  }
}

// Canonical composition (UAX #15): each character joins the last starter
// when nothing between them blocks it (a character of class 0 or of a class
// not below its own).
void compose_all(std::vector<char32_t>& text) {
  if (text.empty()) return;
  size_t starter = 0, kept = 1;
  int last_class = combining_class(text[0]) == 0 ? 0 : 256;  // a leading mark blocks
  for (size_t at = 1; at < text.size(); ++at) {
    const char32_t c = text[at];
    const int c_class = combining_class(c);
    const char32_t composite = compose(text[starter], c);
    if (composite != 0 && (last_class < c_class || last_class == 0) &&
        !(last_class == 0 && kept - 1 != starter)) {
      text[starter] = composite;
      continue;
    }
    if (c_class == 0) starter = kept;
    last_class = c_class;
    text[kept++] = c;
  }
  text.resize(kept);
}

// NFC of a piece of text (any bytes), appended to `out`.
void normalize_segment(std::string_view text, std::vector<char32_t>& points, std::string& out) {
  points.clear();
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t at = 0; at < text.size();) {
    size_t length;
    const char32_t c = decode_utf8(bytes + at, text.size() - at, length);
    if (c == kInvalidUtf8) {
      points.push_back(kByteMark + bytes[at]);
      at += 1;
      continue;
    }
    decompose(c, points);
    at += length;
  }
  order_marks(points);
  compose_all(points);
  for (const char32_t c : points)
    if (c >= kByteMark)
      out.push_back(static_cast<char>(c - kByteMark));
    else
      append_utf8(c, out);
}

}  // namespace

// Text splits before every ASCII character into parts NFC treats apart (an
// ASCII character is a starter and the second of no composition), so ASCII
// is copied and only the stretches around other bytes, from the character
// before them, go through the algorithm.
std::string to_nfc(std::string_view text) {
  auto ascii = [](char c) { return (c & 0x80) == 0; };
  if (std::all_of(text.begin(), text.end(), ascii)) return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::vector<char32_t> points;
  for (size_t at = 0; at < text.size();) {
    size_t other = at;
    while (other < text.size() && ascii(text[other])) ++other;
    if (other == text.size()) {
      out.append(text.substr(at));
      break;
    }
    // The ASCII character before may be a starter its marks compose onto.
    const size_t begin = other > at ? other - 1 : other;
    out.append(text.substr(at, begin - at));
    size_t end = other;
    while (end < text.size() && !ascii(text[end])) ++end;
    normalize_segment(text.substr(begin, end - begin), points, out);
    at = end;
  }
  return out;
}

}  // namespace paraplan
