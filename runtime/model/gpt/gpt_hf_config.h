// gpt_hf_config.h: GPT-2's config.json as transformers' GPT2Config writes and
// reads it, so a checkpoint directory loads with
// GPT2LMHeadModel.from_pretrained and a Hugging Face GPT-2 export loads here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"

namespace paraplan::gpt {

nlohmann::ordered_json hugging_face_config(const TransformerConfig& config);
TransformerConfig config_from_hugging_face(const nlohmann::json& json, const std::string& path);
std::vector<std::string> config_differences(const TransformerConfig& saved,
                                            const TransformerConfig& plan);

}  // namespace paraplan::gpt
