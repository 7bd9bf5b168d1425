// gpt_layout.h: where every GPT-2 parameter of a pipeline stage lives in the
// stage's one contiguous parameter buffer (a ParameterLayout), and the offsets
// the GPT stage's forward and backward use.
//
// Tensors are named and shaped as Hugging Face GPT-2 names them
// ("transformer.h.3.attn.c_attn.weight"), but linear weights are stored in the
// nn.Linear layout [out_features, in_features]; Hugging Face's Conv1D stores
// them transposed ([in, out]), which the checkpoint code handles
// (hf_transposed). A stage holds only its own layers, the embeddings if it is
// the first stage, and the final LayerNorm plus the (tied) head if it is the
// last stage. Buffer order is embeddings, blocks, final norm, head, so
// backward finishes the gradients from the end of the buffer towards its start
// (parallel/gradient_buckets.h relies on it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/model/decoder_layout.h"

namespace paraplan {

// Offsets of one transformer block's tensors in the parameter buffer.
struct BlockOffsets {
  size_t ln1_weight, ln1_bias;
  size_t qkv_weight, qkv_bias;              // [3C, C], [3C]
  size_t attn_proj_weight, attn_proj_bias;  // [C, C], [C]
  size_t ln2_weight, ln2_bias;
  size_t mlp_up_weight, mlp_up_bias;      // [F, C], [F]
  size_t mlp_down_weight, mlp_down_bias;  // [C, F], [C]
};

class GptLayout final : public DecoderLayout {
 public:
  GptLayout(const TransformerConfig& config, const StageSpec& stage, int tensor_rank = 0,
            int tensor_size = 1);

  // Local widths under tensor parallelism.
  int local_heads() const { return config().num_heads / tensor_size(); }
  int local_attention_width() const { return local_heads() * config().head_dim(); }
  int local_ffn() const { return config().ffn_size / tensor_size(); }

  // Offsets for the stage's i-th block (0-based within the stage).
  const BlockOffsets& block(int local_layer) const { return blocks_[local_layer]; }
  // Only valid on stages that hold them (the token embedding, final norm
  // weight and head: DecoderLayout).
  size_t position_embedding() const { return position_embedding_; }  // [T, C]
  size_t final_norm_bias() const { return final_norm_bias_; }

 private:
  std::vector<BlockOffsets> blocks_;
  size_t position_embedding_ = 0, final_norm_bias_ = 0;
};

namespace gpt {

// Total parameters of the whole model (tied head counted once).
int64_t parameter_count(const TransformerConfig& config);

// Training FLOPs per token (forward and backward, no recomputation): 6 per
// matmul weight, plus attention's 12 * layers * d_model * seq_len.
double training_flops_per_token(const TransformerConfig& config);

}  // namespace gpt
}  // namespace paraplan
