// llama_layout.cc: the Llama parameter table of a stage, its validity rules
// and its parameter and FLOP counts.
#include "runtime/model/llama/llama_layout.h"

#include <stdexcept>
#include <string>

namespace paraplan {

namespace llama {

std::string invalid_config_reason(const TransformerConfig& config, int tensor_size) {
  const auto text = [](int64_t value) { return std::to_string(value); };
  if (config.num_heads <= 0 || config.d_model % config.num_heads != 0)
    return "d_model " + text(config.d_model) + " is not divisible by num_heads " +
           text(config.num_heads);
  if (config.kv_heads() <= 0 || config.num_heads % config.kv_heads() != 0)
    return "num_heads " + text(config.num_heads) + " is not divisible by num_kv_heads " +
           text(config.kv_heads()) + " (grouped-query attention shares each KV head among " +
           "an equal number of query heads)";
  if (config.head_dim() % 2 != 0)
    return "head_dim (d_model / num_heads) " + text(config.head_dim()) +
           " is odd; the rotary embedding rotates pairs of dimensions";
  if (config.kv_heads() % tensor_size != 0)
    return "num_kv_heads " + text(config.kv_heads()) + " is not divisible by the tensor-parallel " +
           "degree " + text(tensor_size) + " (each rank holds whole KV heads)";
  if (config.ffn_size % tensor_size != 0 || config.vocab_size % tensor_size != 0)
    return "ffn_size " + text(config.ffn_size) + " and vocab_size " + text(config.vocab_size) +
           " must be divisible by the tensor-parallel degree " + text(tensor_size);
  return "";
}

int64_t parameter_count(const TransformerConfig& config) {
  const int64_t C = config.d_model, F = config.ffn_size, V = config.vocab_size,
                KV = int64_t{config.kv_heads()} * config.head_dim();
  const int64_t qkv_biases = config.qkv_bias ? C + 2 * KV : 0;
  const int64_t per_block = 2 * C + C * C + 2 * KV * C + qkv_biases + C * C + 3 * C * F;
  return V * C + config.num_layers * per_block + C + (config.tied_embeddings ? 0 : V * C);
}

double training_flops_per_token(const TransformerConfig& config) {
  const double C = config.d_model, F = config.ffn_size, V = config.vocab_size,
               KV = static_cast<double>(config.kv_heads()) * config.head_dim();
  const double matmul_weights_per_layer = 2 * C * C + 2 * KV * C + 3 * C * F;
  const double matmul_weights = config.num_layers * matmul_weights_per_layer + V * C;
  return 6.0 * matmul_weights + 12.0 * config.num_layers * C * config.seq_len;
}

}  // namespace llama

LlamaLayout::LlamaLayout(const TransformerConfig& config, const StageSpec& stage, int tensor_rank,
                         int tensor_size)
    : DecoderLayout(config, stage, tensor_rank, tensor_size) {
  const std::string problem = llama::invalid_config_reason(config, tensor_size);
  if (!problem.empty()) throw std::invalid_argument("llama model: " + problem);
  const int64_t C = config.d_model, F = config.ffn_size,
                Q = int64_t{config.num_heads} * config.head_dim(),
                KV = int64_t{config.kv_heads()} * config.head_dim();
  const float std = config.init_std;
  using S = ShardKind;
  // Linear weights and the embeddings: normal(0, init_std), decayed, as
  // LlamaPreTrainedModel initialises them (add_matrix); norm weights: ones,
  // biases: zeros, neither decayed.
  const auto norm = [&](std::string name) {
    return add({.name = std::move(name), .global_shape = {C}, .init = InitKind::kOnes});
  };
  const auto bias = [&](std::string name, int64_t length) {
    return add({.name = std::move(name),
                .global_shape = {length},
                .shard = S::kRows,
                .init = InitKind::kZeros});
  };
  if (stage.has_embedding) add_token_embedding("model.embed_tokens.weight");
  for (int i = 0; i < stage.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(stage.first_layer + i) + ".";
    LlamaBlockOffsets b;
    b.attention_norm = norm(p + "input_layernorm.weight");
    b.qkv = add_matrix(p + "self_attn.q_proj.weight", {Q, C}, S::kRows, std);
    add_matrix(p + "self_attn.k_proj.weight", {KV, C}, S::kRows, std);
    add_matrix(p + "self_attn.v_proj.weight", {KV, C}, S::kRows, std);
    b.qkv_bias = LlamaLayout::kNone;
    if (config.qkv_bias) {
      b.qkv_bias = bias(p + "self_attn.q_proj.bias", Q);
      bias(p + "self_attn.k_proj.bias", KV);
      bias(p + "self_attn.v_proj.bias", KV);
    }
    b.attention_out = add_matrix(p + "self_attn.o_proj.weight", {C, Q}, S::kColumns, std);
    b.mlp_norm = norm(p + "post_attention_layernorm.weight");
    b.gate_up = add_matrix(p + "mlp.gate_proj.weight", {F, C}, S::kRows, std);
    add_matrix(p + "mlp.up_proj.weight", {F, C}, S::kRows, std);
    b.down = add_matrix(p + "mlp.down_proj.weight", {C, F}, S::kColumns, std);
    blocks_.push_back(b);
    block_starts_.push_back(b.attention_norm);
  }
  if (stage.has_head) {
    final_norm_weight_ = norm("model.norm.weight");
    add_head("model.embed_tokens.weight");
  }
}

}  // namespace paraplan
