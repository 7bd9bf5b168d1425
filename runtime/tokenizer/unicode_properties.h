// unicode_properties.h: the three Unicode properties the BPE pre-tokenizers'
// patterns ask of a code point: \p{L} (a letter), \p{N} (a number) and \s
// (White_Space). The tables are generated (scripts/gen_unicode_properties.py).
#pragma once

namespace paraplan {

bool is_unicode_letter(char32_t code_point);
bool is_unicode_number(char32_t code_point);
bool is_unicode_white_space(char32_t code_point);

}  // namespace paraplan
