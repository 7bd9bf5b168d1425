// model_config.h: what a model is, for every architecture the runtime builds,
// and the part of it one pipeline stage holds.
#pragma once

#include <cstdint>

#include "plan_generated.h"

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

// The part of the model one pipeline stage holds.
struct StageSpec {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = true;
  bool has_head = true;
};

}  // namespace paraplan
