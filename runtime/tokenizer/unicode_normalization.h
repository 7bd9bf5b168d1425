// unicode_normalization.h: Unicode Normalization Form C (UAX #15), as the
// normalizer of Qwen 2's tokenizer.json applies it before pre-tokenizing:
// full canonical decomposition, canonical ordering of combining marks, then
// canonical composition (Hangul by arithmetic). Bytes that are not valid
// UTF-8 pass through unchanged, and compose with nothing.
#pragma once

#include <string>
#include <string_view>

namespace paraplan {

// `text` in NFC; text that is ASCII is returned as it is, at the cost of one
// scan.
std::string to_nfc(std::string_view text);

}  // namespace paraplan
