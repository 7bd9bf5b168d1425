// cuda_attention_block.cu: attention by blocks for the CUDA backend
// (kernels/ops.h attention_block_forward; the backward is in
// cuda_attention_block_backward.cu, what both share in
// cuda_attention_block.cuh): a rank's queries against one block of keys and
// values, query i seeing key j when kv_positions[j] <= q_positions[i] and,
// with documents, both positions lie in one document; each block's result is
// folded into fp32 accumulators by log-sum-exp (context parallelism's ring,
// document masking).
//
// The fused attention forward of cuda_attention.cu with the causal test
// replaced by the positions and documents: one block of 16 x 16 threads per
// (64-query tile, b, h); q, kv storage (fp32 or bf16) widened into fp32
// shared tiles; plain FMA, no tensor cores. Per 64-key tile the tile's key
// positions and documents are loaded first and the block votes
// (__syncthreads_or) whether any query of the tile sees any key of it: a
// fully masked tile is skipped before its K and V are loaded. Otherwise S
// (masked to -inf), an online softmax per row (a row that has seen nothing
// keeps exact zeros) and O += P V in registers. At the end each row's block
// result (O / l, m + log l) is folded into out_accumulator and logsumexp
// (first: overwritten), the weights computed in double per row as the CPU
// backend does; a row that saw no key (l = 0) is left alone (first: 0, -inf).
// Deterministic: fixed summation orders, a grid that depends on the shape
// alone, no atomics.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_attention.cuh"
#include "kernels/cuda/cuda_attention_block.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

using namespace attention;
using namespace attention_block;

template <int kDPad>
constexpr size_t block_forward_shared_bytes() {
  // Q, K, V tiles; the score tile; per row max, sum, rescale, and the fold's
  // two weights; then int32 positions and documents of the query and key tiles.
  return sizeof(float) * (3 * kTile * (kDPad + 1) + kTile * (kTile + 1) + 5 * kTile) +
         sizeof(int32_t) * (5 * kTile);
}

// How the fold treats a row (row_mode).
constexpr int32_t kKeep = 0, kOverwrite = 1, kCombine = 2;

// Thread r < rows: the fold of row r's block result (m, l) into *lse, and the
// weights the row's outputs take: out = (combine ? out * old_weight : 0) + O * block_weight.
__device__ void fold_row(float* lse, float m, float l, bool first, int32_t* mode, float* old_weight,
                         float* block_weight) {
  *old_weight = 0.0f;
  if (l == 0.0f) {  // no key of this block
    *mode = first ? kOverwrite : kKeep;
    *block_weight = 0.0f;  // O is exactly 0
    if (first) *lse = -INFINITY;
    return;
  }
  const float previous = first ? -INFINITY : *lse;
  if (previous == -INFINITY) {
    *mode = kOverwrite;
    *block_weight = 1.0f / l;
    *lse = m + logf(l);
    return;
  }
  // lse' = log(e^lse + e^lse_b); the weights e^(lse - lse') and e^(lse_b - lse') / l.
  const double block_lse = static_cast<double>(m) + log(static_cast<double>(l));
  const double top = fmax(static_cast<double>(previous), block_lse);
  const double old_part = exp(previous - top), block_part = exp(block_lse - top);
  const double total = old_part + block_part;
  *mode = kCombine;
  *old_weight = static_cast<float>(old_part / total);
  *block_weight = static_cast<float>(block_part / (total * l));
  *lse = static_cast<float>(top + log(total));
}

