// gpt_layout.cc: the GPT-2 parameter table of a stage and its initialisation.
#include "runtime/model/gpt/gpt_layout.h"

#include <cmath>
#include <stdexcept>

namespace paraplan {

int64_t GptConfig::num_parameters() const {
  const int64_t C = d_model, F = ffn_size, V = vocab_size, T = seq_len;
  const int64_t per_block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C;
  return V * C + T * C + num_layers * per_block + 2 * C + (tied_embeddings ? 0 : V * C);
}

size_t GptLayout::add(const std::string& name, std::vector<int64_t> global_shape, ShardKind shard,
                      int shard_blocks, bool hf_transposed, bool weight_decay, InitKind init,
                      float init_std) {
  ParameterTensor tensor;
  tensor.name = name;
  tensor.global_shape = global_shape;
  tensor.shape = global_shape;
  // A 1-D tensor split by rows (a column-parallel bias) divides its only dimension.
  if (tensor_size_ > 1 && shard == ShardKind::kRows) tensor.shape[0] /= tensor_size_;
  if (tensor_size_ > 1 && shard == ShardKind::kColumns) tensor.shape[1] /= tensor_size_;
  tensor.shard = tensor_size_ > 1 ? shard : ShardKind::kReplicated;
  tensor.shard_blocks = shard_blocks;
  tensor.tensor_rank = tensor_rank_;
  tensor.tensor_size = tensor_size_;
  tensor.size = 1;
  for (int64_t dim : tensor.shape) tensor.size *= static_cast<size_t>(dim);
  tensor.hf_transposed = hf_transposed;
  tensor.offset = num_elements_;
  tensor.weight_decay = weight_decay;
  tensor.init = init;
  tensor.init_std = init_std;
  num_elements_ += tensor.size;
  tensors_.push_back(std::move(tensor));
  return tensors_.back().offset;
}

size_t ParameterTensor::global_index(size_t k) const {
  const size_t columns = shape.size() > 1 ? static_cast<size_t>(shape[1]) : 1;
  const size_t row = k / columns, column = k % columns;
  const size_t global_columns = global_shape.size() > 1 ? static_cast<size_t>(global_shape[1]) : 1;
  switch (shard) {
    case ShardKind::kReplicated:
      return k;
    case ShardKind::kRows: {
      // Local rows come block by block; each block holds this rank's slice
      // of the matching global block.
      const size_t rows_per_block = static_cast<size_t>(shape[0]) / shard_blocks;
      const size_t block = row / rows_per_block, within = row % rows_per_block;
      const size_t global_row = block * rows_per_block * tensor_size +
                                static_cast<size_t>(tensor_rank) * rows_per_block + within;
      return global_row * global_columns + column;
    }
    case ShardKind::kColumns:
      return row * global_columns + static_cast<size_t>(tensor_rank) * columns + column;
  }
  return k;
}

GptLayout::GptLayout(const GptConfig& config, const StageSpec& stage, int tensor_rank,
                     int tensor_size)
    : config_(config), stage_(stage), tensor_rank_(tensor_rank), tensor_size_(tensor_size) {
  const int64_t C = config.d_model, F = config.ffn_size, V = config.vocab_size, T = config.seq_len;
  const float std = config.init_std;
  // GPT-2 scales the residual projections by 1/sqrt(2 * layers).
  const float projection_std = std / std::sqrt(2.0f * static_cast<float>(config.num_layers));
  using S = ShardKind;
  if (stage.has_embedding) {
    token_embedding_ =
        add("transformer.wte.weight", {V, C}, S::kRows, 1, false, true, InitKind::kNormal, std);
    position_embedding_ = add("transformer.wpe.weight", {T, C}, S::kReplicated, 1, false, true,
                              InitKind::kNormal, std);
  }
  for (int i = 0; i < stage.num_layers; ++i) {
    const std::string p = "transformer.h." + std::to_string(stage.first_layer + i) + ".";
    BlockOffsets b;
    b.ln1_weight = add(p + "ln_1.weight", {C}, S::kReplicated, 1, false, false, InitKind::kOnes, 0);
    b.ln1_bias = add(p + "ln_1.bias", {C}, S::kReplicated, 1, false, false, InitKind::kZeros, 0);
    b.qkv_weight =
        add(p + "attn.c_attn.weight", {3 * C, C}, S::kRows, 3, true, true, InitKind::kNormal, std);
    b.qkv_bias =
        add(p + "attn.c_attn.bias", {3 * C}, S::kRows, 3, false, false, InitKind::kZeros, 0);
    b.attn_proj_weight = add(p + "attn.c_proj.weight", {C, C}, S::kColumns, 1, true, true,
                             InitKind::kNormal, projection_std);
    b.attn_proj_bias =
        add(p + "attn.c_proj.bias", {C}, S::kReplicated, 1, false, false, InitKind::kZeros, 0);
    b.ln2_weight = add(p + "ln_2.weight", {C}, S::kReplicated, 1, false, false, InitKind::kOnes, 0);
    b.ln2_bias = add(p + "ln_2.bias", {C}, S::kReplicated, 1, false, false, InitKind::kZeros, 0);
    b.mlp_up_weight =
        add(p + "mlp.c_fc.weight", {F, C}, S::kRows, 1, true, true, InitKind::kNormal, std);
    b.mlp_up_bias = add(p + "mlp.c_fc.bias", {F}, S::kRows, 1, false, false, InitKind::kZeros, 0);
    b.mlp_down_weight = add(p + "mlp.c_proj.weight", {C, F}, S::kColumns, 1, true, true,
                            InitKind::kNormal, projection_std);
    b.mlp_down_bias =
        add(p + "mlp.c_proj.bias", {C}, S::kReplicated, 1, false, false, InitKind::kZeros, 0);
    blocks_.push_back(b);
  }
  if (stage.has_head) {
    final_norm_weight_ =
        add("transformer.ln_f.weight", {C}, S::kReplicated, 1, false, false, InitKind::kOnes, 0);
    final_norm_bias_ =
        add("transformer.ln_f.bias", {C}, S::kReplicated, 1, false, false, InitKind::kZeros, 0);
    if (!config.tied_embeddings) {
      head_weight_ =
          add("lm_head.weight", {V, C}, S::kRows, 1, false, true, InitKind::kNormal, std);
    } else if (stage.has_embedding) {
      head_weight_ = token_embedding_;
    } else {
      // A later stage's copy of the tied embedding; initialised identically and
      // kept identical by summing its gradient with the first stage's.
      head_weight_ =
          add("transformer.wte.weight", {V, C}, S::kRows, 1, false, true, InitKind::kNormal, std);
    }
  }
}

const ParameterTensor* GptLayout::find(const std::string& name) const {
  for (const ParameterTensor& tensor : tensors_)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

uint64_t name_key(const std::string& name) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

namespace {
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

float counter_normal(uint64_t seed, uint64_t key, uint64_t index) {
  const uint64_t bits = mix64(mix64(seed ^ mix64(key)) ^ index);
  // Two 32-bit uniforms in (0, 1]; Box-Muller in double for exact reproducibility.
  const double u1 = (static_cast<double>(bits >> 32) + 1.0) / 4294967296.0;
  const double u2 = (static_cast<double>(bits & 0xffffffffull) + 1.0) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

void GptLayout::initialize(float* params, uint64_t seed) const {
  for (const ParameterTensor& tensor : tensors_) {
    float* out = params + tensor.offset;
    switch (tensor.init) {
      case InitKind::kZeros:
        for (size_t i = 0; i < tensor.size; ++i) out[i] = 0.0f;
        break;
      case InitKind::kOnes:
        for (size_t i = 0; i < tensor.size; ++i) out[i] = 1.0f;
        break;
      case InitKind::kNormal: {
        const uint64_t key = name_key(tensor.name);
        for (size_t i = 0; i < tensor.size; ++i)
          out[i] = tensor.init_std * counter_normal(seed, key, tensor.global_index(i));
        break;
      }
    }
  }
}

}  // namespace paraplan
