// cpu_attention.cc: causal multi-head self-attention, forward and backward, for
// the CPU backend (kernels/ops.h, Ops::attention_forward/backward), flash style:
// nothing of size T x T is ever stored, only one tile of scores at a time.
//
// Per (batch, head), with Q, K, V the head's [T, D] slices of qkv (row stride
// 3C, read in place, never copied), the rows (queries) are cut into blocks of
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
//             dK += dS^T Q * scale (five sgemm calls).
// Deterministic: the tile size depends on T alone and every loop runs in a
// fixed order, so the bits do not depend on the batch size or on other heads;
// for a fixed OpenBLAS thread count the result is bitwise reproducible.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

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

// Where one head's [T, D] operands live: row t of Q at query + t * C3, and so on.
struct HeadView {
  const float* query;
  const float* key;
  const float* value;
  size_t qkv_offset;  // of the head's query column in qkv (and dqkv)
  size_t out_offset;  // of the head's column in out (and dout)
  size_t row_offset;  // of the head's first row in logsumexp (and the D scratch)
};

HeadView head_view(const float* qkv, int b, int h, int T, int H, int D) {
  const int C = H * D;
  const size_t qkv_offset = static_cast<size_t>(b) * T * 3 * C + static_cast<size_t>(h) * D;
  return {qkv + qkv_offset,
          qkv + qkv_offset + C,
          qkv + qkv_offset + 2 * C,
          qkv_offset,
          static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * D,
          (static_cast<size_t>(b) * H + h) * T};
}

}  // namespace

void attention_forward(float* out, float* logsumexp, const float* qkv, int batch, int seq_len,
                       int num_heads, int head_dim) {
  if (batch <= 0 || seq_len <= 0 || num_heads <= 0 || head_dim <= 0) return;
  const int T = seq_len, D = head_dim, C = num_heads * head_dim, C3 = 3 * C;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int tile = tile_size(T);
  // One tile of scores, then probabilities; and per-row softmax state.
  float scores[kMaxTile * kMaxTile];
  float row_max[kMaxTile], row_sum[kMaxTile];
  for (int b = 0; b < batch; b++) {
    for (int h = 0; h < num_heads; h++) {
      const HeadView head = head_view(qkv, b, h, T, num_heads, D);
      float* out_head = out + head.out_offset;
      for (int row0 = 0; row0 < T; row0 += tile) {
        const int rows = std::min(tile, T - row0);
        const float* query_block = head.query + static_cast<size_t>(row0) * C3;
        float* out_block = out_head + static_cast<size_t>(row0) * C;
        for (int col0 = 0; col0 < row0 + rows; col0 += tile) {
          const int cols = std::min(tile, T - col0);
          // S = Q[block] K[chunk]^T * scale.
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, attention_scale,
                      query_block, C3, head.key + static_cast<size_t>(col0) * C3, C3, 0.0f, scores,
                      cols);
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
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, cols, 1.0f, scores, cols,
                      head.value + static_cast<size_t>(col0) * C3, C3, col0 == 0 ? 0.0f : 1.0f,
                      out_block, C);
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
                        int num_heads, int head_dim) {
  if (batch <= 0 || seq_len <= 0 || num_heads <= 0 || head_dim <= 0) return;
  const int T = seq_len, D = head_dim, C = num_heads * head_dim, C3 = 3 * C;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int tile = tile_size(T);
  // Probabilities and their gradient for one tile.
  float probabilities[kMaxTile * kMaxTile];
  float dscores[kMaxTile * kMaxTile];
  for (int b = 0; b < batch; b++) {
    for (int h = 0; h < num_heads; h++) {
      const HeadView head = head_view(qkv, b, h, T, num_heads, D);
      float* dquery = dqkv + head.qkv_offset;
      float* dkey = dquery + C;
      float* dvalue = dquery + 2 * C;
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
        const float* query_block = head.query + static_cast<size_t>(row0) * C3;
        const float* dout_block = dout_head + static_cast<size_t>(row0) * C;
        for (int col0 = 0; col0 < row0 + rows; col0 += tile) {
          const int cols = std::min(tile, T - col0);
          const size_t chunk = static_cast<size_t>(col0) * C3;
          // P = exp(Q K^T * scale - logsumexp), masked; dP = dOut V^T.
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, attention_scale,
                      query_block, C3, head.key + chunk, C3, 0.0f, probabilities, cols);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, 1.0f, dout_block, C,
                      head.value + chunk, C3, 0.0f, dscores, cols);
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
          // dK[chunk] += dS^T Q[block] * scale.
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, rows, 1.0f, probabilities,
                      cols, dout_block, C, 1.0f, dvalue + chunk, C3);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, cols, attention_scale,
                      dscores, cols, head.key + chunk, C3, 1.0f,
                      dquery + static_cast<size_t>(row0) * C3, C3);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, rows, attention_scale,
                      dscores, cols, query_block, C3, 1.0f, dkey + chunk, C3);
        }
      }
    }
  }
}

}  // namespace paraplan::kernels::cpu
