// llama_hf_config.cc: LlamaConfig <-> TransformerConfig.
#include "runtime/model/llama/llama_hf_config.h"

#include <algorithm>
#include <stdexcept>

#include "common/json_fields.h"
#include "runtime/model/config_differences.h"

namespace paraplan::llama {

nlohmann::ordered_json hugging_face_config(const TransformerConfig& config) {
  // q/k/v biases are Qwen 2's attention (transformers' Llama has them only
  // with o_proj's too: attention_bias); a sliding window without them,
  // Mistral's (a config read from such a file writes back as it was).
  const bool qwen2 = config.qkv_bias, mistral = !qwen2 && config.attention_window > 0;
  nlohmann::ordered_json json;
  json["architectures"] = {qwen2     ? "Qwen2ForCausalLM"
                           : mistral ? "MistralForCausalLM"
                                     : "LlamaForCausalLM"};
  json["model_type"] = qwen2 ? "qwen2" : mistral ? "mistral" : "llama";
  json["vocab_size"] = config.vocab_size;
  json["hidden_size"] = config.d_model;
  json["intermediate_size"] = config.ffn_size;
  json["num_hidden_layers"] = config.num_layers;
  json["num_attention_heads"] = config.num_heads;
  json["num_key_value_heads"] = config.kv_heads();
  json["head_dim"] = config.head_dim();
  json["hidden_act"] = "silu";
  // Positions are not parameters: the trained sequence length, or the
  // context of the model it started from (max_positions).
  json["max_position_embeddings"] = std::max(config.seq_len, config.max_positions);
  json["rms_norm_eps"] = short_decimal(config.norm_epsilon);
  json["rope_theta"] = short_decimal(config.rope_theta);
  if (config.rope_scaling.factor > 0) {
    json["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", short_decimal(config.rope_scaling.factor)},
        {"low_freq_factor", short_decimal(config.rope_scaling.low_freq_factor)},
        {"high_freq_factor", short_decimal(config.rope_scaling.high_freq_factor)},
        {"original_max_position_embeddings", config.rope_scaling.original_max_positions}};
  } else {
    json["rope_scaling"] = nullptr;
  }
  if (qwen2) {
    json["use_sliding_window"] = config.attention_window > 0;
    if (config.attention_window > 0) {
      json["sliding_window"] = config.attention_window;
      json["max_window_layers"] = 0;  // every layer's
    }
  } else if (mistral) {
    json["sliding_window"] = config.attention_window;
  } else {
    json["attention_bias"] = false;
    json["mlp_bias"] = false;
  }
  json["attention_dropout"] = 0.0;  // paraplan trains without dropout
  json["initializer_range"] = short_decimal(config.init_std);
  json["tie_word_embeddings"] = config.tied_embeddings;
  json["torch_dtype"] = "float32";
  return json;
}

namespace {

// config.json's names for each field, for messages.
constexpr TransformerConfigFields kHuggingFaceLlamaFields{
    {"vocab_size", "max_position_embeddings", "num_hidden_layers", "hidden_size",
     "num_attention_heads", "intermediate_size"},
    "rms_norm_eps",
    "initializer_range",
    "num_key_value_heads",
    "rope_theta"};

bool json_bool(const nlohmann::json& json, const std::string& key, const std::string& path,
               bool fallback) {
  const auto found = json.find(key);
  if (found == json.end() || found->is_null()) return fallback;
  if (!found->is_boolean())
    throw std::runtime_error(path + ": field '" + key + "' is " + json_value_text(*found) +
                             ", expected true or false");
  return found->get<bool>();
}

RopeScaling rope_scaling_from(const nlohmann::json& json, const std::string& path) {
  const auto found = json.find("rope_scaling");
  if (found == json.end() || found->is_null()) return {};
  if (!found->is_object())
    throw std::runtime_error(path + ": field 'rope_scaling' is " + json_value_text(*found) +
                             ", expected null or an object");
  // transformers reads "rope_type", or "type" in older files.
  const std::string type = json_string_or(*found, "rope_type", json_string_or(*found, "type", ""));
  if (type != "llama3")
    throw std::runtime_error(path + ": rope_scaling.rope_type is '" + printable_text(type) +
                             "' but paraplan's Llama computes only 'llama3' scaling (or null)");
  RopeScaling scaling;
  const std::string where = path + " (rope_scaling)";
  scaling.factor = static_cast<float>(json_number(*found, "factor", where, 0.0));
  scaling.low_freq_factor = static_cast<float>(json_number(*found, "low_freq_factor", where, 1.0));
  scaling.high_freq_factor =
      static_cast<float>(json_number(*found, "high_freq_factor", where, 4.0));
  scaling.original_max_positions =
      static_cast<int>(json_integer(*found, "original_max_position_embeddings", where, 8192, 1));
  if (!(scaling.factor > 0) || !(scaling.high_freq_factor > scaling.low_freq_factor))
    throw std::runtime_error(path + ": rope_scaling needs factor > 0 and high_freq_factor > " +
                             "low_freq_factor");
  return scaling;
}

// The sliding window of attention a Mistral or Qwen 2 config.json asks for,
// or 0 for none, as transformers reads it: sliding_window null (or 0) is
// none, absent is MistralConfig's and Qwen2Config's default 4096; Qwen 2's
// applies only with use_sliding_window and to the layers from
// max_window_layers (default 28) on.
int attention_window(const nlohmann::json& json, const std::string& path,
                     const std::string& model_type, int num_layers) {
  if (model_type == "llama") return 0;
  if (model_type == "qwen2") {
    if (!json_bool(json, "use_sliding_window", path, false)) return 0;
    if (json_integer(json, "max_window_layers", path, 28, 0, kMaxModelDimension) >= num_layers)
      return 0;
  }
  const auto window = json.find("sliding_window");
  if (window != json.end() && window->is_null()) return 0;
  return static_cast<int>(json_integer(json, "sliding_window", path, 4096, 0, kMaxModelDimension));
}

}  // namespace

