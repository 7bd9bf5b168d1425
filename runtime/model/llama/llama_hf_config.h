// llama_hf_config.h: a Llama model's config.json as transformers' LlamaConfig
// writes and reads it, so a checkpoint directory loads with
// LlamaForCausalLM.from_pretrained and a Hugging Face Llama checkpoint (Llama
// 2, 3, 3.1, 3.2: rope_scaling none or "llama3") loads here. The same for
// the Llama family's other model types: Mistral (MistralForCausalLM, Llama's
// tensors; its sliding_window becomes TransformerConfig::attention_window)
// and Qwen 2 and 2.5 (Qwen2ForCausalLM: Llama with q/k/v biases, qkv_bias;
// a model with qkv_bias is written as Qwen 2).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"

namespace paraplan::llama {

nlohmann::ordered_json hugging_face_config(const TransformerConfig& config);
// The config.json model_types read here: "llama", "mistral", "qwen2".
bool is_model_type(const std::string& model_type);
// Refuses, naming the field, what paraplan's Llama cannot compute (biases,
// another activation, another rope_type, a head_dim other than
// hidden_size / num_attention_heads).
TransformerConfig config_from_hugging_face(const nlohmann::json& json, const std::string& path);
std::vector<std::string> config_differences(const TransformerConfig& saved,
                                            const TransformerConfig& plan);

}  // namespace paraplan::llama
