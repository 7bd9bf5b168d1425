// printable_text.h: bytes from a file as an error message can show them, so a
// hostile file cannot put control characters, invalid UTF-8 or megabytes of
// text into a message; and the UTF-8 check of text that is printed as JSON.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace paraplan {

// At most max_bytes of `text` (then "..."), printable ASCII as it is and every
// other byte, and the backslash, as \xNN.
inline std::string printable_text(std::string_view text, size_t max_bytes = 64) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string shown;
  for (size_t i = 0; i < text.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      shown += static_cast<char>(c);
    } else {
      shown += "\\x";
      shown += kHex[c >> 4];
      shown += kHex[c & 0xf];
    }
  }
  if (text.size() > max_bytes) shown += "...";
  return shown;
}

// Where the first byte that breaks UTF-8 sits in `text`, or npos when it is
// valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
inline size_t invalid_utf8_offset(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  for (size_t i = 0; i < size;) {
    const unsigned char lead = bytes[i];
    size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
    if (lead < 0x80) {
      ++i;
      continue;
    } else if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) low = 0xa0;
      if (lead == 0xed) high = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) low = 0x90;
      if (lead == 0xf4) high = 0x8f;
    } else {
      return i;
    }
    if (i + length > size) return i;
    if (bytes[i + 1] < low || bytes[i + 1] > high) return i + 1;
    for (size_t k = 2; k < length; ++k)
      if (bytes[i + k] < 0x80 || bytes[i + k] > 0xbf) return i + k;
    i += length;
  }
  return std::string_view::npos;
}

// "byte 0xff at offset 3 is not valid UTF-8", or "" when `text` is valid UTF-8.
inline std::string utf8_problem(std::string_view text) {
  const size_t offset = invalid_utf8_offset(text);
  if (offset == std::string_view::npos) return "";
  static constexpr char kHex[] = "0123456789abcdef";
  const unsigned char byte = static_cast<unsigned char>(text[offset]);
  return std::string("byte 0x") + kHex[byte >> 4] + kHex[byte & 0xf] + " at offset " +
         std::to_string(offset) + " is not valid UTF-8";
}

}  // namespace paraplan
