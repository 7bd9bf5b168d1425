// utf8.cc: decoding by Unicode's table of well-formed byte sequences.
#include "runtime/tokenizer/utf8.h"

namespace paraplan {

char32_t decode_utf8(const unsigned char* s, size_t left, size_t& length) {
  length = 1;
  const unsigned char b0 = s[0];
  if (b0 < 0x80) return b0;
  int extra;
  char32_t value;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    extra = 1, value = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    extra = 2, value = b0 & 0x0F;
    if (b0 == 0xE0) low = 0xA0;
    if (b0 == 0xED) high = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    extra = 3, value = b0 & 0x07;
    if (b0 == 0xF0) low = 0x90;
    if (b0 == 0xF4) high = 0x8F;
  } else {
    return kInvalidUtf8;
  }
  for (int k = 1; k <= extra; ++k) {
    const bool fits = static_cast<size_t>(k) < left &&
                      (k == 1 ? s[k] >= low && s[k] <= high : (s[k] & 0xC0) == 0x80);
    if (!fits) {
      length = static_cast<size_t>(k);  // the lead and the continuation bytes that fit
      return kInvalidUtf8;
    }
    value = (value << 6) | (s[k] & 0x3F);
  }
  length = static_cast<size_t>(extra) + 1;
  return value;
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size());
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t at = 0; at < bytes.size();) {
    size_t length;
    if (decode_utf8(s + at, bytes.size() - at, length) == kInvalidUtf8)
      text += "\xEF\xBF\xBD";
    else
      text.append(bytes.data() + at, length);
    at += length;
  }
  return text;
}

}  // namespace paraplan
