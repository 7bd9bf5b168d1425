// cuda_attention.cu: causal multi-head self-attention, forward and backward,
// for the CUDA backend (kernels/ops.h, Ops::attention_forward/backward), with
// the probabilities att [B, H, T, T] materialised as the interface requires.
//
// Per (batch b, head h), with Q, K, V the head's [T, D] slices of qkv (row
// stride 3C, read in place) and P = att[b, h]:
//   forward:  S = Q K^T * scale (into att), P = causal softmax(S) in place, out = P V;
//   backward: dP = dOut V^T (into scratch), dS = P * (dP - rowsum(P * dP)) in place,
//             dV += P^T dOut, dQ += dS K * scale, dK += dS^T Q * scale.
// Each product is one cublasGemmStridedBatchedEx call per batch entry b over
// the H heads (a head's slices are head_dim floats apart; successive batch
// entries are not a uniform stride from the last head, hence the loop over b).
// The GEMM shapes depend on (T, D, H) only, so the bits do not depend on the
// batch size. The softmax kernels are one warp per row (held in registers up
// to T = 1024: one read and one write), with butterfly reductions:
// deterministic. Entries above the diagonal are zero in P and dS.
//
// cuBLAS is column-major: a row-major [rows, cols] matrix with leading
// dimension ld is the column-major [cols, rows] matrix with the same ld, so
// row-major X = A B^T is column-major X^T = B A^T, and so on (see each call).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // 8 warps, one row each
constexpr int kWarpsPerBlock = kThreads / 32;

// Row r of att ([B*H*T, T]) is query t = r % T: softmax over keys 0..t of the
// scaled scores, zero above the diagonal. With kPerLane > 0 (T <= 32 *
// kPerLane) each lane keeps its kPerLane elements in registers: one read and
// one write of the row. kPerLane = 0 is the general version, which rereads
// the row. Both add in the same order (lane's elements j = lane, lane + 32, ...,
// then the butterfly), so they give the same bits.
template <int kPerLane>
__global__ void causal_softmax_kernel(float* att, int T, size_t rows) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T);
  float* p = att + row * T;
  if constexpr (kPerLane > 0) {
    float v[kPerLane];
    float max_score = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPerLane; k++) {
      const int j = lane + 32 * k;
      v[k] = j <= t ? p[j] : -INFINITY;
      max_score = fmaxf(max_score, v[k]);
    }
    max_score = warp_max(max_score);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; k++) {
      if (lane + 32 * k <= t) {
        v[k] = expf(v[k] - max_score);
        sum += v[k];
      }
    }
    const float inverse = 1.0f / warp_sum(sum);
#pragma unroll
    for (int k = 0; k < kPerLane; k++) {
      const int j = lane + 32 * k;
      if (j < T) p[j] = j <= t ? v[k] * inverse : 0.0f;
    }
  } else {
    float max_score = -INFINITY;
    for (int j = lane; j <= t; j += 32) max_score = fmaxf(max_score, p[j]);
    max_score = warp_max(max_score);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) {
      const float e = expf(p[j] - max_score);
      p[j] = e;
      sum += e;
    }
    const float inverse = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32) p[j] = j <= t ? p[j] * inverse : 0.0f;
  }
}

// dS = P * (dP - sum_j P[j] dP[j]) over keys 0..t, zero above the diagonal
// (in place over dP); kPerLane as in the forward.
template <int kPerLane>
__global__ void __launch_bounds__(kThreads, 2)
    causal_softmax_backward_kernel(float* dscores, const float* att, int T, size_t rows) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T);
  const float* p = att + row * T;
  float* d = dscores + row * T;
  if constexpr (kPerLane > 0) {
    float pv[kPerLane], dv[kPerLane];
    float weighted = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; k++) {
      const int j = lane + 32 * k;
      pv[k] = j <= t ? p[j] : 0.0f;
      dv[k] = j <= t ? d[j] : 0.0f;
      if (j <= t) weighted += pv[k] * dv[k];
    }
    weighted = warp_sum(weighted);
#pragma unroll
    for (int k = 0; k < kPerLane; k++) {
      const int j = lane + 32 * k;
      if (j < T) d[j] = j <= t ? pv[k] * (dv[k] - weighted) : 0.0f;
    }
  } else {
    float weighted = 0.0f;
    for (int j = lane; j <= t; j += 32) weighted += p[j] * d[j];
    weighted = warp_sum(weighted);
    for (int j = lane; j < T; j += 32) d[j] = j <= t ? p[j] * (d[j] - weighted) : 0.0f;
  }
}

// Rows up to this long keep their elements in registers (32 per lane).
constexpr int kRegisterRowLength = 32 * 32;

