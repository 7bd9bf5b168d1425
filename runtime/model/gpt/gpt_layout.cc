// gpt_layout.cc: the GPT-2 parameter table of a stage.
#include "runtime/model/gpt/gpt_layout.h"

#include <cmath>
#include <string>

namespace paraplan {

namespace gpt {

int64_t parameter_count(const TransformerConfig& config) {
  const int64_t C = config.d_model, F = config.ffn_size, V = config.vocab_size, T = config.seq_len;
  const int64_t per_block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C;
  return V * C + T * C + config.num_layers * per_block + 2 * C +
         (config.tied_embeddings ? 0 : V * C);
}

double training_flops_per_token(const TransformerConfig& config) {
  const double C = config.d_model, F = config.ffn_size, V = config.vocab_size;
  const double matmul_weights_per_layer = 3 * C * C + C * C + 2 * C * F;
  const double matmul_weights = config.num_layers * matmul_weights_per_layer + V * C;
  return 6.0 * matmul_weights + 12.0 * config.num_layers * C * config.seq_len;
}

}  // namespace gpt

GptLayout::GptLayout(const TransformerConfig& config, const StageSpec& stage, int tensor_rank,
                     int tensor_size)
    : DecoderLayout(config, stage, tensor_rank, tensor_size) {
  const int64_t C = config.d_model, F = config.ffn_size, T = config.seq_len;
  const float std = config.init_std;
  // GPT-2 scales the residual projections by 1/sqrt(2 * layers).
  const float projection_std = std / std::sqrt(2.0f * static_cast<float>(config.num_layers));
  using S = ShardKind;
  // Matrices and embeddings: normal, decayed (add_matrix); Hugging Face's
  // Conv1D stores the block's four linear weights transposed. Norm scales:
  // ones; biases and norm shifts: zeros; neither decayed.
  const auto vector = [&](std::string name, int64_t length, ShardKind shard, InitKind init,
                          int blocks = 1) {
    return add({.name = std::move(name),
                .global_shape = {length},
                .shard = shard,
                .shard_blocks = blocks,
                .init = init});
  };
  if (stage.has_embedding) {
    add_token_embedding("transformer.wte.weight");
    position_embedding_ = add_matrix("transformer.wpe.weight", {T, C}, S::kReplicated, std);
  }
  for (int i = 0; i < stage.num_layers; ++i) {
    const std::string p = "transformer.h." + std::to_string(stage.first_layer + i) + ".";
    BlockOffsets b;
    b.ln1_weight = vector(p + "ln_1.weight", C, S::kReplicated, InitKind::kOnes);
    b.ln1_bias = vector(p + "ln_1.bias", C, S::kReplicated, InitKind::kZeros);
    b.qkv_weight = add_matrix(p + "attn.c_attn.weight", {3 * C, C}, S::kRows, std, 3, true);
    b.qkv_bias = vector(p + "attn.c_attn.bias", 3 * C, S::kRows, InitKind::kZeros, 3);
    b.attn_proj_weight =
        add_matrix(p + "attn.c_proj.weight", {C, C}, S::kColumns, projection_std, 1, true);
    b.attn_proj_bias = vector(p + "attn.c_proj.bias", C, S::kReplicated, InitKind::kZeros);
    b.ln2_weight = vector(p + "ln_2.weight", C, S::kReplicated, InitKind::kOnes);
    b.ln2_bias = vector(p + "ln_2.bias", C, S::kReplicated, InitKind::kZeros);
    b.mlp_up_weight = add_matrix(p + "mlp.c_fc.weight", {F, C}, S::kRows, std, 1, true);
    b.mlp_up_bias = vector(p + "mlp.c_fc.bias", F, S::kRows, InitKind::kZeros);
    b.mlp_down_weight =
        add_matrix(p + "mlp.c_proj.weight", {C, F}, S::kColumns, projection_std, 1, true);
    b.mlp_down_bias = vector(p + "mlp.c_proj.bias", C, S::kReplicated, InitKind::kZeros);
    blocks_.push_back(b);
    block_starts_.push_back(b.ln1_weight);
  }
  if (stage.has_head) {
    final_norm_weight_ = vector("transformer.ln_f.weight", C, S::kReplicated, InitKind::kOnes);
    final_norm_bias_ = vector("transformer.ln_f.bias", C, S::kReplicated, InitKind::kZeros);
    add_head("transformer.wte.weight");
  }
}

}  // namespace paraplan
