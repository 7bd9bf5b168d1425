// model_config.h: what a model is, for every architecture the runtime builds,
// and the part of it one pipeline stage holds.
#pragma once

#include <cstdint>
#include <string>

#include "plan_generated.h"
#include "schema/model_limits.h"

namespace paraplan {

// Per layer, what a stage keeps for backward (the plan's choice):
// None, Selective (the attention core is recomputed) or Full (the block is).
using RecomputeMode = schema::RecomputeMode;

enum class Architecture {
  kGpt2,   // learned positions, pre-LayerNorm blocks, GELU MLP, biases (gpt/)
  kLlama,  // rotary positions, pre-RMSNorm blocks, SwiGLU MLP, grouped-query attention,
           // no biases (llama/)
};

// "gpt2", "llama"
const char* architecture_name(Architecture architecture);

// Llama 3.1's frequency-dependent scaling of the rotary frequencies
// (Hugging Face's rope_type "llama3"); factor 0 means none.
struct RopeScaling {
  float factor = 0.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_positions = 8192;
  bool operator==(const RopeScaling&) const = default;
};

struct TransformerConfig {
  Architecture architecture = Architecture::kGpt2;
  int vocab_size = 256;
  int seq_len = 128;
  int num_layers = 4;
  int d_model = 128;
  int num_heads = 4;
  int ffn_size = 512;
  bool tied_embeddings = true;
  float norm_epsilon = 1e-5f;  // LayerNorm's epsilon (llama: RMSNorm's)
  float init_std = 0.02f;
  // Llama: KV heads of grouped-query attention (0: num_heads), the rotary
  // base and scaling. GPT-2 ignores them.
  int num_kv_heads = 0;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  // Llama: biases on q, k and v (Qwen 2's attention); GPT-2 always has biases.
  bool qkv_bias = false;
  // A Hugging Face model's sliding window of attention (Mistral's and Qwen
  // 2's sliding_window), 0 for none; never in a plan. paraplan attends over
  // the whole sequence, which is the window's result while seq_len <= it
  // (config_differences refuses a plan beyond it).
  int attention_window = 0;
  // Llama family: the positions the model serves, when more than seq_len (a
  // Hugging Face model of 32k positions fine-tuned at 4k); config.json says
  // max_position_embeddings = max(seq_len, max_positions). Never in a plan.
  int max_positions = 0;

  int head_dim() const { return d_model / num_heads; }
  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
};

// How a file names each field of a TransformerConfig, for messages.
struct TransformerConfigFields {
  ModelFieldNames sizes;
  const char* norm_epsilon;
  const char* init_std;
  const char* num_kv_heads = "num_kv_heads";
  const char* rope_theta = "rope_theta";
  const char* qkv_bias = "qkv_bias";
};
inline constexpr TransformerConfigFields kPlanConfigFields{
    kPlanModelFields,     "model.layernorm_epsilon", "model.init_std",
    "model.num_kv_heads", "model.rope_theta",        "model.qkv_bias"};

// A model's configuration as a file gives it, before validation: sizes as wide
// integers and floats as doubles, so nothing is narrowed before it is judged.
struct TransformerConfigValues {
  Architecture architecture = Architecture::kGpt2;
  ModelShape shape;
  bool tied_embeddings = true;
  double norm_epsilon = 1e-5;
  double init_std = 0.02;
  // Llama only (GPT-2 leaves them as they are): 0 KV heads means num_heads.
  int64_t num_kv_heads = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool qkv_bias = false;  // Llama only: true with GPT-2 is a problem
};

// The one validation of a model's configuration, for every reader (the plan,
// a checkpoint's config.json): every size positive and within the limits of
// schema/model_limits.h, num_heads dividing d_model, a positive finite norm
// epsilon and a finite init_std >= 0; for Llama also KV heads dividing the
// heads, an even head_dim (the rotary pairs) and a positive finite rope_theta;
// qkv_bias only for Llama (GPT-2's biases are its own). Returns the config,
// or throws std::runtime_error listing every problem, one line each:
// "<source>: <field>: <problem>; <what would be valid>".
TransformerConfig validated_transformer_config(const TransformerConfigValues& values,
                                               const TransformerConfigFields& fields,
                                               const std::string& source);

// The part of the model one pipeline stage holds.
struct StageSpec {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = true;
  bool has_head = true;
};

}  // namespace paraplan