// Online softmax over one tile of masked scores (-inf): warp w takes rows w,
// w + 8, ...; lane holds keys lane and lane + 32. Scores become P = exp(S -
// m'), and each row's max, sum and the rescale factor of its O are updated.
__device__ void online_softmax(float* scores, float* row_max, float* row_sum, float* row_rescale) {
  constexpr int kScoreStride = kTile + 1;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < kTile; r += kWarps) {
    float* score_row = scores + r * kScoreStride;
    const float previous_max = row_max[r];
    const float s0 = score_row[lane], s1 = score_row[lane + 32];
    const float new_max = fmaxf(previous_max, warp_max(fmaxf(s0, s1)));
    // A row that has seen no key yet keeps exact zeros (exp(-inf - 0) = 0).
    const float shift = new_max == -INFINITY ? 0.0f : new_max;
    const float p0 = expf(s0 - shift), p1 = expf(s1 - shift);
    score_row[lane] = p0;
    score_row[lane + 32] = p1;
    const float tile_sum = warp_sum(p0 + p1);
    __syncwarp();  // every lane has read row_max[r] before lane 0 replaces it
    if (lane == 0) {
      const float rescale = expf(previous_max - shift);  // 0 before the first visible key
      row_rescale[r] = rescale;
      row_sum[r] = row_sum[r] * rescale + tile_sum;
      row_max[r] = new_max;
    }
  }
}

// Shared memory of the forward kernel, carved from one dynamic buffer.
template <int kDPad>
struct ForwardShared {
  float *q_tile, *k_tile, *v_tile, *scores;  // scores [query][key]
  float *row_max, *row_sum, *row_rescale, *old_weight, *block_weight;
  int32_t *q_pos, *q_doc, *k_pos, *k_doc, *row_mode;
  __device__ explicit ForwardShared(float* shared) {
    constexpr int kStride = kDPad + 1;
    q_tile = shared;
    k_tile = q_tile + kTile * kStride;
    v_tile = k_tile + kTile * kStride;
    scores = v_tile + kTile * kStride;
    row_max = scores + kTile * (kTile + 1);
    row_sum = row_max + kTile;
    row_rescale = row_sum + kTile;
    old_weight = row_rescale + kTile;
    block_weight = old_weight + kTile;
    q_pos = reinterpret_cast<int32_t*>(block_weight + kTile);
    q_doc = q_pos + kTile;
    k_pos = q_doc + kTile;
    k_doc = k_pos + kTile;
    row_mode = k_doc + kTile;
  }
};

template <typename Storage, int kDPad>
__global__ void __launch_bounds__(kThreads)
    attention_block_forward_kernel(float* out_accumulator, float* logsumexp, const Storage* q,
                                   const Storage* kv, const int32_t* q_positions,
                                   const int32_t* kv_positions, const int32_t* documents, Shape s,
                                   float scale, bool first, bool q_packed, bool kv_packed) {
  constexpr int kScoreStride = kTile + 1, kColumns = kDPad / kSide;
  extern __shared__ float shared[];
  const ForwardShared<kDPad> sh(shared);
  const int tx = threadIdx.x % kSide, ty = threadIdx.x / kSide;
  const int b = blockIdx.x / s.num_heads, h = blockIdx.x % s.num_heads;
  const BlockHead head = block_head(s, b, h);
  const int row0 = blockIdx.y * kTile;
  const int rows = min(kTile, s.q_len - row0);
  const size_t q_stride = s.q_row_stride, kv_stride = s.kv_row_stride;

  load_tile<kTile, kDPad>(sh.q_tile, q + head.q_offset + row0 * q_stride, q_stride, rows,
                          s.head_dim, q_packed);
  load_positions<kTile>(sh.q_pos, sh.q_doc, q_positions, documents, b, s.seq_len, row0, rows,
                        kPaddingQuery);
  if (threadIdx.x < kTile) {
    sh.row_max[threadIdx.x] = -INFINITY;
    sh.row_sum[threadIdx.x] = 0.0f;
  }
  float acc[kPerThread][kColumns] = {};  // O for queries ty + 16i, columns tx + 16j

  for (int col0 = 0; col0 < s.kv_len; col0 += kTile) {
    const int cols = min(kTile, s.kv_len - col0);
    __syncthreads();  // the previous tile's readers are done with k_pos, K, V and scores
    load_positions<kTile>(sh.k_pos, sh.k_doc, kv_positions, documents, b, s.seq_len, col0, cols,
                          kPaddingKey);
    __syncthreads();
    bool visible[kPerThread][kPerThread];
    if (!vote_visible<kPerThread, kPerThread, true>(visible, sh.q_pos, sh.q_doc, sh.k_pos,
                                                    sh.k_doc))
      continue;  // no query of the tile sees a key of it: K and V are not even loaded
    load_tile<kTile, kDPad>(sh.k_tile, kv + head.key_offset + col0 * kv_stride, kv_stride, cols,
                            s.head_dim, kv_packed);
    load_tile<kTile, kDPad>(sh.v_tile, kv + head.value_offset + col0 * kv_stride, kv_stride, cols,
                            s.head_dim, kv_packed);
    __syncthreads();
    float score[kPerThread][kPerThread] = {};
    row_products<kPerThread, kPerThread, kDPad, false>(score, score, sh.q_tile, sh.k_tile, nullptr,
                                                       nullptr);
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
#pragma unroll
      for (int j = 0; j < kPerThread; j++) {
        sh.scores[(ty + kSide * i) * kScoreStride + tx + kSide * j] =
            visible[i][j] ? score[i][j] * scale : -INFINITY;
      }
    }
    __syncthreads();
    online_softmax(sh.scores, sh.row_max, sh.row_sum, sh.row_rescale);
    __syncthreads();
    // O = O * rescale + P V.
#pragma unroll
    for (int i = 0; i < kPerThread; i++) {
#pragma unroll
      for (int j = 0; j < kColumns; j++) acc[i][j] *= sh.row_rescale[ty + kSide * i];
    }
    weighted_sum<kPerThread, kDPad, kTile>(acc, sh.scores, kScoreStride, sh.v_tile);
  }
  __syncthreads();  // the row state is final (also when no tile was visited)

  if (threadIdx.x < rows) {
    const int r = threadIdx.x;
    fold_row(logsumexp + head.row_offset + row0 + r, sh.row_max[r], sh.row_sum[r], first,
             sh.row_mode + r, sh.old_weight + r, sh.block_weight + r);
  }
  __syncthreads();
  const size_t C = static_cast<size_t>(s.num_heads) * s.head_dim;
