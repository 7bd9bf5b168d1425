// llama_layout.h: where every parameter of a Llama-family pipeline stage
// (Llama 2/3, Mistral, Qwen 2 with its q, k and v biases) lives in the stage's one
// contiguous parameter buffer (a ParameterLayout), and the offsets the Llama
// stage's forward and backward use.
//
// Tensors carry Hugging Face LlamaForCausalLM's names and shapes
// ("model.layers.3.self_attn.q_proj.weight", nn.Linear [out, in]), so
// checkpoints need no renaming, transposing or permuting: the stage applies
// the rotary embedding in Hugging Face's rotate-half convention, the one its
// q_proj and k_proj weights are stored for. Buffer order is the embedding,
// the blocks (input_layernorm, q, k, v, with qkv_bias their biases, o,
// post_attention_layernorm, gate, up, down), the final norm, the head, so
// backward finishes the gradients from the end of the buffer towards its
// start (gradient_buckets.h). q, k and v sit next to each other, as do their
// biases and gate and up, so each group is one GEMM weight ([(H + 2 Hkv) D,
// C] and [2F, C]) and one bias ([(H + 2 Hkv) D]).
//
// Tensor parallelism (Megatron): q, k, v split by heads (each rank H / t query
// heads and Hkv / t KV heads, so Hkv must be divisible by t), gate and up by
// rows (column-parallel), o and down by columns (row-parallel); the embedding
// and the untied head by vocabulary rows; the q, k and v biases as their
// weights' rows; the norms replicated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/model/decoder_layout.h"

namespace paraplan {

// Offsets of one Llama block's tensors in the parameter buffer.
struct LlamaBlockOffsets {
  size_t attention_norm;  // input_layernorm [C]
  size_t qkv;             // q_proj [H D, C], then k_proj, v_proj [Hkv D, C]
  size_t qkv_bias;        // q_proj.bias [H D], k_proj, v_proj [Hkv D]; or kNone
  size_t attention_out;   // o_proj [C, H D]
  size_t mlp_norm;        // post_attention_layernorm [C]
  size_t gate_up;         // gate_proj [F, C], then up_proj [F, C]
  size_t down;            // down_proj [C, F]
};

class LlamaLayout final : public DecoderLayout {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);  // a tensor the model lacks

  // Throws std::invalid_argument when the config cannot be built (heads not
  // divisible by KV heads, odd head_dim, a split that does not divide).
  LlamaLayout(const TransformerConfig& config, const StageSpec& stage, int tensor_rank = 0,
              int tensor_size = 1);

  // Local widths under tensor parallelism.
  int local_heads() const { return config().num_heads / tensor_size(); }
  int local_kv_heads() const { return config().kv_heads() / tensor_size(); }
  int local_qkv_width() const { return (local_heads() + 2 * local_kv_heads()) * head_dim(); }
  int local_attention_width() const { return local_heads() * head_dim(); }
  int local_ffn() const { return config().ffn_size / tensor_size(); }
  int head_dim() const { return config().head_dim(); }

  // Offsets for the stage's i-th block (the token embedding, final norm and
  // head: DecoderLayout).
  const LlamaBlockOffsets& block(int local_layer) const { return blocks_[local_layer]; }

 private:
  std::vector<LlamaBlockOffsets> blocks_;
};

namespace llama {

// Why config cannot be a Llama model split tensor_size ways, or "" when it can.
std::string invalid_config_reason(const TransformerConfig& config, int tensor_size = 1);

// Total parameters of the whole model (a tied head counted once).
int64_t parameter_count(const TransformerConfig& config);

// Training FLOPs per token (forward and backward, no recomputation): 6 per
// matmul weight (q, k, v, o, gate, up, down, the head), plus attention's
// 12 * layers * d_model * seq_len (QK^T and PV over the full causal square,
// as MFU counts it).
double training_flops_per_token(const TransformerConfig& config);

}  // namespace llama
}  // namespace paraplan
