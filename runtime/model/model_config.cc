// model_config.cc: validated_transformer_config, the one check of a model's
// configuration shared by the plan reader and the checkpoint reader.
#include "runtime/model/model_config.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

namespace paraplan {
namespace {

std::string float_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

}  // namespace

TransformerConfig validated_transformer_config(const TransformerConfigValues& values,
                                               const TransformerConfigFields& fields,
                                               const std::string& source) {
  std::vector<FieldProblem> problems = model_shape_problems(values.shape, fields.sizes);
  const float epsilon = static_cast<float>(values.norm_epsilon);
  const float init_std = static_cast<float>(values.init_std);
  if (!(epsilon > 0) || !std::isfinite(epsilon))
    problems.push_back({fields.norm_epsilon,
                        float_text(values.norm_epsilon) + "; must be a positive finite float"});
  if (!(init_std >= 0) || !std::isfinite(init_std))
    problems.push_back(
        {fields.init_std, float_text(values.init_std) + "; must be a finite float >= 0"});
  if (values.architecture == Architecture::kLlama) {
    const ModelShape& shape = values.shape;
    const int64_t kv_heads = values.num_kv_heads == 0 ? shape.num_heads : values.num_kv_heads;
    if (kv_heads < 0 || kv_heads > shape.num_heads ||
        (kv_heads > 0 && shape.num_heads > 0 && shape.num_heads % kv_heads != 0))
      problems.push_back({fields.num_kv_heads, std::to_string(values.num_kv_heads) +
                                                   "; must divide the number of query heads " +
                                                   std::to_string(shape.num_heads) +
                                                   " (0: as many as query heads)"});
    if (problems.empty() && (shape.d_model / shape.num_heads) % 2 != 0)
      problems.push_back({fields.sizes.d_model,
                          std::to_string(shape.d_model) + " / " + std::to_string(shape.num_heads) +
                              " heads is an odd head_dim; the rotary embedding needs an even one"});
    if (!(values.rope_theta > 0) || !std::isfinite(values.rope_theta))
      problems.push_back({fields.rope_theta,
                          float_text(values.rope_theta) + "; must be a positive finite number"});
  }
  if (values.architecture != Architecture::kLlama && values.qkv_bias)
    problems.push_back({fields.qkv_bias,
                        "true; q/k/v biases are a llama option (gpt2's attention always has "
                        "biases): remove it or use architecture llama"});
  if (!problems.empty()) {
    std::string message;
    for (const FieldProblem& problem : problems)
      message.append(message.empty() ? "" : "\n")
          .append(source + ": " + problem.field + ": " + problem.problem);
    throw std::runtime_error(message);
  }
  // Every size is now within [1, 2^24]: the narrowing to int is exact.
  TransformerConfig config;
  config.architecture = values.architecture;
  config.vocab_size = static_cast<int>(values.shape.vocab_size);
  config.seq_len = static_cast<int>(values.shape.seq_len);
  config.num_layers = static_cast<int>(values.shape.num_layers);
  config.d_model = static_cast<int>(values.shape.d_model);
  config.num_heads = static_cast<int>(values.shape.num_heads);
  config.ffn_size = static_cast<int>(values.shape.ffn_size);
  config.tied_embeddings = values.tied_embeddings;
  config.norm_epsilon = epsilon;
  config.init_std = init_std;
  config.num_kv_heads = static_cast<int>(values.num_kv_heads);  // within [0, num_heads]
  config.rope_theta = static_cast<float>(values.rope_theta);
  config.rope_scaling = values.rope_scaling;
  config.qkv_bias = values.qkv_bias;
  return config;
}

}  // namespace paraplan
