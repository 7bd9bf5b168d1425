// utf8.h: UTF-8 as the tokenizers read and show it: one code point decoded
// (invalid bytes reported, never skipped), and bytes made valid for display
// the way Python's errors="replace" and Rust's from_utf8_lossy do.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace paraplan {

inline constexpr char32_t kInvalidUtf8 = 0xFFFFFFFF;

// The code point starting at s[0] (left >= 1 bytes available) and its length
// in bytes; kInvalidUtf8 where s[0] does not start valid UTF-8 (overlong
// forms and surrogates are invalid), with `length` the maximal subpart of a
// valid sequence it starts (1 to 3 bytes), as Unicode counts the bytes one
// U+FFFD replaces.
char32_t decode_utf8(const unsigned char* s, size_t left, size_t& length);

// Appends the UTF-8 bytes of `code_point` (at most U+10FFFF).
void append_utf8(char32_t code_point, std::string& out);

// `bytes` with each maximal invalid subpart replaced by U+FFFD.
std::string to_valid_utf8(std::string_view bytes);

}  // namespace paraplan
