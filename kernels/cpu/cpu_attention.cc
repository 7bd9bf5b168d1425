// cpu_attention.cc: causal multi-head self-attention, forward and backward, for
// the CPU backend (kernels/ops.h, Ops::attention_forward/backward), flash style:
// nothing of size T x T is ever stored, only one tile of scores at a time.
//
// Per (batch, query head h), with Q the head's [T, D] slice of qkv and K, V
// those of its KV head h / (H / Hkv) (row stride (H + 2 Hkv) D, read in place,
// never copied: grouped-query attention shares them, and H = Hkv is GPT-2's
// multi-head layout), the rows (queries) are cut into blocks of
// tile_size(T) (64, or 128 from T = 512) and the keys into chunks of the same
// size; a block only visits the chunks on or left of the diagonal (the causal
// mask), skipping the upper triangle. For each (block, chunk) tile:
//   forward:  S = Q K^T * scale (sgemm into a stack tile); per row an online
//             softmax: m = max(m, max S), the running sum l and the output rows
//             (kept in `out`) rescale by exp(m_old - m), P = exp(S - m), and
//             out += P V (sgemm). At the end out /= l and logsumexp = m + log l.
//   backward: D_t = dOut_t . out_t per row (into the caller's [B, H, T] scratch),
//             then per tile P = exp(S - logsumexp) recomputed, dP = dOut V^T,
//             dS = P * (dP - D), dV += P^T dOut, dQ += dS K * scale,
//             dK += dS^T Q * scale (five sgemm calls). A KV head's dK and dV
//             take the query heads of its group in ascending order. To
//             overwrite dqkv (GradientWrite::kOverwrite), each element's first
//             product runs with beta = 0: dQ's at the first chunk, dK's and
//             dV's at the diagonal tile of the group's first query head.
// Deterministic: the tile size depends on T alone and every loop runs in a
// fixed order, so the bits do not depend on the batch size or on other heads;
// for a fixed OpenBLAS thread count the result is bitwise reproducible.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/openblas_library.h"

namespace paraplan::kernels::cpu {

namespace {

// Rows per query block and keys per chunk: large enough for sgemm to run at
// speed, small enough that most of the upper triangle is skipped and a tile of
// scores (at most 64 KiB; backward keeps two) lives on the stack. Measured
// (1 OpenBLAS thread, forward + backward): 64 is best at T = 128, 128 at
// T = 1024. A function of T alone, so the bits do not depend on the batch.
constexpr int kMaxTile = 128;
int tile_size(int seq_len) {
  return seq_len >= 512 ? kMaxTile : 64;
}

// Keys of chunk [col0, col0 + cols) that query t may attend to (key <= t).
int visible_keys(int t, int col0, int cols) {
  return std::clamp(t - col0 + 1, 0, cols);
}

// Where one query head's [T, D] operands live: row t of Q at query + t * row
// stride, and so on; K and V are its KV head's.
struct HeadView {
  const float* query;
  const float* key;
  const float* value;
  size_t qkv_offset;    // of the head's query column in qkv (and dqkv)
  size_t key_offset;    // of its KV head's key column in qkv (and dqkv)
  size_t value_offset;  // of its KV head's value column
  size_t out_offset;    // of the head's column in out (and dout)
  size_t row_offset;    // of the head's first row in logsumexp (and the D scratch)
  size_t qkv_stride;    // (H + 2 Hkv) * D
};

HeadView head_view(const float* qkv, int b, int h, int T, int H, int Hkv, int D) {
  const size_t C = static_cast<size_t>(H) * D, stride = C + 2 * static_cast<size_t>(Hkv) * D;
  const size_t row0 = static_cast<size_t>(b) * T * stride;
  const size_t kv_head = static_cast<size_t>(h / (H / Hkv));
  const size_t qkv_offset = row0 + static_cast<size_t>(h) * D;
  const size_t key_offset = row0 + C + kv_head * D;
  const size_t value_offset = key_offset + static_cast<size_t>(Hkv) * D;
  return {qkv + qkv_offset,
          qkv + key_offset,
          qkv + value_offset,
          qkv_offset,
          key_offset,
          value_offset,
          static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * D,
          (static_cast<size_t>(b) * H + h) * T,
          stride};
}

// False for an empty problem; throws for KV heads that do not divide the heads.
bool valid_shape(int batch, int seq_len, int num_heads, int num_kv_heads, int head_dim) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
    throw std::invalid_argument("attention: num_kv_heads " + std::to_string(num_kv_heads) +
                                " must divide num_heads " + std::to_string(num_heads));
  return batch > 0 && seq_len > 0 && num_heads > 0 && head_dim > 0;
}

}  // namespace

