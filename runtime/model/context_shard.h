// context_shard.h: which tokens of every sequence a rank of a
// context-parallel group holds (plan.fbs, Mesh.context_parallel), and the
// documents of a micro-batch (Data.document_separator).
//
// A sequence of T tokens is cut into 2 cp equal chunks; rank r holds chunks
// r and 2 cp - 1 - r, in that order, so under the causal mask every rank
// attends over the same number of (query, key) pairs (the head-tail load
// balancing of Megatron-core and torchtitan). Everything outside attention
// works per token on the rank's T / cp tokens; attention and the position
// embeddings ask for their true positions. With cp = 1 the rank holds the
// whole sequence as one run.
#pragma once

#include <cstdint>
#include <vector>

namespace paraplan {

// A contiguous run of a rank's tokens: local_offset..+length of its
// [seq_len / cp] tokens are the sequence's positions position..+length.
struct PositionRun {
  int local_offset = 0, position = 0, length = 0;
};

struct ContextShard {
  int rank = 0, size = 1;  // in the context-parallel group
  int seq_len = 0;         // the whole sequence's

  // Tokens of each sequence this rank holds.
  int local_length() const { return seq_len / size; }
  // One run (the whole sequence) for cp = 1, else chunks rank and 2 cp - 1 - rank.
  std::vector<PositionRun> runs() const { return runs_of(rank); }
  std::vector<PositionRun> runs_of(int context_rank) const;
  // Rank r's tokens' positions, in the order it holds them [local_length].
  std::vector<int32_t> positions_of(int context_rank) const;
  // This rank's tokens [batch, local_length] of whole sequences [batch, seq_len].
  void take_local(const int32_t* whole, int32_t* local, int batch) const;
  // Throws std::invalid_argument unless 2 size divides seq_len (size > 1).
  void check() const;
};

// Each position's document within its sequence [batch, seq_len]: the count of
// separator tokens before it, so a separator ends its document and the next
// token starts a new one (Megatron's --reset-attention-mask).
void document_numbers(const int32_t* tokens, int32_t* documents, int batch, int seq_len,
                      int32_t separator);

}  // namespace paraplan
