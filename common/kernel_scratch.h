// kernel_scratch.h: the device scratch the CUDA backend's kernels take from
// an Ops object's DeviceScratch besides cuDNN's workspace
// (attention_workspace.h) — the one place its sizes live. The kernels read
// their constants here; the planner's memory model counts the requests a
// plan's backward makes (planner/cost/model_counts.h
// cuda_kernel_scratch_bytes). DeviceScratch grows to the largest request and
// keeps every buffer it outgrew until the Ops go (work queued before may
// still use it), so a rank holds at most the sum of the distinct requests.
// The requests, each rounded up to 256 bytes as DeviceScratch rounds them:
// - the norm backward's per-block partial weight (and bias) gradients, one
//   row of channels per block, at most kBlocksPerSm blocks per SM;
// - the column sums' partial rows (a linear layer's bias gradient where
//   cuBLASLt's BGRADB epilogue does not apply), at most kBlocksPerSm per SM
//   and one per kMinChunkRows rows; and the epilogue's fp32 output row;
// - the token embedding backward's sort: keys and positions in and out,
//   segment sums of kTokenEmbeddingSegment tokens (kernels/ops.h's), and
//   CUB's radix sort storage (its alternate key and value arrays and at most
//   kSortSlack more);
// - the block attention backward's row terms (context parallelism and
//   document masking), one fp32 per query row and head.
// Plain integers, no CUDA.
#pragma once

#include <cstdint>

namespace paraplan::kernel_scratch {

inline constexpr int64_t kBlocksPerSm = 2;
inline constexpr int64_t kMinChunkRows = 32;
inline constexpr int64_t kTokenEmbeddingSegment = 32;
inline constexpr int64_t kSortSlack = int64_t{1} << 20;

inline constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline constexpr int64_t request(int64_t bytes) {  // as DeviceScratch::get rounds it
  return bytes <= 256 ? 256 : ceil_div(bytes, 256) * 256;
}

// Blocks of rows a norm backward or a column sum spreads over the SMs.
inline constexpr int64_t row_blocks(int64_t rows, int64_t multiprocessors) {
  if (rows <= 0) return 0;
  const int64_t block_rows = ceil_div(rows, kBlocksPerSm * multiprocessors);
  return ceil_div(rows, block_rows);
}

inline constexpr int64_t norm_backward_bytes(int64_t rows, int64_t channels, bool bias,
                                             int64_t multiprocessors) {
  return request((bias ? 2 : 1) * row_blocks(rows, multiprocessors) * channels * 4);
}

// At most: the column tiles only lower the chunk count.
inline constexpr int64_t column_sums_bytes(int64_t rows, int64_t columns, int64_t multiprocessors) {
  const int64_t by_sms = kBlocksPerSm * multiprocessors, by_rows = ceil_div(rows, kMinChunkRows);
  return request((by_sms < by_rows ? by_sms : by_rows) * columns * 4);
}

inline constexpr int64_t token_embedding_backward_bytes(int64_t tokens, int64_t channels) {
  const int64_t array = request(4 * tokens);
  const int64_t segment_sums = request(ceil_div(tokens, kTokenEmbeddingSegment) * channels * 4);
  return request(4 * array + 2 * segment_sums + 2 * array + kSortSlack);
}

inline constexpr int64_t block_attention_backward_bytes(int64_t batch, int64_t heads,
                                                        int64_t query_rows) {
  return request(batch * heads * query_rows * 4);
}

}  // namespace paraplan::kernel_scratch
