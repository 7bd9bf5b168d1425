// cpu_kernels.h: internals of the CPU backend shared by its source files: the
// attention, cross-entropy and Llama-op kernels that live outside cpu_ops.cc, and small
// inline math helpers (an exp GCC can vectorize, fixed-order lane reductions).
// Not part of the op-set contract; only kernels/cpu includes it.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ops.h"

namespace paraplan::kernels::cpu {

// ---- math helpers -----------------------------------------------------------------------

// exp(x) for float, within ~2 ulp of the correctly rounded value (Cephes expf:
// Cody-Waite reduction by ln 2, degree-7 polynomial), in plain arithmetic so
// that loops calling it vectorize (with -fno-trapping-math, set in
// kernels/CMakeLists.txt, for the clamps); glibc's expf is an opaque scalar call.
// Inputs above 88 saturate to exp(88) ~ 1.65e38; inputs below -87 (where exp
// is subnormal) and -inf give 0; NaN gives NaN. No FMA is assumed, so the
// result is the same on every x86-64 machine for the same binary.
inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;  // ln 2 split so n * kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float clamped = x > 88.0f ? 88.0f : (x < -87.0f ? -87.0f : x);
  const float shifted = clamped * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;  // round(x / ln 2), in [-126, 127]
  const int32_t n_int = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRoundMagic);
  float r = clamped - n * kLn2High;
  r = r - n * kLn2Low;  // |r| <= ln(2) / 2
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  const float two_to_n = std::bit_cast<float>((n_int + 127) << 23);
  const float result = p * two_to_n;
  return x < -87.0f ? 0.0f : result;
}

// Reductions over kLanes interleaved partial sums, combined in a fixed order:
// deterministic, independent of the vector width, and vectorizable (a plain
// running sum is a serial dependency chain the compiler may not reorder).
constexpr int kLanes = 8;

inline float combine_lanes(const float* lanes) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// max over x[0..n); -inf for n = 0. NaNs are skipped, as by `if (x > max)`.
inline float max_of(const float* x, size_t n) {
  float lanes[kLanes];
  for (int l = 0; l < kLanes; l++) lanes[l] = -INFINITY;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; l++) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  }
  float result = -INFINITY;
  for (int l = 0; l < kLanes; l++) result = lanes[l] > result ? lanes[l] : result;
  for (; i < n; i++) result = x[i] > result ? x[i] : result;
  return result;
}

// sum of a[i] * b[i] over i < n.
inline float dot_of(const float* a, const float* b, size_t n) {
  float lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; l++) lanes[l] += a[i + l] * b[i + l];
  }
  float result = combine_lanes(lanes);
  for (; i < n; i++) result += a[i] * b[i];
  return result;
}

// sum of exp(x[i] - shift) over i < n; with kStore, also out[i] = exp(x[i] - shift).
// out may alias x: each block of kLanes is read completely before it is written.
template <bool kStore>
inline float exp_sum_of(float* out, const float* x, float shift, size_t n) {
  float lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float e[kLanes];
    for (int l = 0; l < kLanes; l++) e[l] = exp_approx(x[i + l] - shift);
    for (int l = 0; l < kLanes; l++) lanes[l] += e[l];
    if constexpr (kStore) {
      for (int l = 0; l < kLanes; l++) out[i + l] = e[l];
    }
  }
  float result = combine_lanes(lanes);
  for (; i < n; i++) {
    const float e = exp_approx(x[i] - shift);
    result += e;
    if constexpr (kStore) out[i] = e;
  }
  return result;
}

// out[i] = exp(x[i] - shift) * scale. out may alias x, as above.
inline void scaled_exp(float* out, const float* x, float shift, float scale, size_t n) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float e[kLanes];
    for (int l = 0; l < kLanes; l++) e[l] = exp_approx(x[i + l] - shift) * scale;
    for (int l = 0; l < kLanes; l++) out[i + l] = e[l];
  }
  for (; i < n; i++) out[i] = exp_approx(x[i] - shift) * scale;
}

// ---- the token-embedding backward's order ---------------------------------------------

// Reused between calls, so a step allocates nothing.
struct TokenGradientScratch {
  std::vector<int> occurrences;  // per slot: occurrences added so far
  std::vector<int> segment;      // per slot: its later-segment row in `partials`, or -1
  std::vector<float> partials;
};