bool is_model_type(const std::string& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "qwen2";
}

TransformerConfig config_from_hugging_face(const nlohmann::json& json, const std::string& path) {
  const std::string model_type = json_string_or(json, "model_type", "llama");
  if (!is_model_type(model_type))
    throw std::logic_error("llama::config_from_hugging_face: model_type " + model_type);
  const std::string activation = json_string_or(json, "hidden_act", "silu");
  if (activation != "silu")
    throw std::runtime_error(path + ": hidden_act is '" + printable_text(activation) +
                             "' but paraplan's Llama uses SwiGLU (silu)");
  // Llama's attention_bias puts biases on q, k, v and o; paraplan has Qwen 2's,
  // on q, k and v only.
  if (json_bool(json, "attention_bias", path, false))
    throw std::runtime_error(path + ": attention_bias is true (biases on q_proj, k_proj, v_proj " +
                             "and o_proj) but paraplan's Llama has biases only on q, k and v, " +
                             "as Qwen 2 (model_type qwen2)");
  if (json_bool(json, "mlp_bias", path, false))
    throw std::runtime_error(path + ": mlp_bias is true but paraplan's Llama MLP has no biases");
  TransformerConfigValues values;
  values.architecture = Architecture::kLlama;
  ModelShape& shape = values.shape;
  shape.vocab_size = json_integer(json, "vocab_size", path);
  shape.d_model = json_integer(json, "hidden_size", path);
  shape.ffn_size = json_integer(json, "intermediate_size", path);
  shape.num_layers = json_integer(json, "num_hidden_layers", path);
  shape.num_heads = json_integer(json, "num_attention_heads", path);
  shape.seq_len = json_integer(json, "max_position_embeddings", path, 2048);
  values.num_kv_heads = json_integer(json, "num_key_value_heads", path, shape.num_heads);
  values.norm_epsilon = json_number(json, "rms_norm_eps", path, 1e-6);
  values.rope_theta = json_number(json, "rope_theta", path, 10000.0);
  values.rope_scaling = rope_scaling_from(json, path);
  values.init_std = json_number(json, "initializer_range", path, 0.02);
  // LlamaConfig's, MistralConfig's and Qwen2Config's default: untied.
  values.tied_embeddings = json_bool(json, "tie_word_embeddings", path, false);
  values.qkv_bias = model_type == "qwen2";  // Qwen2Attention always has them
  TransformerConfig config = validated_transformer_config(values, kHuggingFaceLlamaFields, path);
  config.attention_window = attention_window(json, path, model_type, config.num_layers);
  const int64_t head_dim = json_integer(json, "head_dim", path, config.head_dim());
  if (head_dim != config.head_dim())
    throw std::runtime_error(path + ": head_dim is " + std::to_string(head_dim) +
                             " but paraplan's Llama uses hidden_size / num_attention_heads = " +
                             std::to_string(config.head_dim()));
  return config;
}

std::vector<std::string> config_differences(const TransformerConfig& saved,
                                            const TransformerConfig& plan) {
  ConfigDifferences differences;
  differences.integer("vocab_size", saved.vocab_size, plan.vocab_size, "vocab_size");
  differences.integer("hidden_size", saved.d_model, plan.d_model, "d_model");
  differences.integer("num_hidden_layers", saved.num_layers, plan.num_layers, "layers");
  differences.integer("num_attention_heads", saved.num_heads, plan.num_heads, "heads");
  differences.integer("num_key_value_heads", saved.kv_heads(), plan.kv_heads(), "num_kv_heads");
  differences.integer("intermediate_size", saved.ffn_size, plan.ffn_size, "ffn_size");
  // Positions are not parameters: a model trained on a longer context runs a shorter one.
  if (saved.seq_len < plan.seq_len)
    differences.lines.push_back("max_position_embeddings is " + std::to_string(saved.seq_len) +
                                " but the plan's model has seq_len " +
                                std::to_string(plan.seq_len));
  differences.tied_embeddings(saved.tied_embeddings, plan.tied_embeddings);
  if (saved.qkv_bias != plan.qkv_bias)
    differences.lines.push_back(std::string("the checkpoint's model ") +
                                (saved.qkv_bias ? "has" : "has no") +
                                " q/k/v biases (Qwen 2's) but the plan's model " +
                                (plan.qkv_bias ? "has them" : "has none") + " ([model] qkv_bias)");
  // paraplan attends over the whole sequence; a sliding window changes
  // nothing while the sequence fits in it (two configs of one window are
  // one model).
  if (saved.attention_window > 0 && plan.attention_window != saved.attention_window &&
      plan.seq_len > saved.attention_window)
    differences.lines.push_back(
        "sliding_window is " + std::to_string(saved.attention_window) +
        " but the plan's model has seq_len " + std::to_string(plan.seq_len) +
        ": the model attends only to the last " + std::to_string(saved.attention_window) +
        " tokens, paraplan's attention to the whole sequence; plan seq_len <= " +
        std::to_string(saved.attention_window));
  differences.real("rms_norm_eps", saved.norm_epsilon, plan.norm_epsilon);
  differences.real("rope_theta", saved.rope_theta, plan.rope_theta);
  if (!(saved.rope_scaling == plan.rope_scaling))
    differences.lines.push_back("rope_scaling differs from the plan's model's (factor " +
                                std::to_string(saved.rope_scaling.factor) + " vs " +
                                std::to_string(plan.rope_scaling.factor) + ")");
  return differences.lines;
}

}  // namespace paraplan::llama
