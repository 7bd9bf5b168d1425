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
    : ParameterLayout(config, stage, tensor_rank, tensor_size) {
  const int64_t C = config.d_model, F = config.ffn_size, V = config.vocab_size, T = config.seq_len;
  const float std = config.init_std;
  // GPT-2 scales the residual projections by 1/sqrt(2 * layers).
  const float projection_std = std / std::sqrt(2.0f * static_cast<float>(config.num_layers));
  using S = ShardKind;
  // Matrices and embeddings: normal, decayed. Norm scales: ones; biases and
  // norm shifts: zeros; neither decayed.
  const auto matrix = [&](std::string name, std::vector<int64_t> shape, ShardKind shard, int blocks,
                          bool hf_transposed, float init_std) {
    return add({.name = std::move(name),
                .global_shape = std::move(shape),
                .shard = shard,
                .shard_blocks = blocks,
                .hf_transposed = hf_transposed,
                .weight_decay = true,
                .init = InitKind::kNormal,
                .init_std = init_std});
  };
  const auto vector = [&](std::string name, int64_t length, ShardKind shard, InitKind init,
                          int blocks = 1) {
    return add({.name = std::move(name),
                .global_shape = {length},
                .shard = shard,
                .shard_blocks = blocks,
                .init = init});
  };
  const bool tied_across_stages =
      config.tied_embeddings && !(stage.has_embedding && stage.has_head);
  if (stage.has_embedding) {
    token_embedding_ = add({.name = "transformer.wte.weight",
                            .global_shape = {V, C},
                            .shard = S::kRows,
                            .weight_decay = true,
                            .init = InitKind::kNormal,
                            .init_std = std,
                            .tied = tied_across_stages});
    position_embedding_ = matrix("transformer.wpe.weight", {T, C}, S::kReplicated, 1, false, std);
  }
  for (int i = 0; i < stage.num_layers; ++i) {
    const std::string p = "transformer.h." + std::to_string(stage.first_layer + i) + ".";
    BlockOffsets b;
    b.ln1_weight = vector(p + "ln_1.weight", C, S::kReplicated, InitKind::kOnes);
    b.ln1_bias = vector(p + "ln_1.bias", C, S::kReplicated, InitKind::kZeros);
    b.qkv_weight = matrix(p + "attn.c_attn.weight", {3 * C, C}, S::kRows, 3, true, std);
    b.qkv_bias = vector(p + "attn.c_attn.bias", 3 * C, S::kRows, InitKind::kZeros, 3);
    b.attn_proj_weight =
        matrix(p + "attn.c_proj.weight", {C, C}, S::kColumns, 1, true, projection_std);
    b.attn_proj_bias = vector(p + "attn.c_proj.bias", C, S::kReplicated, InitKind::kZeros);
    b.ln2_weight = vector(p + "ln_2.weight", C, S::kReplicated, InitKind::kOnes);
    b.ln2_bias = vector(p + "ln_2.bias", C, S::kReplicated, InitKind::kZeros);
    b.mlp_up_weight = matrix(p + "mlp.c_fc.weight", {F, C}, S::kRows, 1, true, std);
    b.mlp_up_bias = vector(p + "mlp.c_fc.bias", F, S::kRows, InitKind::kZeros);
    b.mlp_down_weight =
        matrix(p + "mlp.c_proj.weight", {C, F}, S::kColumns, 1, true, projection_std);
    b.mlp_down_bias = vector(p + "mlp.c_proj.bias", C, S::kReplicated, InitKind::kZeros);
    blocks_.push_back(b);
  }
  if (stage.has_head) {
    final_norm_weight_ = vector("transformer.ln_f.weight", C, S::kReplicated, InitKind::kOnes);
    final_norm_bias_ = vector("transformer.ln_f.bias", C, S::kReplicated, InitKind::kZeros);
    if (!config.tied_embeddings) {
      head_weight_ = matrix("lm_head.weight", {V, C}, S::kRows, 1, false, std);
    } else if (stage.has_embedding) {
      head_weight_ = token_embedding_;
    } else {
      // A later stage's copy of the tied embedding; initialised identically and
      // kept identical by summing its gradient with the first stage's.
      head_weight_ = add({.name = "transformer.wte.weight",
                          .global_shape = {V, C},
                          .shard = S::kRows,
                          .weight_decay = true,
                          .init = InitKind::kNormal,
                          .init_std = std,
                          .tied = true,
                          .tied_copy = true});
    }
  }
}

}  // namespace paraplan
