// snappy.cc: Snappy's raw block format (snappy.h).
#include "runtime/tokenizer/snappy.h"

#include <cstdint>
#include <stdexcept>

namespace paraplan {

std::string snappy_uncompress(std::string_view block, size_t max_bytes, const std::string& where) {
  size_t at = 0;
  auto fail = [&](const std::string& what) {
    throw std::runtime_error(where + ": Snappy block: " + what + " at byte " + std::to_string(at));
  };
  auto byte = [&]() -> uint32_t {
    if (at >= block.size()) fail("it ends early");
    return static_cast<unsigned char>(block[at++]);
  };
  uint64_t length = 0;
  for (int shift = 0;; shift += 7) {
    if (shift > 28) fail("the length's varint is too long");
    const uint32_t b = byte();
    length |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) break;
  }
  if (length > max_bytes)
    fail("its stated length, " + std::to_string(length) + " bytes, is above " +
         std::to_string(max_bytes));
  std::string out;
  out.reserve(length);
  while (at < block.size()) {
    const uint32_t tag = byte();
    uint64_t size = 0, offset = 0;
    switch (tag & 3) {
      case 0: {  // a literal: its length in the tag, or in the 1-4 bytes after it
        size = tag >> 2;
        if (size >= 60) {
          const uint32_t bytes = static_cast<uint32_t>(size) - 59;
          size = 0;
          for (uint32_t i = 0; i < bytes; ++i) size |= static_cast<uint64_t>(byte()) << (8 * i);
        }
        ++size;
        if (size > block.size() - at)
          fail("a literal of " + std::to_string(size) + " bytes runs past its end");
        if (out.size() + size > length) fail("it decompresses past its stated length");
        out.append(block.data() + at, size);
        at += size;
        continue;
      }
      case 1:  // a copy of 4-11 bytes, 11-bit offset
        size = 4 + ((tag >> 2) & 7);
        offset = ((tag >> 5) << 8) | byte();
        break;
      case 2:  // a copy of 1-64 bytes, 16-bit offset
        size = (tag >> 2) + 1;
        offset = byte();
        offset |= byte() << 8;
        break;
      case 3:  // a copy of 1-64 bytes, 32-bit offset
        size = (tag >> 2) + 1;
        for (int i = 0; i < 4; ++i) offset |= static_cast<uint64_t>(byte()) << (8 * i);
        break;
    }
    if (offset == 0 || offset > out.size())
      fail("a copy reaches " + std::to_string(offset) + " bytes back, before the start");
    if (out.size() + size > length) fail("it decompresses past its stated length");
    // Byte by byte: a copy may overlap what it writes (a run).
    for (uint64_t i = 0; i < size; ++i) out.push_back(out[out.size() - offset]);
  }
  if (out.size() != length)
    fail("it decompresses to " + std::to_string(out.size()) + " bytes, not its stated " +
         std::to_string(length));
  return out;
}

}  // namespace paraplan
