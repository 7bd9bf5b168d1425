// tokenizer_json_writer.h: what the two writers of a Hugging Face
// tokenizer.json share (bpe_tokenizer_export.cc for byte-level tokenizers,
// bpe_tokenizer_metaspace.cc for SentencePiece-style ones): a special token's
// entry and the file around its parts. Internal to runtime/tokenizer/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace paraplan::tokenizer_json {

// An added_tokens entry: placed by id, never found in text (as paraplan encodes).
inline nlohmann::json special_token(int32_t id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// The file: `model` is the BPE model's object (type, vocab, merges, options).
inline std::string file(nlohmann::json added_tokens, nlohmann::json normalizer,
                        nlohmann::json pre_tokenizer, nlohmann::json decoder,
                        nlohmann::json model) {
  const nlohmann::json file = {{"version", "1.0"},
                               {"truncation", nullptr},
                               {"padding", nullptr},
                               {"added_tokens", std::move(added_tokens)},
                               {"normalizer", std::move(normalizer)},
                               {"pre_tokenizer", std::move(pre_tokenizer)},
                               {"post_processor", nullptr},
                               {"decoder", std::move(decoder)},
                               {"model", std::move(model)}};
  return file.dump();
}

}  // namespace paraplan::tokenizer_json