// Token-embedding backward in the order kernels/ops.h states, over fp32 rows:
// rows + s * C holds slot s's starting value and receives its sum. For each
// token position i in ascending order, slot_of(i) names its row (< 0: not
// this shard's) and add_row(float* row, i) adds dout[i, :] onto a row in fp32.
// The first kTokenEmbeddingSegment occurrences of a slot add onto its row;
// every later segment is summed from zero and added when the next starts, or
// at the end.
template <typename SlotOf, typename AddRow>
void sum_token_gradients(float* rows, int num_slots, int num_tokens, size_t C, SlotOf slot_of,
                         AddRow add_row, TokenGradientScratch& scratch) {
  constexpr int kSegment = kTokenEmbeddingSegment;
  scratch.occurrences.assign(static_cast<size_t>(num_slots), 0);
  scratch.segment.assign(static_cast<size_t>(num_slots), -1);
  size_t segments = 0;
  auto fold = [&](int slot) {  // rows[slot] += its current later segment
    float* row = rows + static_cast<size_t>(slot) * C;
    const float* partial = scratch.partials.data() + static_cast<size_t>(scratch.segment[slot]) * C;
    for (size_t c = 0; c < C; c++) row[c] += partial[c];
  };
  for (int i = 0; i < num_tokens; i++) {
    const int slot = slot_of(i);
    if (slot < 0) continue;
    const int k = scratch.occurrences[slot]++;
    if (k < kSegment) {
      add_row(rows + static_cast<size_t>(slot) * C, i);
      continue;
    }
    if (k % kSegment == 0) {  // a later segment starts: fold the one before, restart from zero
      if (scratch.segment[slot] < 0) {
        scratch.segment[slot] = static_cast<int>(segments++);
        if (scratch.partials.size() < segments * C) scratch.partials.resize(segments * C);
      } else {
        fold(slot);
      }
      std::fill_n(scratch.partials.data() + static_cast<size_t>(scratch.segment[slot]) * C, C,
                  0.0f);
    }
    add_row(scratch.partials.data() + static_cast<size_t>(scratch.segment[slot]) * C, i);
  }
  for (int slot = 0; slot < num_slots; slot++)
    if (scratch.segment[slot] >= 0) fold(slot);
}

// ---- kernels (semantics as the Ops methods of the same names in kernels/ops.h) ------------

void attention_forward(float* out, float* logsumexp, const float* qkv, int batch, int seq_len,
                       int num_heads, int num_kv_heads, int head_dim);
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* out, const float* logsumexp, int batch, int seq_len,
                        int num_heads, int num_kv_heads, int head_dim, GradientWrite write);

// cpu_attention_block.cc
void attention_block_forward(float* out_accumulator, float* logsumexp, const float* q,
                             const float* kv, const int32_t* q_positions,
                             const int32_t* kv_positions, const int32_t* documents,
                             const Ops::AttentionBlockShape& shape, bool first);
void attention_block_backward(float* dq_accumulator, float* dkv_accumulator, const float* dout,
                              const float* out, const float* logsumexp, const float* q,
                              const float* kv, const int32_t* q_positions,
                              const int32_t* kv_positions, const int32_t* documents,
                              const Ops::AttentionBlockShape& shape);

// cpu_llama_ops.cc
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int rows,
                     int channels, float epsilon);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int rows, int channels);
void swiglu_forward(float* out, const float* gate_up, int rows, int hidden);
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int rows, int hidden,
                     GradientWrite write);
void rope_forward(float* qkv, const float* cos, const float* sin, int batch, int seq_len,
                  int num_heads, int num_kv_heads, int head_dim);
void rope_backward(float* dqkv, const float* cos, const float* sin, int batch, int seq_len,
                   int num_heads, int num_kv_heads, int head_dim);

void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int rows, int vocab, float loss_scale);
void cross_entropy_shard_stats(float* row_max, float* target_logit, const float* logits,
                               const int32_t* targets, int rows, int vocab_local, int vocab_start);
void cross_entropy_shard_exp_sums(float* exp_sum, const float* logits, const float* row_max,
                                  int rows, int vocab_local);
void cross_entropy_shard_finish(float* losses, float* dlogits, const float* logits,
                                const int32_t* targets, const float* row_max, const float* exp_sum,
                                const float* target_logit, int rows, int vocab_local,
                                int vocab_start, float loss_scale);

class CpuThreadPool;

// Ops::adamw and Ops::sum_of_squares for storage tensors of either dtype, on
// pool's threads, bitwise the same for every thread count (cpu_optimizer.cc).
// block_sums is scratch the caller keeps between calls. adamw's gradients
// are of the storage dtype or fp32 (Ops::adamw_float_gradients).
void adamw(CpuThreadPool& pool, DType storage, DType gradients, float* master, void* params,
           const void* grads, float* first_moment, float* second_moment, size_t n,
           const AdamWStep& hyperparameters);
// Ops::adamw_runs: adamw run by run.
void adamw_runs(CpuThreadPool& pool, DType storage, DType gradients,
                const std::vector<AdamWRun>& runs, const AdamWStep& hyperparameters,
                const GradientClip& clip);
double sum_of_squares(CpuThreadPool& pool, std::vector<double>& block_sums, DType storage,
                      const void* x, size_t n);

// The two storage dtypes of the CPU backend: fp32 (cpu_ops.cc), and bf16
// (cpu_bfloat16_ops.cc), which runs the fp32 ops on widened copies. threads:
// the optimizer's worker threads (>= 1).
std::unique_ptr<Ops> make_float32_ops(int threads);
std::unique_ptr<Ops> make_bfloat16_ops(int threads);

}  // namespace paraplan::kernels::cpu
