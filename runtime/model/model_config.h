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
  kGpt2,  // learned positions, pre-LayerNorm blocks, GELU MLP, biases (gpt/)
};

// "gpt2"
const char* architecture_name(Architecture architecture);

struct TransformerConfig {
  Architecture architecture = Architecture::kGpt2;
  int vocab_size = 256;
  int seq_len = 128;
  int num_layers = 4;
  int d_model = 128;
  int num_heads = 4;
  int ffn_size = 512;
  bool tied_embeddings = true;
  float norm_epsilon = 1e-5f;  // LayerNorm's epsilon
  float init_std = 0.02f;

  int head_dim() const { return d_model / num_heads; }
};

// How a file names each field of a TransformerConfig, for messages.
struct TransformerConfigFields {
  ModelFieldNames sizes;
  const char* norm_epsilon;
  const char* init_std;
};
inline constexpr TransformerConfigFields kPlanConfigFields{
    kPlanModelFields, "model.layernorm_epsilon", "model.init_std"};

// A model's configuration as a file gives it, before validation: sizes as wide
// integers and floats as doubles, so nothing is narrowed before it is judged.
struct TransformerConfigValues {
  Architecture architecture = Architecture::kGpt2;
  ModelShape shape;
  bool tied_embeddings = true;
  double norm_epsilon = 1e-5;
  double init_std = 0.02;
};

// The one validation of a model's configuration, for every reader (the plan,
// a checkpoint's config.json): every size positive and within the limits of
// schema/model_limits.h, num_heads dividing d_model, a positive finite norm
// epsilon and a finite init_std >= 0. Returns the config, or throws
// std::runtime_error listing every problem, one line each:
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
