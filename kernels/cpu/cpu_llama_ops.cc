// cpu_llama_ops.cc: the ops a Llama-family block adds to GPT-2's, for the CPU
// backend (kernels/ops.h): RMS norm, SwiGLU and the rotary position
// embedding (Hugging Face's rotate-half convention), forward and backward, in
// fp32 (cpu_bfloat16_ops.cc widens bf16 storage around them).
// Plain single-threaded loops in a fixed order, so results are bitwise
// reproducible; SwiGLU uses exp_approx so its loops vectorize.
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.h"

namespace paraplan::kernels::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int rows,
                     int channels, float epsilon) {
  for (int r = 0; r < rows; r++) {
    const float* x = inp + static_cast<size_t>(r) * channels;
    float* y = out + static_cast<size_t>(r) * channels;
    float sum_squares = 0.0f;
    for (int c = 0; c < channels; c++) sum_squares += x[c] * x[c];
    const float row_rstd = 1.0f / std::sqrt(sum_squares / channels + epsilon);
    for (int c = 0; c < channels; c++) y[c] = x[c] * row_rstd * weight[c];
    rstd[r] = row_rstd;
  }
}

// With n = x * rstd and g = weight * dy: dx = rstd * (g - n * mean(g * n)),
// dweight = sum over rows of dy * n.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int rows, int channels) {
  for (int r = 0; r < rows; r++) {
    const size_t offset = static_cast<size_t>(r) * channels;
    const float* x = inp + offset;
    const float* dy = dout + offset;
    float* dx = dinp + offset;
    const float row_rstd = rstd[r];
    float g_norm_mean = 0.0f;
    for (int c = 0; c < channels; c++) g_norm_mean += weight[c] * dy[c] * (x[c] * row_rstd);
    g_norm_mean /= channels;
    for (int c = 0; c < channels; c++) {
      const float norm = x[c] * row_rstd;
      dweight[c] += dy[c] * norm;
      dx[c] += (weight[c] * dy[c] - norm * g_norm_mean) * row_rstd;
    }
  }
}

// silu(x) = x * sigmoid(x) = x / (1 + exp(-x)); exp_approx saturates at
// exp(88) for very negative x, so the quotient goes to -0, never inf / inf.
void swiglu_forward(float* out, const float* gate_up, int rows, int hidden) {
  for (int r = 0; r < rows; r++) {
    const float* gate = gate_up + static_cast<size_t>(r) * 2 * hidden;
    const float* up = gate + hidden;
    float* y = out + static_cast<size_t>(r) * hidden;
    for (int i = 0; i < hidden; i++) {
      const float x = gate[i];
      y[i] = x / (1.0f + exp_approx(-x)) * up[i];
    }
  }
}

namespace {

// d gate = dy * up * silu'(gate), silu'(x) = s (1 + x (1 - s)) with s =
// sigmoid(x) and 1 - s = e s (e = exp(-x)); d up = dy * silu(gate). Added to
// dgate_up, or (kAccumulate false) to 0 without reading it.
template <bool kAccumulate>
void swiglu_backward_rows(float* dgate_up, const float* gate_up, const float* dout, int rows,
                          int hidden) {
  for (int r = 0; r < rows; r++) {
    const size_t offset = static_cast<size_t>(r) * 2 * hidden;
    const float* gate = gate_up + offset;
    const float* up = gate + hidden;
    float* dgate = dgate_up + offset;
    float* dup = dgate + hidden;
    const float* dy = dout + static_cast<size_t>(r) * hidden;
    for (int i = 0; i < hidden; i++) {
      const float x = gate[i];
      const float e = exp_approx(-x);
      const float s = 1.0f / (1.0f + e);
      const float silu = x * s;
      // silu'(x) = s (1 + x (1 - s)): the same as s (1 + x e s), but x e
      // overflows to -inf for x below about -88 where this stays finite.
      dgate[i] = (kAccumulate ? dgate[i] : 0.0f) + dy[i] * up[i] * (s * (1.0f + x * (1.0f - s)));
      dup[i] = (kAccumulate ? dup[i] : 0.0f) + dy[i] * silu;
    }
  }
}

}  // namespace

void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int rows, int hidden,
                     GradientWrite write) {
  if (write == GradientWrite::kOverwrite) {
    swiglu_backward_rows<false>(dgate_up, gate_up, dout, rows, hidden);
  } else {
    swiglu_backward_rows<true>(dgate_up, gate_up, dout, rows, hidden);
  }
}

namespace {

// Rotates every query and key head of qkv [B, T, (H + 2 Hkv) D] by the
// position's angles; kInverse rotates by their negatives (the backward).
template <bool kInverse>
void rotate(float* qkv, const float* cos, const float* sin, int batch, int seq_len, int num_heads,
            int num_kv_heads, int head_dim) {
  if (head_dim % 2 != 0)
    throw std::invalid_argument("rope: head_dim " + std::to_string(head_dim) +
                                " is odd; the rotary embedding pairs dimension i with i + D/2");
  const int half = head_dim / 2;
  const int rotated_heads = num_heads + num_kv_heads;  // q heads then k heads, contiguous
  const size_t stride = static_cast<size_t>(num_heads + 2 * num_kv_heads) * head_dim;
  for (int b = 0; b < batch; b++) {
    for (int t = 0; t < seq_len; t++) {
      float* row = qkv + (static_cast<size_t>(b) * seq_len + t) * stride;
      const float* c = cos + static_cast<size_t>(t) * half;
      const float* s = sin + static_cast<size_t>(t) * half;
      for (int h = 0; h < rotated_heads; h++) {
        float* x1 = row + static_cast<size_t>(h) * head_dim;
        float* x2 = x1 + half;
        for (int i = 0; i < half; i++) {
          const float a = x1[i], b2 = x2[i];
          const float sine = kInverse ? -s[i] : s[i];
          x1[i] = a * c[i] - b2 * sine;
          x2[i] = b2 * c[i] + a * sine;
        }
      }
    }
  }
}

}  // namespace

void rope_forward(float* qkv, const float* cos, const float* sin, int batch, int seq_len,
                  int num_heads, int num_kv_heads, int head_dim) {
  rotate<false>(qkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim);
}

void rope_backward(float* dqkv, const float* cos, const float* sin, int batch, int seq_len,
                   int num_heads, int num_kv_heads, int head_dim) {
  rotate<true>(dqkv, cos, sin, batch, seq_len, num_heads, num_kv_heads, head_dim);
}

}  // namespace paraplan::kernels::cpu
