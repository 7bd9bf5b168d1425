// context_shard.cc: the load-balanced chunks of a context-parallel rank and
// the document numbers of a micro-batch (context_shard.h).
#include "runtime/model/context_shard.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace paraplan {

void ContextShard::check() const {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("context shard: rank " + std::to_string(rank) + " of " +
                                std::to_string(size) + " is outside the group");
  if (size > 1 && (seq_len <= 0 || seq_len % (2 * size) != 0))
    throw std::invalid_argument("context parallelism over " + std::to_string(size) +
                                " ranks needs 2 x " + std::to_string(size) + " to divide seq_len " +
                                std::to_string(seq_len));
}

std::vector<PositionRun> ContextShard::runs_of(int context_rank) const {
  if (size == 1) return {PositionRun{0, 0, seq_len}};
  const int chunk = seq_len / (2 * size);
  return {PositionRun{0, context_rank * chunk, chunk},
          PositionRun{chunk, (2 * size - 1 - context_rank) * chunk, chunk}};
}

std::vector<int32_t> ContextShard::positions_of(int context_rank) const {
  std::vector<int32_t> positions(static_cast<size_t>(local_length()));
  for (const PositionRun& run : runs_of(context_rank))
    for (int i = 0; i < run.length; ++i) positions[run.local_offset + i] = run.position + i;
  return positions;
}

void ContextShard::take_local(const int32_t* whole, int32_t* local, int batch) const {
  const int T = seq_len, local_T = local_length();
  for (int b = 0; b < batch; ++b)
    for (const PositionRun& run : runs())
      std::copy_n(whole + static_cast<size_t>(b) * T + run.position, run.length,
                  local + static_cast<size_t>(b) * local_T + run.local_offset);
}

void document_numbers(const int32_t* tokens, int32_t* documents, int batch, int seq_len,
                      int32_t separator) {
  for (int b = 0; b < batch; ++b) {
    int32_t document = 0;
    for (int t = 0; t < seq_len; ++t) {
      const size_t i = static_cast<size_t>(b) * seq_len + t;
      documents[i] = document;
      if (tokens[i] == separator) ++document;
    }
  }
}

}  // namespace paraplan