void attention_forward(float* out, float* logsumexp, const float* qkv, int batch, int seq_len,
                       int num_heads, int num_kv_heads, int head_dim) {
  if (!valid_shape(batch, seq_len, num_heads, num_kv_heads, head_dim)) return;
  const int T = seq_len, D = head_dim, C = num_heads * head_dim;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int tile = tile_size(T);
  // One tile of scores, then probabilities; and per-row softmax state.
  float scores[kMaxTile * kMaxTile];
  float row_max[kMaxTile], row_sum[kMaxTile];
  for (int b = 0; b < batch; b++) {
    for (int h = 0; h < num_heads; h++) {
      const HeadView head = head_view(qkv, b, h, T, num_heads, num_kv_heads, D);
      const int stride = static_cast<int>(head.qkv_stride);
      float* out_head = out + head.out_offset;
      for (int row0 = 0; row0 < T; row0 += tile) {
        const int rows = std::min(tile, T - row0);
        const float* query_block = head.query + static_cast<size_t>(row0) * stride;
        float* out_block = out_head + static_cast<size_t>(row0) * C;
        for (int col0 = 0; col0 < row0 + rows; col0 += tile) {
          const int cols = std::min(tile, T - col0);
          // S = Q[block] K[chunk]^T * scale.
          openblas_library().cblas_sgemm(
              CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, attention_scale, query_block,
              stride, head.key + static_cast<size_t>(col0) * stride, stride, 0.0f, scores, cols);
          for (int i = 0; i < rows; i++) {
            float* p = scores + static_cast<size_t>(i) * cols;
            const int visible = visible_keys(row0 + i, col0, cols);
            // Every query sees key 0, so the first chunk sets a finite max;
            // a row that sees nothing of a later chunk keeps its state.
            const float previous_max = col0 == 0 ? -INFINITY : row_max[i];
            const float new_max = std::max(previous_max, max_of(p, visible));
            const float chunk_sum = exp_sum_of<true>(p, p, new_max, visible);
            std::memset(p + visible, 0, static_cast<size_t>(cols - visible) * sizeof(float));
            if (col0 == 0) {
              row_sum[i] = chunk_sum;
            } else {
              const float rescale = exp_approx(previous_max - new_max);
              row_sum[i] = row_sum[i] * rescale + chunk_sum;
              float* out_row = out_block + static_cast<size_t>(i) * C;
              for (int d = 0; d < D; d++) out_row[d] *= rescale;
            }
            row_max[i] = new_max;
          }
          // out[block] (+)= P V[chunk]; the first chunk overwrites.
          openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, cols,
                                         1.0f, scores, cols,
                                         head.value + static_cast<size_t>(col0) * stride, stride,
                                         col0 == 0 ? 0.0f : 1.0f, out_block, C);
        }
        for (int i = 0; i < rows; i++) {
          float* out_row = out_block + static_cast<size_t>(i) * C;
          const float inverse_sum = 1.0f / row_sum[i];
          for (int d = 0; d < D; d++) out_row[d] *= inverse_sum;
          logsumexp[head.row_offset + row0 + i] = row_max[i] + std::log(row_sum[i]);
        }
      }
    }
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* logsumexp, int batch, int seq_len,
                        int num_heads, int num_kv_heads, int head_dim, GradientWrite write) {
  if (!valid_shape(batch, seq_len, num_heads, num_kv_heads, head_dim)) return;
  const int T = seq_len, D = head_dim, C = num_heads * head_dim;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int tile = tile_size(T);
  const bool overwrite = write == GradientWrite::kOverwrite;
  const int group_size = num_heads / num_kv_heads;
  // Probabilities and their gradient for one tile.
  float probabilities[kMaxTile * kMaxTile];
  float dscores[kMaxTile * kMaxTile];
  for (int b = 0; b < batch; b++) {
    for (int h = 0; h < num_heads; h++) {
      const HeadView head = head_view(qkv, b, h, T, num_heads, num_kv_heads, D);
      const int stride = static_cast<int>(head.qkv_stride);
      float* dquery = dqkv + head.qkv_offset;
      float* dkey = dqkv + head.key_offset;
      float* dvalue = dqkv + head.value_offset;
      const float* dout_head = dout + head.out_offset;
      const float* lse_head = logsumexp + head.row_offset;
      // D_t = sum_d dOut[t, d] out[t, d] = sum_j P[t, j] dP[t, j], the softmax
      // backward's row term.
      float* row_dot = scratch + head.row_offset;
      for (int t = 0; t < T; t++) {
        const size_t row = static_cast<size_t>(t) * C;
        row_dot[t] = dot_of(dout_head + row, out + head.out_offset + row, D);
      }
      for (int row0 = 0; row0 < T; row0 += tile) {
        const int rows = std::min(tile, T - row0);
        const float* query_block = head.query + static_cast<size_t>(row0) * stride;
        const float* dout_block = dout_head + static_cast<size_t>(row0) * C;
        for (int col0 = 0; col0 < row0 + rows; col0 += tile) {
          const int cols = std::min(tile, T - col0);
          const size_t chunk = static_cast<size_t>(col0) * stride;
          // P = exp(Q K^T * scale - logsumexp), masked; dP = dOut V^T.
          openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D,
                                         attention_scale, query_block, stride, head.key + chunk,
                                         stride, 0.0f, probabilities, cols);
          openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D,
                                         1.0f, dout_block, C, head.value + chunk, stride, 0.0f,
                                         dscores, cols);
          for (int i = 0; i < rows; i++) {
            const int t = row0 + i;
            float* p = probabilities + static_cast<size_t>(i) * cols;
            float* ds = dscores + static_cast<size_t>(i) * cols;
            const int visible = visible_keys(t, col0, cols);
            scaled_exp(p, p, lse_head[t], 1.0f, visible);
            const float row_term = row_dot[t];
            for (int j = 0; j < visible; j++) ds[j] = p[j] * (ds[j] - row_term);
            // Masked entries add nothing to the products below.
            std::memset(p + visible, 0, static_cast<size_t>(cols - visible) * sizeof(float));
            std::memset(ds + visible, 0, static_cast<size_t>(cols - visible) * sizeof(float));
          }
          // dV[chunk] += P^T dOut[block]; dQ[block] += dS K[chunk] * scale;
          // dK[chunk] += dS^T Q[block] * scale. Overwriting, the first
          // product into an element replaces it (beta = 0): a chunk's dK and
          // dV first get the diagonal block (row0 == col0, the first to visit
          // it) of the group's first query head; a block's dQ its first chunk.
          const float kv_beta = overwrite && h % group_size == 0 && row0 == col0 ? 0.0f : 1.0f;
          const float q_beta = overwrite && col0 == 0 ? 0.0f : 1.0f;
          openblas_library().cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, rows,
                                         1.0f, probabilities, cols, dout_block, C, kv_beta,
                                         dvalue + chunk, stride);
          openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, cols,
                                         attention_scale, dscores, cols, head.key + chunk, stride,
                                         q_beta, dquery + static_cast<size_t>(row0) * stride,
                                         stride);
          openblas_library().cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, rows,
                                         attention_scale, dscores, cols, query_block, stride,
                                         kv_beta, dkey + chunk, stride);
        }
      }
    }
  }
}

}  // namespace paraplan::kernels::cpu
