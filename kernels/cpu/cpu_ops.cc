// cpu_ops.cc: the CPU backend of the op set in kernels/ops.h.
//
// GEMMs (linear forward/backward) go through OpenBLAS cblas_sgemm; everything
// else is plain single-threaded C++ in the style of llm.c's train_gpt2.c.
// Shape letters used throughout (documented once here):
//   B = batch, T = sequence length, C = channels (d_model, or H * D),
//   H = attention heads, D = head dimension, V = vocabulary size.
// Every loop runs in a fixed order, so results are bitwise reproducible for
// the same inputs. sgemm is reproducible for a fixed shape and OpenBLAS thread
// count, but its bits can change with either (OpenBLAS 0.3.21 picks different
// paths by row count and thread count), so runs compared bitwise must use the
// same micro-batch shapes and OPENBLAS_NUM_THREADS.
// Forward ops overwrite their outputs; backward ops accumulate (+=).
#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "kernels/ops.h"

namespace paraplan::kernels {

namespace {

constexpr size_t kAlignment = 64;  // a cache line, and enough for AVX-512 loads

// sqrt(2 / pi), the constant of GPT-2's tanh approximation of GELU.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

}  // namespace

class CpuOps final : public Ops {
 public:
  Backend backend() const override { return Backend::kCpu; }

  // ---- memory ---------------------------------------------------------------

  void* allocate(size_t bytes) override {
    // std::aligned_alloc needs the size to be a multiple of the alignment; a
    // zero-byte request still gets a unique, freeable pointer.
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) rounded = kAlignment;
    if (rounded < bytes) throw std::bad_alloc();  // overflow while rounding
    void* pointer = std::aligned_alloc(kAlignment, rounded);
    if (pointer == nullptr) throw std::bad_alloc();
    return pointer;
  }

  void deallocate(void* pointer) override { std::free(pointer); }

  void copy_to_host(void* host_destination, const void* source, size_t bytes) override {
    copy(host_destination, source, bytes);
  }

  void copy_from_host(void* destination, const void* host_source, size_t bytes) override {
    copy(destination, host_source, bytes);
  }

  void copy(void* destination, const void* source, size_t bytes) override {
    // memcpy with a null pointer is undefined even for zero bytes.
    if (bytes == 0) return;
    std::memcpy(destination, source, bytes);
  }

  void fill_zero(float* x, size_t n) override {
    if (n == 0) return;
    std::memset(x, 0, n * sizeof(float));
  }

  void synchronize() override {}  // CPU ops complete before they return

  // ---- embeddings -------------------------------------------------------------

  void token_embedding_forward(float* out, const int32_t* tokens, const float* wte, int num_tokens,
                               int vocab_start, int vocab_local, int channels) override {
    for (int i = 0; i < num_tokens; i++) {
      float* out_row = out + static_cast<size_t>(i) * channels;
      // 64-bit subtraction: token - vocab_start cannot overflow.
      int64_t local = static_cast<int64_t>(tokens[i]) - vocab_start;
      if (local >= 0 && local < vocab_local) {
        std::memcpy(out_row, wte + static_cast<size_t>(local) * channels,
                    static_cast<size_t>(channels) * sizeof(float));
      } else {
        // Another tensor-parallel rank owns this token's row.
        std::memset(out_row, 0, static_cast<size_t>(channels) * sizeof(float));
      }
    }
  }

  void token_embedding_backward(float* dwte, const float* dout, const int32_t* tokens,
                                int num_tokens, int vocab_start, int vocab_local,
                                int channels) override {
    for (int i = 0; i < num_tokens; i++) {
      int64_t local = static_cast<int64_t>(tokens[i]) - vocab_start;
      if (local < 0 || local >= vocab_local) continue;
      float* dwte_row = dwte + static_cast<size_t>(local) * channels;
      const float* dout_row = dout + static_cast<size_t>(i) * channels;
      for (int c = 0; c < channels; c++) dwte_row[c] += dout_row[c];
    }
  }

  void position_embedding_forward(float* out, const float* wpe, int batch, int seq_len,
                                  int channels) override {
    for (int b = 0; b < batch; b++) {
      for (int t = 0; t < seq_len; t++) {
        float* out_row = out + (static_cast<size_t>(b) * seq_len + t) * channels;
        const float* wpe_row = wpe + static_cast<size_t>(t) * channels;
        for (int c = 0; c < channels; c++) out_row[c] += wpe_row[c];
      }
    }
  }

