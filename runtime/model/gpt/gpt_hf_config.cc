// gpt_hf_config.cc: GPT2Config <-> TransformerConfig.
#include "runtime/model/gpt/gpt_hf_config.h"

#include <stdexcept>

#include "common/json_fields.h"
#include "runtime/model/config_differences.h"

namespace paraplan::gpt {

namespace {

// config.json's names for each field, for messages.
constexpr TransformerConfigFields kHuggingFaceGptFields{
    {"vocab_size", "n_positions", "n_layer", "n_embd", "n_head", "n_inner"},
    "layer_norm_epsilon",
    "initializer_range"};

}  // namespace

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
    throw std::runtime_error(path + ": activation_function is '" + printable_text(activation) +
                             "' but paraplan's GPT-2 uses the tanh GELU (gelu_new)");
  TransformerConfigValues values;
  values.architecture = Architecture::kGpt2;
  ModelShape& shape = values.shape;
  shape.vocab_size = json_integer(json, "vocab_size", path);
  shape.seq_len = json_integer(json, "n_positions", path);
  shape.d_model = json_integer(json, "n_embd", path);
  shape.num_layers = json_integer(json, "n_layer", path);
  shape.num_heads = json_integer(json, "n_head", path);
  // GPT2Config's n_inner = null means 4 x n_embd; n_embd is validated with it,
  // so an n_embd too large for the product is refused by name first.
  const int64_t default_inner =
      shape.d_model > 0 && shape.d_model <= kMaxModelDimension ? 4 * shape.d_model : 1;
  shape.ffn_size = json_integer(json, "n_inner", path, default_inner);
  values.norm_epsilon = json_number(json, "layer_norm_epsilon", path, 1e-5);
  values.init_std = json_number(json, "initializer_range", path, 0.02);
  const auto tied = json.find("tie_word_embeddings");
  if (tied != json.end() && !tied->is_null() && !tied->is_boolean())
    throw std::runtime_error(path + ": field 'tie_word_embeddings' is " + json_value_text(*tied) +
                             ", expected true or false");
  values.tied_embeddings = tied == json.end() || tied->is_null() || tied->get<bool>();
  return validated_transformer_config(values, kHuggingFaceGptFields, path);
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
