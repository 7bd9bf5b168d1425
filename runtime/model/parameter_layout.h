// parameter_layout.h: a stage's parameters as named ranges of one contiguous
// buffer (llm.c's scheme), for every architecture. The optimizer, checkpoints
// and replay see only this: each tensor's name (the Hugging Face name), shape,
// tensor-parallel split, offset, weight decay and initialisation.
//
// An architecture's layout (gpt/gpt_layout.h) derives from ParameterLayout
// and adds its tensors in buffer order with add(); it also records the
// offsets its forward and backward use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"

namespace paraplan {

enum class InitKind { kNormal, kZeros, kOnes };

// How a tensor is split across the tensor-parallel group.
enum class ShardKind { kReplicated, kRows, kColumns };

struct ParameterTensor {
  std::string name;            // Hugging Face name
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
  // Shared with another pipeline stage (the tied embedding, on the first and
  // the last stage): its gradient is summed over the embedding group.
  bool tied = false;
  // The non-owning copy of a tied tensor (the last stage's head): counted
  // neither in the gradient norm nor in checkpoints; the owner is.
  bool tied_copy = false;

  // Index in the whole tensor (row-major global_shape) of local element k.
  size_t global_index(size_t k) const;
  // Local elements that lie one after another in the whole tensor too, from
  // any multiple of it: a row block of a kRows slice, a row's segment of a
  // kColumns slice, all of a replicated tensor (a reader copies runs).
  size_t contiguous_run() const;
  // Elements of the whole tensor: prod(global_shape).
  size_t global_size() const;
};

class ParameterLayout {
 public:
  virtual ~ParameterLayout() = default;
  ParameterLayout(const ParameterLayout&) = delete;
  ParameterLayout& operator=(const ParameterLayout&) = delete;

  const TransformerConfig& config() const { return config_; }
  const StageSpec& stage() const { return stage_; }
  int tensor_rank() const { return tensor_rank_; }
  int tensor_size() const { return tensor_size_; }
  const std::vector<ParameterTensor>& tensors() const { return tensors_; }
  size_t num_elements() const { return num_elements_; }

  // The tensor with this name, or nullptr.
  const ParameterTensor* find(const std::string& name) const;
  // The tensor whose gradient this stage sums with another stage's (tied),
  // or nullptr.
  const ParameterTensor* tied_tensor() const;

  // Fills params (num_elements() floats) from the counter-based RNG: element k
  // of tensor "name" gets a value that depends only on (seed, name, k), so any
  // stage or shard generates exactly its slice of the single-rank model.
  void initialize(float* params, uint64_t seed) const;
  // The same for one tensor of the layout, into its own `values`
  // (tensor.size floats): a rank that sets its state a tensor at a time.
  void initialize_tensor(const ParameterTensor& tensor, float* values, uint64_t seed) const;

 protected:
  ParameterLayout(const TransformerConfig& config, const StageSpec& stage, int tensor_rank,
                  int tensor_size);

  // What add() needs of a tensor; name and global_shape are the whole tensor's.
  struct TensorSpec {
    std::string name;
    std::vector<int64_t> global_shape;
    ShardKind shard = ShardKind::kReplicated;
    int shard_blocks = 1;
    bool hf_transposed = false;
    bool weight_decay = false;
    InitKind init = InitKind::kZeros;
    float init_std = 0.0f;
    bool tied = false, tied_copy = false;
  };
  // Appends the tensor (this rank's part) to the buffer; returns its offset.
  size_t add(const TensorSpec& spec);
  // Appends another layout's tensors after this one's, offsets shifted (a
  // rank's layout of several model chunks, chunked_stage.h); returns where
  // they start.
  size_t append(const ParameterLayout& other);

 private:
  TransformerConfig config_;
  StageSpec stage_;
  int tensor_rank_ = 0, tensor_size_ = 1;
  std::vector<ParameterTensor> tensors_;
  size_t num_elements_ = 0;
};

// A standard normal sample that depends only on (seed, key, index): Box-Muller
// over two uniforms from a SplitMix64-style hash of the triple.
float counter_normal(uint64_t seed, uint64_t key, uint64_t index);

// FNV-1a 64-bit hash of a name, the key of a tensor in counter_normal.
uint64_t name_key(const std::string& name);

}  // namespace paraplan
