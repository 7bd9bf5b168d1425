// cpu_attention.cc: causal multi-head self-attention, forward and backward, for
// the CPU backend (kernels/ops.h, Ops::attention_forward/backward).
//
// Per (batch, head), with Q, K, V the head's [T, D] slices of qkv (row stride
// 3C, read in place, never copied) and P = att[b, h] ([T, T]):
//   forward:  S = Q K^T * scale (into att), P = causal softmax(S) in place, out = P V;
//   backward: dP = dOut V^T, dV += P^T dOut, dS = P * (dP - rowsum(P * dP)),
//             dQ += dS K * scale, dK += dS^T Q * scale.
// The products go through cblas_sgemm. The causal mask makes P lower
// triangular, so the rows are cut into blocks (block_rows) and each product only
// touches the block lower triangle (the blocks on and left of the diagonal),
// skipping 7/16 of the work at T = 1024; entries above the diagonal inside
// a diagonal block are zero in P and dS, so they add nothing.
// Deterministic: every call has a shape fixed by (T, D) alone, so the
// bits do not depend on the batch size or on other heads; for a fixed OpenBLAS
// thread count the result is bitwise reproducible.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace paraplan::kernels::cpu {

namespace {

// Rows per block of the block-triangular products: large enough for sgemm to
// run at speed, small enough that most of the upper triangle is skipped.
// Measured (1 OpenBLAS thread): 32 to 64 is best at T = 128, 128 at T = 1024.
// A function of T alone, so the bits still do not depend on the batch.
int block_rows(int seq_len) {
  return seq_len >= 512 ? 128 : 64;
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int batch, int seq_len,
                       int num_heads, int head_dim) {
  if (batch <= 0 || seq_len <= 0 || num_heads <= 0 || head_dim <= 0) return;
  const int C = num_heads * head_dim;
  const int C3 = 3 * C;
  const int T = seq_len;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int block = block_rows(T);
  for (int b = 0; b < batch; b++) {
    for (int h = 0; h < num_heads; h++) {
      const float* query =
          qkv + static_cast<size_t>(b) * T * C3 + static_cast<size_t>(h) * head_dim;
      const float* key = query + C;
      const float* value = query + 2 * C;
      float* att_bh = att + (static_cast<size_t>(b) * num_heads + h) * T * T;
      float* out_bh = out + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * head_dim;
      for (int row0 = 0; row0 < T; row0 += block) {
        const int rows = std::min(block, T - row0);
        const int cols = row0 + rows;  // keys 0 .. cols-1 reach this block
        float* att_block = att_bh + static_cast<size_t>(row0) * T;
        // S[block, 0:cols] = Q[block] K[0:cols]^T * scale, written into att.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, head_dim, attention_scale,
                    query + static_cast<size_t>(row0) * C3, C3, key, C3, 0.0f, att_block, T);
        for (int i = 0; i < rows; i++) {
          const int t = row0 + i;
          float* att_row = att_block + static_cast<size_t>(i) * T;
          // Numerically stable softmax over keys 0..t; the rest is masked.
          const float max_score = max_of(att_row, t + 1);
          const float exp_sum = exp_sum_of<true>(att_row, att_row, max_score, t + 1);
          const float exp_sum_inverse = 1.0f / exp_sum;
          for (int t2 = 0; t2 <= t; t2++) att_row[t2] *= exp_sum_inverse;
          std::memset(att_row + t + 1, 0, static_cast<size_t>(T - t - 1) * sizeof(float));
        }
        // out[block] = P[block, 0:cols] V[0:cols].
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, cols, 1.0f,
                    att_block, T, value, C3, 0.0f, out_bh + static_cast<size_t>(row0) * C, C);
      }
    }
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int batch, int seq_len, int num_heads, int head_dim) {
  if (batch <= 0 || seq_len <= 0 || num_heads <= 0 || head_dim <= 0) return;
  const int C = num_heads * head_dim;
  const int C3 = 3 * C;
  const int T = seq_len;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int block = block_rows(T);
  // One head's dS at a time: the first T*T floats of scratch, reused (and so
  // kept in cache) by every head.
  float* dscores = scratch;
  for (int b = 0; b < batch; b++) {
    for (int h = 0; h < num_heads; h++) {
      const size_t head_offset =
          static_cast<size_t>(b) * T * C3 + static_cast<size_t>(h) * head_dim;
      const float* query = qkv + head_offset;
      const float* key = query + C;
      const float* value = query + 2 * C;
      float* dquery = dqkv + head_offset;
      float* dkey = dquery + C;
      float* dvalue = dquery + 2 * C;
      const float* dout_bh =
          dout + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * head_dim;
      const float* att_bh = att + (static_cast<size_t>(b) * num_heads + h) * T * T;

      // Row blocks: dS, then dQ, which needs only the rows of dS in the block.
      for (int row0 = 0; row0 < T; row0 += block) {
        const int rows = std::min(block, T - row0);
        const int cols = row0 + rows;
        float* dscores_block = dscores + static_cast<size_t>(row0) * T;
        // dP[block, 0:cols] = dOut[block] V[0:cols]^T, into the dS rows.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, head_dim, 1.0f,
                    dout_bh + static_cast<size_t>(row0) * C, C, value, C3, 0.0f, dscores_block, T);
        for (int i = 0; i < rows; i++) {
          const int t = row0 + i;
          const float* att_row = att_bh + static_cast<size_t>(t) * T;
          float* dscores_row = dscores_block + static_cast<size_t>(i) * T;
          // Softmax backward, in place: dS = P * (dP - sum(P * dP)).
          const float weighted = dot_of(att_row, dscores_row, t + 1);
          for (int t2 = 0; t2 <= t; t2++) {
            dscores_row[t2] = att_row[t2] * (dscores_row[t2] - weighted);
          }
          // Masked entries the block products below read must be zero.
          std::memset(dscores_row + t + 1, 0, static_cast<size_t>(cols - t - 1) * sizeof(float));
        }
        // dQ[block] += dS[block, 0:cols] K[0:cols] * scale.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, cols,
                    attention_scale, dscores_block, T, key, C3, 1.0f,
                    dquery + static_cast<size_t>(row0) * C3, C3);
      }

      // Column blocks: key/value j receives from queries t >= j, the rows from
      // the block's first row down.
      for (int col0 = 0; col0 < T; col0 += block) {
        const int cols = std::min(block, T - col0);
        const int rows = T - col0;
        const size_t corner = static_cast<size_t>(col0) * T + col0;
        // dV[block] += P[col0:T, block]^T dOut[col0:T].
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, head_dim, rows, 1.0f,
                    att_bh + corner, T, dout_bh + static_cast<size_t>(col0) * C, C, 1.0f,
                    dvalue + static_cast<size_t>(col0) * C3, C3);
        // dK[block] += dS[col0:T, block]^T Q[col0:T] * scale.
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, head_dim, rows, attention_scale,
                    dscores + corner, T, query + static_cast<size_t>(col0) * C3, C3, 1.0f,
                    dkey + static_cast<size_t>(col0) * C3, C3);
      }
    }
  }
}

}  // namespace paraplan::kernels::cpu
