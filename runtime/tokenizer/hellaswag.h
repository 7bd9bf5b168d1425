// hellaswag.h: the multiple-choice evaluation sets `train --hellaswag` and
// `evaluate --hellaswag` read: llm.c's eval file (hellaswag_val.bin, tokens
// already; runtime/data/multiple_choice.h), or HellaSwag's own .jsonl
// (github.com/rowanz/hellaswag: one JSON object per line with "ctx",
// "endings" and "label"), rendered as llm.c's dev/data/hellaswag.py renders
// it: the context's tokens, and each ending's tokens with a space before it
// (encoded as text continuing the context: a SentencePiece-style tokenizer's
// "▁ending", not "▁▁ending"). GPT-2's tokenizer so reproduces llm.c's
// hellaswag_val.bin token for token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/multiple_choice.h"
#include "runtime/tokenizer/bpe_tokenizer.h"

namespace paraplan {

// HellaSwag's .jsonl, encoded with `tokenizer` (null: one token per byte, for
// byte-level models). Throws std::runtime_error naming the file, the line
// and the field.
std::vector<MultipleChoiceExample> read_hellaswag_jsonl(const std::string& path,
                                                        const BpeTokenizer* tokenizer);

// Whether `path` names HellaSwag's text (a .jsonl, encoded with a
// tokenizer) rather than llm.c's eval file of tokens.
inline bool is_hellaswag_text(std::string_view path) {
  return path.ends_with(".jsonl");
}

// A path ending in .jsonl as above, anything else as llm.c's eval file (its
// tokens taken as they are; `tokenizer` unused).
std::vector<MultipleChoiceExample> read_multiple_choice_set(const std::string& path,
                                                            const BpeTokenizer* tokenizer);

}  // namespace paraplan
