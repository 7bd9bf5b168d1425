// decoder_layout.h: what the parameter layouts of decoder-only language
// models share (gpt/gpt_layout.h, llama/llama_layout.h): a token embedding on
// the first stage, blocks, a final norm and a head on the last stage (the
// embedding itself when tied and on the same stage, this stage's tied copy
// otherwise, else its own lm_head), the vocabulary shard under tensor
// parallelism, and where each block starts in the buffer. decoder_stage.h
// runs the loops over such a layout.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/model/parameter_layout.h"

namespace paraplan {

class DecoderLayout : public ParameterLayout {
 public:
  // The vocabulary shard of this tensor rank: [vocab_start, vocab_start + local_vocab).
  int local_vocab() const { return config().vocab_size / tensor_size(); }
  int vocab_start() const { return tensor_rank() * local_vocab(); }
  // Only valid on stages that hold them.
  size_t token_embedding() const { return token_embedding_; }  // [V, C]
  size_t final_norm_weight() const { return final_norm_weight_; }
  // The head's weight [V, C]: lm_head, or the token embedding when tied.
  size_t head_weight() const { return head_weight_; }
  // The offset of the stage's i-th block's first tensor: backward finishes
  // the block's gradients from there to the end of the buffer.
  size_t block_start(int local_layer) const { return block_starts_[local_layer]; }

 protected:
  using ParameterLayout::ParameterLayout;

  // A normally initialised, decayed matrix (a linear weight or an embedding).
  size_t add_matrix(std::string name, std::vector<int64_t> shape, ShardKind shard, float init_std,
                    int shard_blocks = 1, bool hf_transposed = false, bool tied = false,
                    bool tied_copy = false);
  // The token embedding [V, C], vocab-parallel, named embedding_name; tied
  // when the head shares it from another stage.
  void add_token_embedding(const std::string& embedding_name);
  // The head after the final norm: lm_head [V, C] when untied, else the
  // embedding (this stage's) or a tied copy of it (named embedding_name).
  void add_head(const std::string& embedding_name);

  size_t token_embedding_ = 0, final_norm_weight_ = 0, head_weight_ = 0;
  std::vector<size_t> block_starts_;
};

}  // namespace paraplan
