// gpt_layout.h: where every GPT-2 parameter of a pipeline stage lives in the
// stage's one contiguous parameter buffer, and how it is initialised.
//
// Tensors are named and shaped as Hugging Face GPT-2 names them
// ("transformer.h.3.attn.c_attn.weight"), but linear weights are stored in the
// nn.Linear layout [out_features, in_features]; Hugging Face's Conv1D stores
// them transposed ([in, out]), which the checkpoint code handles
// (hf_transposed). A stage holds only its own layers, the embeddings if it is
// the first stage, and the final LayerNorm plus the (tied) head if it is the
// last stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace paraplan {

struct GptConfig {
  int vocab_size = 256;
  int seq_len = 128;
  int num_layers = 4;
  int d_model = 128;
  int num_heads = 4;
  int ffn_size = 512;
  bool tied_embeddings = true;
  float layernorm_epsilon = 1e-5f;
  float init_std = 0.02f;

  int head_dim() const { return d_model / num_heads; }
  // Total parameters of the whole model (tied head counted once).
  int64_t num_parameters() const;
};

// The part of the model one pipeline stage holds.
struct StageSpec {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = true;
  bool has_head = true;
};

enum class InitKind { kNormal, kZeros, kOnes };

// How a tensor is split across the tensor-parallel group.
enum class ShardKind { kReplicated, kRows, kColumns };

struct ParameterTensor {
  std::string name;            // Hugging Face GPT-2 name
  std::vector<int64_t> shape;  // this rank's part, paraplan layout ([out, in] for linear weights)
  std::vector<int64_t> global_shape;  // the whole tensor
  ShardKind shard = ShardKind::kReplicated;
  int shard_blocks = 1;  // row blocks split separately (3 for QKV: q | k | v)
  int tensor_rank = 0, tensor_size = 1;
  bool hf_transposed = false;  // Hugging Face stores it as shape reversed
  size_t offset = 0;           // elements into the stage's parameter buffer
  size_t size = 0;             // elements
  bool weight_decay = false;   // matrices and embeddings decay; biases and norms do not
  InitKind init = InitKind::kZeros;
  float init_std = 0.0f;

  // Index in the whole tensor (row-major global_shape) of local element k.
  size_t global_index(size_t k) const;
};

// Offsets of one transformer block's tensors in the parameter buffer.
struct BlockOffsets {
  size_t ln1_weight, ln1_bias;
  size_t qkv_weight, qkv_bias;              // [3C, C], [3C]
  size_t attn_proj_weight, attn_proj_bias;  // [C, C], [C]
  size_t ln2_weight, ln2_bias;
  size_t mlp_up_weight, mlp_up_bias;      // [F, C], [F]
  size_t mlp_down_weight, mlp_down_bias;  // [C, F], [C]
};

class GptLayout {
 public:
  GptLayout(const GptConfig& config, const StageSpec& stage, int tensor_rank = 0,
            int tensor_size = 1);

  const GptConfig& config() const { return config_; }
  const StageSpec& stage() const { return stage_; }
  int tensor_rank() const { return tensor_rank_; }
  int tensor_size() const { return tensor_size_; }
  // Local widths under tensor parallelism.
  int local_heads() const { return config_.num_heads / tensor_size_; }
  int local_attention_width() const { return local_heads() * config_.head_dim(); }
  int local_ffn() const { return config_.ffn_size / tensor_size_; }
  int local_vocab() const { return config_.vocab_size / tensor_size_; }
  int vocab_start() const { return tensor_rank_ * local_vocab(); }
  const std::vector<ParameterTensor>& tensors() const { return tensors_; }
  size_t num_elements() const { return num_elements_; }

  // Offsets for the stage's i-th block (0-based within the stage).
  const BlockOffsets& block(int local_layer) const { return blocks_[local_layer]; }
  // Only valid on stages that hold them.
  size_t token_embedding() const { return token_embedding_; }        // [V, C]
  size_t position_embedding() const { return position_embedding_; }  // [T, C]
  size_t final_norm_weight() const { return final_norm_weight_; }
  size_t final_norm_bias() const { return final_norm_bias_; }
  // The head's weight [V, C]: the token embedding itself when the stage holds
  // it, else this stage's own copy of the tied weight.
  size_t head_weight() const { return head_weight_; }

  // The tensor with this name, or nullptr.
  const ParameterTensor* find(const std::string& name) const;

  // Fills params (num_elements() floats) from the counter-based RNG: element k
  // of tensor "name" gets a value that depends only on (seed, name, k), so any
  // stage or shard generates exactly its slice of the single-rank model.
  void initialize(float* params, uint64_t seed) const;

 private:
  size_t add(const std::string& name, std::vector<int64_t> global_shape, ShardKind shard,
             int shard_blocks, bool hf_transposed, bool weight_decay, InitKind init,
             float init_std);

  GptConfig config_;
  StageSpec stage_;
  int tensor_rank_ = 0, tensor_size_ = 1;
  std::vector<ParameterTensor> tensors_;
  std::vector<BlockOffsets> blocks_;
  size_t num_elements_ = 0;
  size_t token_embedding_ = 0, position_embedding_ = 0;
  size_t final_norm_weight_ = 0, final_norm_bias_ = 0, head_weight_ = 0;
};

// A standard normal sample that depends only on (seed, key, index): Box-Muller
// over two uniforms from a SplitMix64-style hash of the triple.
float counter_normal(uint64_t seed, uint64_t key, uint64_t index);

// FNV-1a 64-bit hash of a name, the key of a tensor in counter_normal.
uint64_t name_key(const std::string& name);

}  // namespace paraplan