#pragma unroll
  for (int i = 0; i < kPerThread; i++) {
    const int r = ty + kSide * i;
    if (r >= rows || sh.row_mode[r] == kKeep) continue;
    const bool combine = sh.row_mode[r] == kCombine;
    float* out_row = out_accumulator + head.out_offset + (row0 + r) * C;
#pragma unroll
    for (int j = 0; j < kColumns; j++) {
      const int d = tx + kSide * j;
      if (d < s.head_dim) {
        const float previous = combine ? out_row[d] * sh.old_weight[r] : 0.0f;
        out_row[d] = previous + acc[i][j] * sh.block_weight[r];
      }
    }
  }
}

}  // namespace

void attention_block_forward(DType storage, float* out_accumulator, float* logsumexp, const void* q,
                             const void* kv, const int32_t* q_positions,
                             const int32_t* kv_positions, const int32_t* documents,
                             const Ops::AttentionBlockShape& shape, bool first,
                             cudaStream_t stream) {
  if (!attention_block::valid_shape(shape, documents)) return;
  const dim3 grid(static_cast<unsigned int>(shape.batch * shape.num_heads),
                  ceil_div(shape.q_len, kTile));
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const bool q_packed = packed_view(storage, q, shape.head_dim, shape.q_row_stride);
  const bool kv_packed =
      shape.kv_len > 0 &&
      packed_view(storage, kv, shape.head_dim, shape.kv_row_stride, shape.kv_value_offset);
  with_storage(storage, [&](auto tag) {
    using Storage = typename decltype(tag)::type;
    dispatch_head_dim(shape.head_dim, [&](auto padded) {
      constexpr int kDPad = decltype(padded)::value;
      constexpr size_t bytes = block_forward_shared_bytes<kDPad>();
      allow_shared_memory(attention_block_forward_kernel<Storage, kDPad>, bytes);
      attention_block_forward_kernel<Storage, kDPad><<<grid, kThreads, bytes, stream>>>(
          out_accumulator, logsumexp, static_cast<const Storage*>(q),
          static_cast<const Storage*>(kv), q_positions, kv_positions, documents, shape, scale,
          first, q_packed, kv_packed);
      PARAPLAN_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace paraplan::kernels::cuda
