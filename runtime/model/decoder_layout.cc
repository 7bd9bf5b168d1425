// decoder_layout.cc: the tensors every decoder-only layout adds the same way.
#include "runtime/model/decoder_layout.h"

namespace paraplan {

size_t DecoderLayout::add_matrix(std::string name, std::vector<int64_t> shape, ShardKind shard,
                                 float init_std, int shard_blocks, bool hf_transposed, bool tied,
                                 bool tied_copy) {
  return add({.name = std::move(name),
              .global_shape = std::move(shape),
              .shard = shard,
              .shard_blocks = shard_blocks,
              .hf_transposed = hf_transposed,
              .weight_decay = true,
              .init = InitKind::kNormal,
              .init_std = init_std,
              .tied = tied,
              .tied_copy = tied_copy});
}

void DecoderLayout::add_token_embedding(const std::string& embedding_name) {
  const TransformerConfig& c = config();
  // Shared with the last stage's head when that is another stage.
  const bool tied_across_stages = c.tied_embeddings && !(stage().has_embedding && stage().has_head);
  token_embedding_ = add_matrix(embedding_name, {c.vocab_size, c.d_model}, ShardKind::kRows,
                                c.init_std, 1, false, tied_across_stages);
}

void DecoderLayout::add_head(const std::string& embedding_name) {
  const TransformerConfig& c = config();
  if (!c.tied_embeddings) {
    head_weight_ =
        add_matrix("lm_head.weight", {c.vocab_size, c.d_model}, ShardKind::kRows, c.init_std);
  } else if (stage().has_embedding) {
    head_weight_ = token_embedding_;
  } else {
    // A later stage's copy of the tied embedding; initialised identically and
    // kept identical by summing its gradient with the first stage's.
    head_weight_ = add_matrix(embedding_name, {c.vocab_size, c.d_model}, ShardKind::kRows,
                              c.init_std, 1, false, true, true);
  }
}

}  // namespace paraplan