// One strided-batched GEMM over the H heads of one batch entry (column-major
// operands; alpha and beta on the host).
void batched_gemm(const GemmContext& gemm, cublasOperation_t transa, cublasOperation_t transb,
                  int m, int n, int k, float alpha, const float* a, int lda, long long stride_a,
                  const float* b, int ldb, long long stride_b, float beta, float* c, int ldc,
                  long long stride_c, int batch_count) {
  PARAPLAN_CUBLAS_CHECK(
      cublasGemmStridedBatchedEx(gemm.handle, transa, transb, m, n, k, &alpha, a, CUDA_R_32F, lda,
                                 stride_a, b, CUDA_R_32F, ldb, stride_b, &beta, c, CUDA_R_32F, ldc,
                                 stride_c, batch_count, gemm.compute_type, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void attention_forward(const GemmContext& gemm, float* out, float* att, const float* qkv, int batch,
                       int seq_len, int num_heads, int head_dim) {
  if (batch <= 0 || seq_len <= 0 || num_heads <= 0 || head_dim <= 0) return;
  const int T = seq_len, D = head_dim, H = num_heads, C = H * D, C3 = 3 * C;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const long long TT = static_cast<long long>(T) * T;
  for (int b = 0; b < batch; b++) {
    const float* query = qkv + static_cast<size_t>(b) * T * C3;
    const float* key = query + C;
    float* att_b = att + static_cast<size_t>(b) * H * TT;
    // S[t, t2] = scale * sum_d Q[t, d] K[t2, d]: column-major S^T[t2, t] = K Q^T,
    // K and Q being column-major [D, T] (ld 3C), hence op(K) = K^T.
    batched_gemm(gemm, CUBLAS_OP_T, CUBLAS_OP_N, T, T, D, attention_scale, key, C3, D, query, C3, D,
                 0.0f, att_b, T, TT, H);
  }
  const size_t rows = static_cast<size_t>(batch) * H * T;
  const unsigned int softmax_blocks = ceil_div(rows, kWarpsPerBlock);
  if (T <= kRegisterRowLength) {
    causal_softmax_kernel<32><<<softmax_blocks, kThreads, 0, gemm.stream>>>(att, T, rows);
  } else {
    causal_softmax_kernel<0><<<softmax_blocks, kThreads, 0, gemm.stream>>>(att, T, rows);
  }
  PARAPLAN_CUDA_CHECK_LAUNCH();
  for (int b = 0; b < batch; b++) {
    const float* value = qkv + static_cast<size_t>(b) * T * C3 + 2 * C;
    const float* att_b = att + static_cast<size_t>(b) * H * TT;
    float* out_b = out + static_cast<size_t>(b) * T * C;
    // out[t, d] = sum_t2 P[t, t2] V[t2, d]: column-major out^T[D, T] = V^T-as-stored
    // [D, T] (ld 3C) times P-as-stored [T, T] (ld T), no transposes.
    batched_gemm(gemm, CUBLAS_OP_N, CUBLAS_OP_N, D, T, T, 1.0f, value, C3, D, att_b, T, TT, 0.0f,
                 out_b, C, D, H);
  }
}

void attention_backward(const GemmContext& gemm, float* dqkv, float* scratch, const float* dout,
                        const float* qkv, const float* att, int batch, int seq_len, int num_heads,
                        int head_dim) {
  if (batch <= 0 || seq_len <= 0 || num_heads <= 0 || head_dim <= 0) return;
  const int T = seq_len, D = head_dim, H = num_heads, C = H * D, C3 = 3 * C;
  const float attention_scale = 1.0f / std::sqrt(static_cast<float>(D));
  const long long TT = static_cast<long long>(T) * T;
  for (int b = 0; b < batch; b++) {
    const float* value = qkv + static_cast<size_t>(b) * T * C3 + 2 * C;
    const float* dout_b = dout + static_cast<size_t>(b) * T * C;
    float* dscores_b = scratch + static_cast<size_t>(b) * H * TT;
    // dP[t, t2] = sum_d dOut[t, d] V[t2, d]: column-major dP^T = V dOut^T, as S in forward.
    batched_gemm(gemm, CUBLAS_OP_T, CUBLAS_OP_N, T, T, D, 1.0f, value, C3, D, dout_b, C, D, 0.0f,
                 dscores_b, T, TT, H);
  }
  const size_t rows = static_cast<size_t>(batch) * H * T;
  const unsigned int softmax_blocks = ceil_div(rows, kWarpsPerBlock);
  if (T <= kRegisterRowLength) {
    causal_softmax_backward_kernel<32>
        <<<softmax_blocks, kThreads, 0, gemm.stream>>>(scratch, att, T, rows);
  } else {
    causal_softmax_backward_kernel<0>
        <<<softmax_blocks, kThreads, 0, gemm.stream>>>(scratch, att, T, rows);
  }
  PARAPLAN_CUDA_CHECK_LAUNCH();
  for (int b = 0; b < batch; b++) {
    const size_t qkv_offset = static_cast<size_t>(b) * T * C3;
    const float* query = qkv + qkv_offset;
    const float* key = query + C;
    float* dquery = dqkv + qkv_offset;
    float* dkey = dquery + C;
    float* dvalue = dquery + 2 * C;
    const float* dout_b = dout + static_cast<size_t>(b) * T * C;
    const float* att_b = att + static_cast<size_t>(b) * H * TT;
    const float* dscores_b = scratch + static_cast<size_t>(b) * H * TT;
    // dV[t2, d] += sum_t P[t, t2] dOut[t, d]: column-major dV^T[D, T] += dOut^T-as-stored
    // [D, T] (ld C) times (P-as-stored)^T.
    batched_gemm(gemm, CUBLAS_OP_N, CUBLAS_OP_T, D, T, T, 1.0f, dout_b, C, D, att_b, T, TT, 1.0f,
                 dvalue, C3, D, H);
    // dQ[t, d] += scale * sum_t2 dS[t, t2] K[t2, d]: column-major dQ^T = K-as-stored dS-as-stored.
    batched_gemm(gemm, CUBLAS_OP_N, CUBLAS_OP_N, D, T, T, attention_scale, key, C3, D, dscores_b, T,
                 TT, 1.0f, dquery, C3, D, H);
    // dK[t2, d] += scale * sum_t dS[t, t2] Q[t, d]: column-major dK^T = Q-as-stored
    // (dS-as-stored)^T.
    batched_gemm(gemm, CUBLAS_OP_N, CUBLAS_OP_T, D, T, T, attention_scale, query, C3, D, dscores_b,
                 T, TT, 1.0f, dkey, C3, D, H);
  }
}

}  // namespace paraplan::kernels::cuda
