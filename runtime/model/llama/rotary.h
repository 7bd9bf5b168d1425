// rotary.h: the rotary position embedding's angle tables of a Llama model,
// computed as Hugging Face's LlamaRotaryEmbedding computes them (fp32):
// inverse frequencies inv_freq[i] = 1 / theta^(2i / D) for i < D/2, rescaled
// by Llama 3.1's "llama3" rope scaling when the config has one; angles
// t * inv_freq[i] for the positions t < seq_len; their cosines and sines.
// The stage uploads the tables once; kernels/ops.h's rope ops read them.
#pragma once

#include <vector>

#include "runtime/model/model_config.h"

namespace paraplan::llama {

// inv_freq [head_dim / 2].
std::vector<float> rotary_inverse_frequencies(const TransformerConfig& config);

struct RotaryTables {
  std::vector<float> cos, sin;  // [seq_len, head_dim / 2]
};
RotaryTables rotary_tables(const TransformerConfig& config);

}  // namespace paraplan::llama
