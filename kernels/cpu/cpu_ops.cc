// cpu_ops.cc: the CPU backend of the op set in kernels/ops.h.
//
// GEMMs (linear, and the products inside attention) go through OpenBLAS
// cblas_sgemm; the optimizer's passes (AdamW, the sum of squares) run on the
// backend's own threads (cpu_optimizer.cc); everything else is plain
// single-threaded C++ in the style of llm.c's train_gpt2.c, written so that
// GCC vectorizes the inner loops.
// Attention lives in cpu_attention.cc (by blocks, for context parallelism and
// document masks: cpu_attention_block.cc), cross-entropy in cpu_loss.cc, RMS
// norm, SwiGLU and the rotary embedding in cpu_llama_ops.cc, shared helpers in
// cpu_kernels.h.
// Shape letters used throughout (documented once here):
//   B = batch, T = sequence length, C = channels (d_model, or H * D),
//   H = attention heads, D = head dimension, V = vocabulary size.
// Every loop runs in a fixed order, so results are bitwise reproducible for
// the same inputs. sgemm is reproducible for a fixed shape and OpenBLAS thread
// count, but its bits can change with either (OpenBLAS 0.3.21 picks different
// paths by row count and thread count), so runs compared bitwise must use the
// same micro-batch shapes and OPENBLAS_NUM_THREADS.
// Forward ops overwrite their outputs; backward ops accumulate (+=), or
// overwrite the input gradients that GradientWrite::kOverwrite asks for (the
// sgemm with beta = 0, the elementwise loops from 0 instead of the old value,
// so the result is what accumulating into zeros gives).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/cpu/openblas_library.h"
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
  explicit CpuOps(int threads) : pool_(threads) {}
  Backend backend() const override { return Backend::kCpu; }
  DType storage_dtype() const override { return DType::kFloat32; }

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

  void copy_from_host_async(void* destination, const void* host_source, size_t bytes) override {
    copy(destination, host_source, bytes);
  }

  void copy(void* destination, const void* source, size_t bytes) override {
    // memcpy with a null pointer is undefined even for zero bytes.
    if (bytes == 0) return;
    std::memcpy(destination, source, bytes);
  }

  void zero_bytes(void* x, size_t bytes) override {
    if (bytes == 0) return;
    std::memset(x, 0, bytes);
  }

  void synchronize() override {}  // CPU ops complete before they return

  void convert_from_float(void* out, const float* in, size_t n) override {
    if (out != in) copy(out, in, n * sizeof(float));
  }
  void convert_to_float(float* out, const void* in, size_t n) override {
    if (out != in) copy(out, in, n * sizeof(float));
  }

  // ---- device -----------------------------------------------------------------

  std::string device_name() const override { return "cpu"; }
  std::string device_identity() const override { return ""; }
  void* allocate_host(size_t bytes) override { return allocate(bytes); }
  void deallocate_host(void* pointer) override { deallocate(pointer); }

  // ---- embeddings -------------------------------------------------------------

  void token_embedding_forward(void* out_storage, const int32_t* tokens, const void* wte_storage,
                               int num_tokens, int vocab_start, int vocab_local,
                               int channels) override {
    float* out = static_cast<float*>(out_storage);
    const float* wte = static_cast<const float*>(wte_storage);
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

  void token_embedding_backward(void* dwte_storage, const void* dout_storage, const int32_t* tokens,
                                int num_tokens, int vocab_start, int vocab_local,
                                int channels) override {
    const float* dout = static_cast<const float*>(dout_storage);
    const size_t C = channels;
    cpu::sum_token_gradients(
        static_cast<float*>(dwte_storage), std::max(vocab_local, 0), num_tokens, C,
        [&](int i) {
          const int64_t local = static_cast<int64_t>(tokens[i]) - vocab_start;
          return local >= 0 && local < vocab_local ? static_cast<int>(local) : -1;
        },
        [&](float* row, int i) {
          const float* dout_row = dout + static_cast<size_t>(i) * C;
          for (size_t c = 0; c < C; c++) row[c] += dout_row[c];
        },
        token_gradients_);
  }

  void position_embedding_forward(void* out_storage, const void* wpe_storage, int batch,
                                  int seq_len, int channels) override {
    float* out = static_cast<float*>(out_storage);
    const float* wpe = static_cast<const float*>(wpe_storage);
    for (int b = 0; b < batch; b++) {
      for (int t = 0; t < seq_len; t++) {
        float* out_row = out + (static_cast<size_t>(b) * seq_len + t) * channels;
        const float* wpe_row = wpe + static_cast<size_t>(t) * channels;
        for (int c = 0; c < channels; c++) out_row[c] += wpe_row[c];
      }
    }
  }

  void position_embedding_backward(void* dwpe_storage, const void* dout_storage, int batch,
                                   int seq_len, int channels) override {
    float* dwpe = static_cast<float*>(dwpe_storage);
    const float* dout = static_cast<const float*>(dout_storage);
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

  void layernorm_forward(void* out_storage, float* mean, float* rstd, const void* inp_storage,
                         const void* weight_storage, const void* bias_storage, int rows,
                         int channels, float epsilon) override {
    float* out = static_cast<float*>(out_storage);
    const float* inp = static_cast<const float*>(inp_storage);
    const float* weight = static_cast<const float*>(weight_storage);
    const float* bias = static_cast<const float*>(bias_storage);
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

  void layernorm_backward(void* dinp_storage, void* dweight_storage, void* dbias_storage,
                          const void* dout_storage, const void* inp_storage,
                          const void* weight_storage, const float* mean, const float* rstd,
                          int rows, int channels) override {
    float* dinp = static_cast<float*>(dinp_storage);
    float* dweight = static_cast<float*>(dweight_storage);
    float* dbias = static_cast<float*>(dbias_storage);
    const float* dout = static_cast<const float*>(dout_storage);
    const float* inp = static_cast<const float*>(inp_storage);
    const float* weight = static_cast<const float*>(weight_storage);
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

  void linear_forward(void* out_storage, const void* inp_storage, const void* weight_storage,
                      const void* bias_storage, int rows, int in_features,
                      int out_features) override {
    float* out = static_cast<float*>(out_storage);
    const float* inp = static_cast<const float*>(inp_storage);
    const float* weight = static_cast<const float*>(weight_storage);
    const float* bias = static_cast<const float*>(bias_storage);
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
    cpu::openblas_library().cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out_features,
                                        in_features, 1.0f, inp, in_features, weight, in_features,
                                        1.0f, out, out_features);
  }

  void linear_backward(void* dinp_storage, void* dweight_storage, void* dbias_storage,
                       const void* dout_storage, const void* inp_storage,
                       const void* weight_storage, int rows, int in_features, int out_features,
                       GradientWrite dinp_write) override {
    float* dinp = static_cast<float*>(dinp_storage);
    float* dweight = static_cast<float*>(dweight_storage);
    float* dbias = static_cast<float*>(dbias_storage);
    const float* dout = static_cast<const float*>(dout_storage);
    const float* inp = static_cast<const float*>(inp_storage);
    const float* weight = static_cast<const float*>(weight_storage);
    const bool overwrite = dinp_write == GradientWrite::kOverwrite;
    if (dinp != nullptr && overwrite && rows > 0 && in_features > 0 && out_features <= 0) {
      // A sum over no products: overwriting writes its zeros.
      std::memset(dinp, 0, static_cast<size_t>(rows) * in_features * sizeof(float));
    }
    if (rows <= 0 || out_features <= 0) return;
    if (dinp != nullptr && in_features > 0) {
      // dinp[rows, in_features] (+)= dout[rows, out_features] @ weight[out_features, in_features]
      cpu::openblas_library().cblas_sgemm(
          CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in_features, out_features, 1.0f, dout,
          out_features, weight, in_features, overwrite ? 0.0f : 1.0f, dinp, in_features);
    }
    if (dweight != nullptr && in_features > 0) {
      // dweight[out_features, in_features] += dout^T @ inp[rows, in_features]
      cpu::openblas_library().cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_features,
                                          in_features, rows, 1.0f, dout, out_features, inp,
                                          in_features, 1.0f, dweight, in_features);
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

  // GPT-2's GELU is 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). With
  // 1 + tanh(u) = 2 / (1 + exp(-2u)) it is x * sigmoid(2u): one exp_approx, which
  // vectorizes, instead of a scalar tanhf call, and no cancellation in 1 + tanh
  // for negative u. exp(-2u) saturating for very negative x gives -0 or a tiny
  // value, as tanh = -1 does.
  void gelu_forward(void* out_storage, const void* inp_storage, size_t n) override {
    float* out = static_cast<float*>(out_storage);
    const float* inp = static_cast<const float*>(inp_storage);
    for (size_t i = 0; i < n; i++) {
      const float x = inp[i];
      const float cube = kGeluCubic * x * x * x;
      const float u = kGeluScale * (x + cube);
      out[i] = x / (1.0f + cpu::exp_approx(-2.0f * u));
    }
  }

  void gelu_backward(void* dinp_storage, const void* inp_storage, const void* dout_storage,
                     size_t n, GradientWrite write) override {
    float* dinp = static_cast<float*>(dinp_storage);
    const float* inp = static_cast<const float*>(inp_storage);
    const float* dout = static_cast<const float*>(dout_storage);
    if (write == GradientWrite::kOverwrite) {
      gelu_backward_loop<false>(dinp, inp, dout, n);
    } else {
      gelu_backward_loop<true>(dinp, inp, dout, n);
    }
  }

  // dinp (+)= gelu'(inp) * dout: one loop per write mode, each vectorized.
  template <bool kAccumulate>
  static void gelu_backward_loop(float* dinp, const float* inp, const float* dout, size_t n) {
    for (size_t i = 0; i < n; i++) {
      const float x = inp[i];
      const float cube = kGeluCubic * x * x * x;
      const float u = kGeluScale * (x + cube);
      const float e = cpu::exp_approx(-2.0f * u);
      const float s = 1.0f / (1.0f + e);  // (1 + tanh u) / 2
      // sech^2 u = 1 - tanh^2 u = 4 s (1 - s), and 1 - s = e s exactly in real
      // arithmetic, which avoids cancellation as s -> 1.
      const float half_sech_squared = 2.0f * e * s * s;
      const float local_grad =
          s + x * half_sech_squared * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
      // 0 + g when overwriting: bitwise what accumulating into zeros gives.
      dinp[i] = (kAccumulate ? dinp[i] : 0.0f) + local_grad * dout[i];
    }
  }

  void residual_forward(void* out_storage, const void* a_storage, const void* b_storage,
                        size_t n) override {
    float* out = static_cast<float*>(out_storage);
    const float* a = static_cast<const float*>(a_storage);
    const float* b = static_cast<const float*>(b_storage);
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  }

  void accumulate(void* dx_storage, const void* dout_storage, size_t n) override {
    float* dx = static_cast<float*>(dx_storage);
    const float* dout = static_cast<const float*>(dout_storage);
    for (size_t i = 0; i < n; i++) dx[i] += dout[i];
  }
  void accumulate_into_float(float* x, const void* y, size_t n) override { accumulate(x, y, n); }
  void accumulate_float32(float* x, const float* y, size_t n) override { accumulate(x, y, n); }

  void scale(void* x_storage, float factor, size_t n) override {
    float* x = static_cast<float*>(x_storage);
    for (size_t i = 0; i < n; i++) x[i] *= factor;
  }

  // ---- Llama's ops (cpu_llama_ops.cc) -------------------------------------------------------

  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int rows,
                       int channels, float epsilon) override {
    cpu::rmsnorm_forward(static_cast<float*>(out), rstd, static_cast<const float*>(inp),
                         static_cast<const float*>(weight), rows, channels, epsilon);
  }
  void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp,
                        const void* weight, const float* rstd, int rows, int channels) override {
    cpu::rmsnorm_backward(static_cast<float*>(dinp), static_cast<float*>(dweight),
                          static_cast<const float*>(dout), static_cast<const float*>(inp),
                          static_cast<const float*>(weight), rstd, rows, channels);
  }
  void swiglu_forward(void* out, const void* gate_up, int rows, int hidden) override {
    cpu::swiglu_forward(static_cast<float*>(out), static_cast<const float*>(gate_up), rows, hidden);
  }
  void swiglu_backward(void* dgate_up, const void* gate_up, const void* dout, int rows, int hidden,
                       GradientWrite write) override {
    cpu::swiglu_backward(static_cast<float*>(dgate_up), static_cast<const float*>(gate_up),
                         static_cast<const float*>(dout), rows, hidden, write);
  }
  void rope_forward(void* qkv, const float* cos, const float* sin, int batch, int seq_len,
                    int num_heads, int num_kv_heads, int head_dim) override {
    cpu::rope_forward(static_cast<float*>(qkv), cos, sin, batch, seq_len, num_heads, num_kv_heads,
                      head_dim);
  }
  void rope_backward(void* dqkv, const float* cos, const float* sin, int batch, int seq_len,
                     int num_heads, int num_kv_heads, int head_dim) override {
    cpu::rope_backward(static_cast<float*>(dqkv), cos, sin, batch, seq_len, num_heads, num_kv_heads,
                       head_dim);
  }

  // ---- attention (cpu_attention.cc) ---------------------------------------------------------

  void attention_forward(void* out_storage, float* logsumexp, const void* qkv_storage, int batch,
                         int seq_len, int num_heads, int num_kv_heads, int head_dim) override {
    float* out = static_cast<float*>(out_storage);
    const float* qkv = static_cast<const float*>(qkv_storage);
    cpu::attention_forward(out, logsumexp, qkv, batch, seq_len, num_heads, num_kv_heads, head_dim);
  }

  void attention_backward(void* dqkv_storage, float* scratch, const void* dout_storage,
                          const void* qkv_storage, const void* out_storage, const float* logsumexp,
                          int batch, int seq_len, int num_heads, int num_kv_heads, int head_dim,
                          GradientWrite write) override {
    float* dqkv = static_cast<float*>(dqkv_storage);
    const float* dout = static_cast<const float*>(dout_storage);
    const float* qkv = static_cast<const float*>(qkv_storage);
    const float* out = static_cast<const float*>(out_storage);
    cpu::attention_backward(dqkv, scratch, dout, qkv, out, logsumexp, batch, seq_len, num_heads,
                            num_kv_heads, head_dim, write);
  }

  // ---- attention by blocks (cpu_attention_block.cc) ------------------------------------------

  void attention_block_forward(float* out_accumulator, float* logsumexp, const void* q,
                               const void* kv, const int32_t* q_positions,
                               const int32_t* kv_positions, const int32_t* documents,
                               const AttentionBlockShape& shape, bool first) override {
    cpu::attention_block_forward(out_accumulator, logsumexp, static_cast<const float*>(q),
                                 static_cast<const float*>(kv), q_positions, kv_positions,
                                 documents, shape, first);
  }

  void attention_block_backward(float* dq_accumulator, float* dkv_accumulator, const void* dout,
                                const void* out, const float* logsumexp, const void* q,
                                const void* kv, const int32_t* q_positions,
                                const int32_t* kv_positions, const int32_t* documents,
                                const AttentionBlockShape& shape) override {
    cpu::attention_block_backward(dq_accumulator, dkv_accumulator, static_cast<const float*>(dout),
                                  static_cast<const float*>(out), logsumexp,
                                  static_cast<const float*>(q), static_cast<const float*>(kv),
                                  q_positions, kv_positions, documents, shape);
  }

  void copy_rows(void* destination, size_t destination_stride, const void* source,
                 size_t source_stride, size_t rows, size_t row_bytes) override {
    if (row_bytes == 0) return;
    for (size_t r = 0; r < rows; r++) {
      std::memcpy(static_cast<char*>(destination) + r * destination_stride,
                  static_cast<const char*>(source) + r * source_stride, row_bytes);
    }
  }

  // ---- loss (cpu_loss.cc) -------------------------------------------------------------------

  void softmax_cross_entropy(float* losses, void* dlogits_storage, const void* logits_storage,
                             const int32_t* targets, int rows, int vocab, float loss_scale,
                             double* loss_sum) override {
    float* dlogits = static_cast<float*>(dlogits_storage);
    const float* logits = static_cast<const float*>(logits_storage);
    cpu::softmax_cross_entropy(losses, dlogits, logits, targets, rows, vocab, loss_scale);
    if (loss_sum != nullptr) accumulate_sum(loss_sum, losses, static_cast<size_t>(rows));
  }

  void cross_entropy_shard_stats(float* row_max, float* target_logit, const void* logits_storage,
                                 const int32_t* targets, int rows, int vocab_local,
                                 int vocab_start) override {
    const float* logits = static_cast<const float*>(logits_storage);
    cpu::cross_entropy_shard_stats(row_max, target_logit, logits, targets, rows, vocab_local,
                                   vocab_start);
  }

  void cross_entropy_shard_exp_sums(float* exp_sum, const void* logits_storage,
                                    const float* row_max, int rows, int vocab_local) override {
    const float* logits = static_cast<const float*>(logits_storage);
    cpu::cross_entropy_shard_exp_sums(exp_sum, logits, row_max, rows, vocab_local);
  }

  void cross_entropy_shard_finish(float* losses, void* dlogits_storage, const void* logits_storage,
                                  const int32_t* targets, const float* row_max,
                                  const float* exp_sum, const float* target_logit, int rows,
                                  int vocab_local, int vocab_start, float loss_scale,
                                  double* loss_sum) override {
    float* dlogits = static_cast<float*>(dlogits_storage);
    const float* logits = static_cast<const float*>(logits_storage);
    cpu::cross_entropy_shard_finish(losses, dlogits, logits, targets, row_max, exp_sum,
                                    target_logit, rows, vocab_local, vocab_start, loss_scale);
    if (loss_sum != nullptr) accumulate_sum(loss_sum, losses, static_cast<size_t>(rows));
  }

  // ---- optimizer ---------------------------------------------------------------------------

  void adamw(float* master, void* params, const void* grads, float* first_moment,
             float* second_moment, size_t n, const AdamWStep& hyperparameters) override {
    cpu::adamw(pool_, DType::kFloat32, DType::kFloat32, master, params, grads, first_moment,
               second_moment, n, hyperparameters);
  }
  void adamw_float_gradients(float* master, void* params, const float* grads, float* first_moment,
                             float* second_moment, size_t n,
                             const AdamWStep& hyperparameters) override {
    adamw(master, params, grads, first_moment, second_moment, n, hyperparameters);
  }
  void adamw_runs(const std::vector<AdamWRun>& runs, bool /*float_gradients: fp32 either way*/,
                  const AdamWStep& hyperparameters, const GradientClip& clip) override {
    cpu::adamw_runs(pool_, DType::kFloat32, DType::kFloat32, runs, hyperparameters, clip);
  }

  // The host is the device: accumulating is adding at once.
  void accumulate_sum_of_squares(double* accumulator, const void* x, size_t n) override {
    *accumulator += sum_of_squares(x, n);
  }
  void accumulate_float_sum_of_squares(double* accumulator, const float* x, size_t n) override {
    accumulate_sum_of_squares(accumulator, x, n);
  }
  void accumulate_sum(double* accumulator, const float* x, size_t n) override {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    *accumulator += sum;
  }

  double sum_of_squares(const void* x, size_t n) override {
    return cpu::sum_of_squares(pool_, block_sums_, DType::kFloat32, x, n);
  }

 private:
  cpu::CpuThreadPool pool_;
  std::vector<double> block_sums_;  // sum_of_squares scratch
  cpu::TokenGradientScratch token_gradients_;
};

std::unique_ptr<Ops> cpu::make_float32_ops(int threads) {
  return std::make_unique<CpuOps>(threads);
}

std::unique_ptr<Ops> make_cpu_ops(int num_threads, DType storage) {
  if (num_threads < 0) {
    throw std::invalid_argument(
        "make_cpu_ops: num_threads must be >= 0 (0 keeps OpenBLAS's "
        "default), got " +
        std::to_string(num_threads));
  }
  // A process-wide OpenBLAS setting, not one per Ops object.
  if (num_threads > 0) cpu::openblas_library().openblas_set_num_threads(num_threads);
  // The optimizer's passes use as many threads as the GEMMs.
  const int threads = num_threads > 0
                          ? num_threads
                          : std::max(1, cpu::openblas_library().openblas_get_num_threads());
  if (storage == DType::kBFloat16) return cpu::make_bfloat16_ops(threads);
  return std::make_unique<CpuOps>(threads);
}

}  // namespace paraplan::kernels
