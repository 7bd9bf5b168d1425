// gpt_hf_config.cc: GPT2Config <-> TransformerConfig.
#include "runtime/model/gpt/gpt_hf_config.h"

#include <stdexcept>

#include "common/json_fields.h"
#include "runtime/model/config_differences.h"

namespace paraplan::gpt {

nlohmann::ordered_json hugging_face_config(const TransformerConfig& config) {
  nlohmann::ordered_json json;
  json["architectures"] = {"GPT2LMHeadModel"};
  json["model_type"] = "gpt2";
  json["vocab_size"] = config.vocab_size;
  json["n_positions"] = config.seq_len;
  json["n_ctx"] = config.seq_len;
  json["n_embd"] = config.d_model;
  json["n_layer"] = config.num_layers;
  json["n_head"] = config.num_heads;
  json["n_inner"] = config.ffn_size;
  json["activation_function"] = "gelu_new";  // GPT-2's tanh approximation, as kernels/ use
  // paraplan trains without dropout; Hugging Face's defaults (0.1) would differ.
  json["resid_pdrop"] = 0.0;
  json["embd_pdrop"] = 0.0;
  json["attn_pdrop"] = 0.0;
  json["layer_norm_epsilon"] = short_decimal(config.norm_epsilon);
  json["initializer_range"] = short_decimal(config.init_std);
  json["scale_attn_weights"] = true;
  json["tie_word_embeddings"] = config.tied_embeddings;
  json["torch_dtype"] = "float32";
  return json;
}

TransformerConfig config_from_hugging_face(const nlohmann::json& json, const std::string& path) {
  const std::string activation = json_string_or(json, "activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    throw std::runtime_error(path + ": activation_function is '" + activation +
                             "' but paraplan's GPT-2 uses the tanh GELU (gelu_new)");
  TransformerConfig config;
  config.architecture = Architecture::kGpt2;
  config.vocab_size = static_cast<int>(json_integer(json, "vocab_size", path));
  config.seq_len = static_cast<int>(json_integer(json, "n_positions", path));
  config.d_model = static_cast<int>(json_integer(json, "n_embd", path));
  config.num_layers = static_cast<int>(json_integer(json, "n_layer", path));
  config.num_heads = static_cast<int>(json_integer(json, "n_head", path));
  config.ffn_size =
      static_cast<int>(json_integer(json, "n_inner", path, 4 * int64_t{config.d_model}));
  config.norm_epsilon = static_cast<float>(json_number(json, "layer_norm_epsilon", path, 1e-5));
  config.init_std = static_cast<float>(json_number(json, "initializer_range", path, 0.02));
  const auto tied = json.find("tie_word_embeddings");
  config.tied_embeddings = tied == json.end() || !tied->is_boolean() || tied->get<bool>();
  return config;
}

std::vector<std::string> config_differences(const TransformerConfig& saved,
                                            const TransformerConfig& plan) {
  ConfigDifferences differences;
  differences.integer("vocab_size", saved.vocab_size, plan.vocab_size, "vocab_size");
  differences.integer("n_positions", saved.seq_len, plan.seq_len, "seq_len");
  differences.integer("n_embd", saved.d_model, plan.d_model, "d_model");
  differences.integer("n_layer", saved.num_layers, plan.num_layers, "layers");
  differences.integer("n_head", saved.num_heads, plan.num_heads, "heads");
  differences.integer("n_inner", saved.ffn_size, plan.ffn_size, "ffn_size");
  differences.tied_embeddings(saved.tied_embeddings, plan.tied_embeddings);
  differences.real("layer_norm_epsilon", saved.norm_epsilon, plan.norm_epsilon);
  return differences.lines;
}

}  // namespace paraplan::gpt