  void position_embedding_backward(float* dwpe, const float* dout, int batch, int seq_len,
                                   int channels) override {
    // b outermost: each dwpe element sums the batch in order b = 0, 1, ...
    for (int b = 0; b < batch; b++) {
      for (int t = 0; t < seq_len; t++) {
        float* dwpe_row = dwpe + static_cast<size_t>(t) * channels;
        const float* dout_row = dout + (static_cast<size_t>(b) * seq_len + t) * channels;
        for (int c = 0; c < channels; c++) dwpe_row[c] += dout_row[c];
      }
    }
  }

  // ---- layer norm ---------------------------------------------------------------

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int rows, int channels,
                         float epsilon) override {
    for (int r = 0; r < rows; r++) {
      const float* x = inp + static_cast<size_t>(r) * channels;
      float* y = out + static_cast<size_t>(r) * channels;
      // Two passes (mean, then variance of the centred values) avoid the
      // cancellation of E[x^2] - E[x]^2.
      float sum = 0.0f;
      for (int c = 0; c < channels; c++) sum += x[c];
      float row_mean = sum / channels;
      float sum_squares = 0.0f;
      for (int c = 0; c < channels; c++) {
        float centred = x[c] - row_mean;
        sum_squares += centred * centred;
      }
      float row_rstd = 1.0f / std::sqrt(sum_squares / channels + epsilon);
      for (int c = 0; c < channels; c++) {
        y[c] = (x[c] - row_mean) * row_rstd * weight[c] + bias[c];
      }
      mean[r] = row_mean;
      rstd[r] = row_rstd;
    }
  }

  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int rows, int channels) override {
    for (int r = 0; r < rows; r++) {
      const float* x = inp + static_cast<size_t>(r) * channels;
      const float* dy = dout + static_cast<size_t>(r) * channels;
      float* dx = dinp + static_cast<size_t>(r) * channels;
      float row_mean = mean[r];
      float row_rstd = rstd[r];
      // The two reductions the input gradient needs: mean(dnorm) and
      // mean(dnorm * norm), where norm = (x - mean) * rstd, dnorm = weight * dy.
      float dnorm_mean = 0.0f;
      float dnorm_norm_mean = 0.0f;
      for (int c = 0; c < channels; c++) {
        float norm = (x[c] - row_mean) * row_rstd;
        float dnorm = weight[c] * dy[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= channels;
      dnorm_norm_mean /= channels;
      for (int c = 0; c < channels; c++) {
        float norm = (x[c] - row_mean) * row_rstd;
        float dnorm = weight[c] * dy[c];
        dbias[c] += dy[c];
        dweight[c] += norm * dy[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * row_rstd;
      }
    }
  }

  // ---- linear -------------------------------------------------------------------------

  void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int rows, int in_features, int out_features) override {
    if (rows <= 0 || out_features <= 0) return;
    // Start from the bias (or zero) and let sgemm add inp @ weight^T with beta = 1.
    for (int r = 0; r < rows; r++) {
      float* out_row = out + static_cast<size_t>(r) * out_features;
      if (bias != nullptr) {
        std::memcpy(out_row, bias, static_cast<size_t>(out_features) * sizeof(float));
      } else {
        std::memset(out_row, 0, static_cast<size_t>(out_features) * sizeof(float));
      }
    }
    if (in_features <= 0) return;
    // out[rows, out_features] += inp[rows, in_features] @ weight[out_features, in_features]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_features, in_features, 1.0f, inp,
                in_features, weight, in_features, 1.0f, out, out_features);
  }

  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int rows, int in_features,
                       int out_features) override {
    if (rows <= 0 || out_features <= 0) return;
    if (dinp != nullptr && in_features > 0) {
      // dinp[rows, in_features] += dout[rows, out_features] @ weight[out_features, in_features]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in_features, out_features, 1.0f,
                  dout, out_features, weight, in_features, 1.0f, dinp, in_features);
    }
    if (dweight != nullptr && in_features > 0) {
      // dweight[out_features, in_features] += dout^T @ inp[rows, in_features]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_features, in_features, rows, 1.0f,
                  dout, out_features, inp, in_features, 1.0f, dweight, in_features);
    }
    if (dbias != nullptr) {
      // Column sums, rows in order; the inner loop is contiguous.
      for (int r = 0; r < rows; r++) {
        const float* dout_row = dout + static_cast<size_t>(r) * out_features;
        for (int o = 0; o < out_features; o++) dbias[o] += dout_row[o];
      }
    }
  }

  // ---- elementwise -----------------------------------------------------------------------

  void gelu_forward(float* out, const float* inp, size_t n) override {
    for (size_t i = 0; i < n; i++) {
      float x = inp[i];
      float cube = kGeluCubic * x * x * x;
      out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + cube)));
    }
  }

  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    for (size_t i = 0; i < n; i++) {
      float x = inp[i];
      float cube = kGeluCubic * x * x * x;
      float tanh_arg = kGeluScale * (x + cube);
      float tanh_out = std::tanh(tanh_arg);
      float sech_squared = 1.0f - tanh_out * tanh_out;
      float local_grad = 0.5f * (1.0f + tanh_out) +
                         x * 0.5f * sech_squared * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
      dinp[i] += local_grad * dout[i];
    }
  }

  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  }

  void accumulate(float* dx, const float* dout, size_t n) override {
    for (size_t i = 0; i < n; i++) dx[i] += dout[i];
  }

  void scale(float* x, float factor, size_t n) override {
    for (size_t i = 0; i < n; i++) x[i] *= factor;
  }

  // ---- attention -------------------------------------------------------------------------
  // qkv row (b, t) holds C3 = 3 * C floats: query heads, key heads, value heads,
  // each head D contiguous floats, C = H * D.

  void attention_forward(float* out, float* att, const float* qkv, int batch, int seq_len,
                         int num_heads, int head_dim) override {
    const size_t C = static_cast<size_t>(num_heads) * head_dim;
    const size_t C3 = 3 * C;
    const size_t T = seq_len;
    const float attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    for (int b = 0; b < batch; b++) {
      for (int h = 0; h < num_heads; h++) {
        const float* qkv_bh = qkv + b * T * C3 + static_cast<size_t>(h) * head_dim;
        float* att_bh = att + (static_cast<size_t>(b) * num_heads + h) * T * T;
        for (size_t t = 0; t < T; t++) {
          const float* query = qkv_bh + t * C3;
          float* att_row = att_bh + t * T;
          // Scaled scores against keys 0..t (causal), tracking the max for a
          // numerically stable softmax.
          float max_score = -INFINITY;
          for (size_t t2 = 0; t2 <= t; t2++) {
            const float* key = qkv_bh + t2 * C3 + C;
            float dot = 0.0f;
            for (int d = 0; d < head_dim; d++) dot += query[d] * key[d];
            dot *= attention_scale;
            att_row[t2] = dot;
            if (dot > max_score) max_score = dot;
          }
          float exp_sum = 0.0f;
          for (size_t t2 = 0; t2 <= t; t2++) {
            float e = std::exp(att_row[t2] - max_score);
            att_row[t2] = e;
            exp_sum += e;
          }
          float exp_sum_inverse = 1.0f / exp_sum;
          for (size_t t2 = 0; t2 <= t; t2++) att_row[t2] *= exp_sum_inverse;
          for (size_t t2 = t + 1; t2 < T; t2++) att_row[t2] = 0.0f;  // masked
          // out = att_row @ values
          float* out_bth = out + (b * T + t) * C + static_cast<size_t>(h) * head_dim;
          for (int d = 0; d < head_dim; d++) out_bth[d] = 0.0f;
          for (size_t t2 = 0; t2 <= t; t2++) {
            const float* value = qkv_bh + t2 * C3 + 2 * C;
            float a = att_row[t2];
            for (int d = 0; d < head_dim; d++) out_bth[d] += a * value[d];
          }
        }
      }
    }
  }

  void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                          const float* att, int batch, int seq_len, int num_heads,
                          int head_dim) override {
    const size_t C = static_cast<size_t>(num_heads) * head_dim;
    const size_t C3 = 3 * C;
    const size_t T = seq_len;
    const float attention_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    for (int b = 0; b < batch; b++) {
      for (int h = 0; h < num_heads; h++) {
        const size_t head_offset = static_cast<size_t>(h) * head_dim;
        const float* qkv_bh = qkv + b * T * C3 + head_offset;
        float* dqkv_bh = dqkv + b * T * C3 + head_offset;
        const float* att_bh = att + (static_cast<size_t>(b) * num_heads + h) * T * T;
        float* scratch_bh = scratch + (static_cast<size_t>(b) * num_heads + h) * T * T;
        for (size_t t = 0; t < T; t++) {
          const float* att_row = att_bh + t * T;
          const float* dout_bth = dout + (b * T + t) * C + head_offset;
          // The scratch row first holds datt (gradient of the probabilities),
          // then, in place, dpreatt (gradient of the scaled scores).
          float* datt_row = scratch_bh + t * T;
          // Backward of out = att_row @ values.
          for (size_t t2 = 0; t2 <= t; t2++) {
            const float* value = qkv_bh + t2 * C3 + 2 * C;
            float* dvalue = dqkv_bh + t2 * C3 + 2 * C;
            float a = att_row[t2];
            float datt = 0.0f;
            for (int d = 0; d < head_dim; d++) {
              datt += value[d] * dout_bth[d];
              dvalue[d] += a * dout_bth[d];
            }
            datt_row[t2] = datt;
          }
          // Softmax backward: dpreatt = att * (datt - sum(att * datt)); this is
          // llm.c's O(T^2) double loop written in O(T).
          float weighted_datt = 0.0f;
          for (size_t t2 = 0; t2 <= t; t2++) weighted_datt += att_row[t2] * datt_row[t2];
          float* dpreatt_row = datt_row;
          for (size_t t2 = 0; t2 <= t; t2++) {
            dpreatt_row[t2] = att_row[t2] * (datt_row[t2] - weighted_datt);
          }
          for (size_t t2 = t + 1; t2 < T; t2++) dpreatt_row[t2] = 0.0f;
          // Backward of the scaled scores query . key * attention_scale.
          const float* query = qkv_bh + t * C3;
          float* dquery = dqkv_bh + t * C3;
          for (size_t t2 = 0; t2 <= t; t2++) {
            const float* key = qkv_bh + t2 * C3 + C;
            float* dkey = dqkv_bh + t2 * C3 + C;
            float g = dpreatt_row[t2] * attention_scale;
            for (int d = 0; d < head_dim; d++) {
              dquery[d] += key[d] * g;
              dkey[d] += query[d] * g;
            }
          }
        }
      }
    }
  }

  // ---- loss ------------------------------------------------------------------------------

  void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                             const int32_t* targets, int rows, int vocab,
                             float loss_scale) override {
    for (int r = 0; r < rows; r++) {
      const float* logit_row = logits + static_cast<size_t>(r) * vocab;
      int target = targets[r];
      if (target < 0 || target >= vocab) {
        throw std::out_of_range("softmax_cross_entropy: target " + std::to_string(target) +
                                " in row " + std::to_string(r) + " is outside the vocabulary [0, " +
                                std::to_string(vocab) + ")");
      }
      float max_logit = -INFINITY;
      for (int v = 0; v < vocab; v++) {
        if (logit_row[v] > max_logit) max_logit = logit_row[v];
      }
      // Read the target logit before dlogits (which may alias logits) is written.
      float target_shifted = logit_row[target] - max_logit;
      float exp_sum = 0.0f;
      if (dlogits == nullptr) {
        for (int v = 0; v < vocab; v++) exp_sum += std::exp(logit_row[v] - max_logit);
      } else {
        // Store the unnormalised probabilities in dlogits so each exp is computed
        // once; with aliasing, each element is read before it is overwritten.
        float* dlogit_row = dlogits + static_cast<size_t>(r) * vocab;
        for (int v = 0; v < vocab; v++) {
          float e = std::exp(logit_row[v] - max_logit);
          dlogit_row[v] = e;
          exp_sum += e;
        }
        float probability_scale = loss_scale / exp_sum;
        for (int v = 0; v < vocab; v++) dlogit_row[v] *= probability_scale;
        dlogit_row[target] -= loss_scale;
      }
      // -log(exp(shifted target) / exp_sum), without forming the probability,
      // so a tiny probability does not underflow to log(0).
      losses[r] = std::log(exp_sum) - target_shifted;
    }
  }

  // ---- optimizer ---------------------------------------------------------------------------

  void adamw(float* params, const float* grads, float* first_moment, float* second_moment, size_t n,
             float learning_rate, float beta1, float beta2, float epsilon, float weight_decay,
             int step) override {
    const float beta1_correction = static_cast<float>(1.0 - std::pow(double{beta1}, step));
    const float beta2_correction = static_cast<float>(1.0 - std::pow(double{beta2}, step));
    const float decay_factor = 1.0f - learning_rate * weight_decay;
    for (size_t i = 0; i < n; i++) {
      float grad = grads[i];
      float m = beta1 * first_moment[i] + (1.0f - beta1) * grad;
      float v = beta2 * second_moment[i] + (1.0f - beta2) * grad * grad;
      first_moment[i] = m;
      second_moment[i] = v;
      float m_hat = m / beta1_correction;
      float v_hat = v / beta2_correction;
      // Decoupled weight decay (PyTorch AdamW): shrink first, then the Adam step.
      float param = params[i] * decay_factor;
      params[i] = param - learning_rate * m_hat / (std::sqrt(v_hat) + epsilon);
    }
  }

  double sum_of_squares(const float* x, size_t n) override {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
      double value = x[i];
      sum += value * value;
    }
    return sum;
  }
};

std::unique_ptr<Ops> make_cpu_ops() {
  return std::make_unique<CpuOps>();
}

}  // namespace paraplan::kernels
