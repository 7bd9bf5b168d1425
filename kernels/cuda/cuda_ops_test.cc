// cuda_ops_test.cc: the CUDA backend (kernels/cuda) against the CPU reference
// backend, op by op: the same random inputs (fixed seeds) go through both and
// the outputs are compared within the tolerances below (bitwise where both
// backends add in the same order), in TF32 (the default) and strict fp32
// GEMM modes; plus determinism (two runs, bitwise) for the ops whose CUDA
// versions reduce across threads. Every test skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

// Tolerances: max |cuda - cpu| over a tensor, divided by max |cpu| (so a
// near-zero element with cancellation does not dominate).
// Strict fp32: the backends differ in summation order (trees vs sequential
// loops), in exp (CUDA expf vs the CPU's exp_approx, each within 2 ulp) and in
// FMA contraction: a few ulp per op, ~1e-6 relative; 2e-5 leaves room for
// sums over a few hundred terms.
constexpr double kStrictTolerance = 2e-5;
// TF32 GEMMs round their inputs to 10 mantissa bits (2^-11 = 4.9e-4 relative,
// 2^-10 where truncated), so each product carries ~1e-3 relative error;
// random-sign sums average it, leaving ~1e-3 relative to the largest output.
constexpr double kTf32Tolerance = 5e-3;
// sum_of_squares accumulates in double on both; only the order differs.
constexpr double kDoubleTolerance = 1e-10;

// The CUDA backend with TF32 GEMMs (the default) or strict fp32
// (PARAPLAN_CUDA_TF32=0); the environment is restored afterwards.
std::unique_ptr<Ops> make_cuda(bool tf32) {
  const char* saved = std::getenv("PARAPLAN_CUDA_TF32");
  const std::string saved_value = saved != nullptr ? saved : "";
  setenv("PARAPLAN_CUDA_TF32", tf32 ? "1" : "0", 1);
  std::unique_ptr<Ops> ops = make_cuda_ops(0);
  if (saved != nullptr) {
    setenv("PARAPLAN_CUDA_TF32", saved_value.c_str(), 1);
  } else {
    unsetenv("PARAPLAN_CUDA_TF32");
  }
  return ops;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-scale, scale);
  std::vector<float> values(n);
  for (float& value : values) value = distribution(generator) + shift;
  return values;
}

std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t low, int32_t high) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> distribution(low, high - 1);
  std::vector<int32_t> values(n);
  for (int32_t& value : values) value = distribution(generator);
  return values;
}

// Backend buffers for one test run: uploads, downloads, and frees at the end.
class Buffers {
 public:
  explicit Buffers(Ops& ops) : ops_(ops) {}
  ~Buffers() {
    for (void* pointer : owned_) ops_.deallocate(pointer);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  template <typename T>
  T* upload(const std::vector<T>& host, bool unaligned = false) {
    // unaligned: one element past the allocation's start, so only 4-byte
    // aligned; exercises the scalar (non-float4) kernel paths.
    const size_t extra = unaligned ? 1 : 0;
    T* pointer = static_cast<T*>(allocate((host.size() + extra) * sizeof(T))) + extra;
    ops_.copy_from_host(pointer, host.data(), host.size() * sizeof(T));
    return pointer;
  }
  template <typename T>
  std::vector<T> download(const T* pointer, size_t n) {
    std::vector<T> host(n);
    ops_.copy_to_host(host.data(), pointer, n * sizeof(T));
    return host;
  }
  void* allocate(size_t bytes) {
    void* pointer = ops_.allocate(bytes);
    owned_.push_back(pointer);
    return pointer;
  }

 private:
  Ops& ops_;
  std::vector<void*> owned_;
};

using Tensors = std::vector<std::vector<float>>;

void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                  double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 0.0;
  for (float value : expected) scale = std::max(scale, std::fabs(double{value}));
  double worst = 0.0;
  size_t worst_index = 0;
  for (size_t i = 0; i < actual.size(); i++) {
    const double error = std::fabs(double{actual[i]} - double{expected[i]});
    if (!(error <= worst)) {  // also catches NaN
      worst = std::isnan(error) ? INFINITY : error;
      worst_index = i;
    }
  }
  EXPECT_LE(worst, tolerance * std::max(scale, 1e-30))
      << what << ": worst element " << worst_index << " is " << actual[worst_index]
      << ", the CPU gives " << expected[worst_index] << " (max |cpu| " << scale << ")";
}

void expect_all_close(const Tensors& actual, const Tensors& expected, double tolerance,
                      const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t t = 0; t < actual.size(); t++) {
    expect_close(actual[t], expected[t], tolerance, what + " output " + std::to_string(t));
  }
}

// ---- memory and factory ---------------------------------------------------------------------

TEST(CudaOps, FactoryAndMemoryRoundTrip) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> ops = make_cuda(true);
  EXPECT_EQ(ops->backend(), Backend::kCuda);
  // Device indices wrap over the visible devices (a local rank per device).
  EXPECT_EQ(make_cuda_ops(cuda_device_count())->backend(), Backend::kCuda);
  Buffers buffers(*ops);
  const std::vector<float> host = random_floats(1001, 1);
  float* a = buffers.upload(host);
  float* b = static_cast<float*>(buffers.allocate(host.size() * sizeof(float)));
  ops->copy(b, a, host.size() * sizeof(float));
  EXPECT_EQ(buffers.download(b, host.size()), host);
  ops->fill_zero(b + 3, 500);
  std::vector<float> expected = host;
  std::fill(expected.begin() + 3, expected.begin() + 503, 0.0f);
  EXPECT_EQ(buffers.download(b, host.size()), expected);
  void* empty = ops->allocate(0);  // a unique, freeable pointer, as on the CPU
  EXPECT_NE(empty, nullptr);
  ops->deallocate(empty);
  ops->synchronize();
}

// ---- embeddings -----------------------------------------------------------------------------

TEST(CudaOps, TokenEmbeddingMatchesCpuBitwise) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  for (int channels : {16, 7}) {
    for (bool unaligned : {false, true}) {
      const int num_tokens = 300, vocab_start = 8, vocab_local = 24;
      // Tokens in [0, 40): some belong to other shards, many repeat.
      const std::vector<int32_t> tokens = random_ints(num_tokens, 2, 0, 40);
      const std::vector<float> wte = random_floats(static_cast<size_t>(vocab_local) * channels, 3);
      const std::vector<float> dwte = random_floats(wte.size(), 4);
      const std::vector<float> dout = random_floats(static_cast<size_t>(num_tokens) * channels, 5);
      auto run = [&](Ops& ops) {
        Buffers buffers(ops);
        const size_t n = static_cast<size_t>(num_tokens) * channels;
        float* out = static_cast<float*>(buffers.allocate(n * sizeof(float)));
        int32_t* device_tokens = buffers.upload(tokens);
        ops.token_embedding_forward(out, device_tokens, buffers.upload(wte, unaligned), num_tokens,
                                    vocab_start, vocab_local, channels);
        float* gradient = buffers.upload(dwte, unaligned);
        ops.token_embedding_backward(gradient, buffers.upload(dout), device_tokens, num_tokens,
                                     vocab_start, vocab_local, channels);
        return Tensors{buffers.download(out, n), buffers.download(gradient, dwte.size())};
      };
      // Copies, and sums in the CPU's order (ascending token position): exact.
      EXPECT_EQ(run(*cuda), run(*cpu)) << "channels " << channels << " unaligned " << unaligned;
    }
  }
}

TEST(CudaOps, PositionEmbeddingMatchesCpuBitwise) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  for (int channels : {12, 7}) {
    const int batch = 3, seq_len = 10;
    const size_t n = static_cast<size_t>(batch) * seq_len * channels;
    const std::vector<float> activation = random_floats(n, 6);
    const std::vector<float> wpe = random_floats(static_cast<size_t>(seq_len) * channels, 7);
    const std::vector<float> dwpe = random_floats(wpe.size(), 8);
    const std::vector<float> dout = random_floats(n, 9);
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      float* out = buffers.upload(activation);
      ops.position_embedding_forward(out, buffers.upload(wpe), batch, seq_len, channels);
      float* gradient = buffers.upload(dwpe);
      ops.position_embedding_backward(gradient, buffers.upload(dout), batch, seq_len, channels);
      return Tensors{buffers.download(out, n), buffers.download(gradient, dwpe.size())};
    };
    EXPECT_EQ(run(*cuda), run(*cpu)) << "channels " << channels;
  }
}

// ---- layer norm ---------------------------------------------------------------------------------

// Forward outputs (out, mean, rstd) and backward gradients (dinp, dweight, dbias).
Tensors layernorm_run(Ops& ops, int rows, int channels, bool unaligned) {
  const size_t n = static_cast<size_t>(rows) * channels;
  const std::vector<float> inp = random_floats(n, 10, 2.0f, 0.5f);
  const std::vector<float> weight = random_floats(channels, 11, 0.5f, 1.0f);
  const std::vector<float> bias = random_floats(channels, 12);
  const std::vector<float> dout = random_floats(n, 13);
  Buffers buffers(ops);
  float* out = static_cast<float*>(buffers.allocate(n * sizeof(float)));
  float* mean = static_cast<float*>(buffers.allocate(rows * sizeof(float)));
  float* rstd = static_cast<float*>(buffers.allocate(rows * sizeof(float)));
  const float* device_inp = buffers.upload(inp, unaligned);
  const float* device_weight = buffers.upload(weight, unaligned);
  ops.layernorm_forward(out, mean, rstd, device_inp, device_weight, buffers.upload(bias), rows,
                        channels, 1e-5f);
  float* dinp = buffers.upload(random_floats(n, 14));
  float* dweight = buffers.upload(random_floats(channels, 15));
  float* dbias = buffers.upload(random_floats(channels, 16));
  ops.layernorm_backward(dinp, dweight, dbias, buffers.upload(dout), device_inp, device_weight,
                         mean, rstd, rows, channels);
  return {buffers.download(out, n),
          buffers.download(mean, rows),
          buffers.download(rstd, rows),
          buffers.download(dinp, n),
          buffers.download(dweight, channels),
          buffers.download(dbias, channels)};
}

TEST(CudaOps, LayerNormMatchesCpu) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  // 64 channels take the float4 path, 37 the scalar one; 300 rows make 10 chunks.
  for (auto [rows, channels, unaligned] : {std::tuple{19, 64, false}, std::tuple{300, 64, false},
                                           std::tuple{300, 37, false}, std::tuple{19, 64, true}}) {
    expect_all_close(layernorm_run(*cuda, rows, channels, unaligned),
                     layernorm_run(*cpu, rows, channels, unaligned), kStrictTolerance,
                     "layernorm " + std::to_string(rows) + "x" + std::to_string(channels));
  }
}

// ---- linear -------------------------------------------------------------------------------------

struct LinearCase {
  int rows, in_features, out_features;
  bool bias, unaligned;
  // Which gradients backward produces.
  bool dinp, dweight, dbias;
};

Tensors linear_run(Ops& ops, const LinearCase& c) {
  const size_t in_size = static_cast<size_t>(c.rows) * c.in_features;
  const size_t out_size = static_cast<size_t>(c.rows) * c.out_features;
  const size_t weight_size = static_cast<size_t>(c.out_features) * c.in_features;
  Buffers buffers(ops);
  const float* inp = buffers.upload(random_floats(in_size, 20));
  const float* weight = buffers.upload(random_floats(weight_size, 21, 0.3f), c.unaligned);
  const float* bias =
      c.bias ? buffers.upload(random_floats(c.out_features, 22), c.unaligned) : nullptr;
  float* out = static_cast<float*>(buffers.allocate(out_size * sizeof(float)));
  ops.linear_forward(out, inp, weight, bias, c.rows, c.in_features, c.out_features);
  const float* dout = buffers.upload(random_floats(out_size, 23));
  float* dinp = c.dinp ? buffers.upload(random_floats(in_size, 24)) : nullptr;
  float* dweight =
      c.dweight ? buffers.upload(random_floats(weight_size, 25), c.unaligned) : nullptr;
  float* dbias = c.dbias ? buffers.upload(random_floats(c.out_features, 26), c.unaligned) : nullptr;
  ops.linear_backward(dinp, dweight, dbias, dout, inp, weight, c.rows, c.in_features,
                      c.out_features);
  Tensors result{buffers.download(out, out_size)};
  if (dinp != nullptr) result.push_back(buffers.download(dinp, in_size));
  if (dweight != nullptr) result.push_back(buffers.download(dweight, weight_size));
  if (dbias != nullptr) result.push_back(buffers.download(dbias, c.out_features));
  return result;
}

TEST(CudaOps, LinearMatchesCpuInTf32AndStrictFp32) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1);
  const LinearCase cases[] = {
      {37, 24, 20, true, false, true, true, true},     // bias epilogues (cuBLASLt)
      {37, 24, 20, false, false, true, true, false},   // no bias
      {50, 13, 7, true, true, true, true, true},       // unaligned: the fallbacks
      {8, 64, 96, true, false, false, true, true},     // dweight + dbias only
      {8, 64, 96, true, false, false, false, true},    // dbias alone: the column-sum kernel
      {8, 64, 96, true, false, true, false, false},    // dinp alone
      {300, 128, 384, true, false, true, true, true},  // a few tiles of every GEMM
  };
  for (bool tf32 : {true, false}) {
    std::unique_ptr<Ops> cuda = make_cuda(tf32);
    for (const LinearCase& c : cases) {
      expect_all_close(
          linear_run(*cuda, c), linear_run(*cpu, c), tf32 ? kTf32Tolerance : kStrictTolerance,
          std::string(tf32 ? "tf32" : "fp32") + " linear " + std::to_string(c.rows) + "x" +
              std::to_string(c.in_features) + "->" + std::to_string(c.out_features));
    }
  }
}

// ---- elementwise --------------------------------------------------------------------------------

TEST(CudaOps, GeluMatchesCpu) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  std::vector<float> inp = random_floats(1003, 30, 6.0f);  // 1003: a scalar tail
  // The saturated ends, where exp(-2u) would overflow without the clamp.
  for (float x : {-30.0f, -20.0f, -12.0f, -9.0f, 0.0f, 9.0f, 12.0f, 30.0f}) inp.push_back(x);
  const std::vector<float> dout = random_floats(inp.size(), 31);
  const std::vector<float> dinp = random_floats(inp.size(), 32);
  for (bool unaligned : {false, true}) {
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      float* out = static_cast<float*>(buffers.allocate(inp.size() * sizeof(float)));
      const float* device_inp = buffers.upload(inp, unaligned);
      ops.gelu_forward(out, device_inp, inp.size());
      float* gradient = buffers.upload(dinp);
      ops.gelu_backward(gradient, device_inp, buffers.upload(dout), inp.size());
      return Tensors{buffers.download(out, inp.size()), buffers.download(gradient, inp.size())};
    };
    const Tensors actual = run(*cuda), expected = run(*cpu);
    expect_all_close(actual, expected, kStrictTolerance, "gelu");
    for (float value : actual[1]) ASSERT_TRUE(std::isfinite(value));
  }
}

TEST(CudaOps, ResidualAccumulateScaleMatchCpuBitwise) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  const size_t n = 4099;
  const std::vector<float> a = random_floats(n, 40), b = random_floats(n, 41);
  for (bool unaligned : {false, true}) {
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      float* out = static_cast<float*>(buffers.allocate(n * sizeof(float)));
      const float* device_a = buffers.upload(a, unaligned);
      const float* device_b = buffers.upload(b);
      ops.residual_forward(out, device_a, device_b, n);
      float* in_place = buffers.upload(a);
      ops.residual_forward(in_place, in_place, device_b, n);  // out aliasing a, as the model does
      float* dx = buffers.upload(b, unaligned);
      ops.accumulate(dx, device_a, n);
      ops.scale(dx, 0.37f, n);
      return Tensors{buffers.download(out, n), buffers.download(in_place, n),
                     buffers.download(dx, n)};
    };
    EXPECT_EQ(run(*cuda), run(*cpu)) << "unaligned " << unaligned;  // one IEEE op per element
  }
}

// ---- attention ----------------------------------------------------------------------------------

struct AttentionShape {
  int batch, seq_len, num_heads, head_dim;
};

// out, att, dqkv. The backward takes `att` from the caller (the CPU forward's),
// so it is compared on the same probabilities.
Tensors attention_run(Ops& ops, const AttentionShape& s, const std::vector<float>* att_input) {
  const int C = s.num_heads * s.head_dim;
  const size_t qkv_size = static_cast<size_t>(s.batch) * s.seq_len * 3 * C;
  const size_t out_size = static_cast<size_t>(s.batch) * s.seq_len * C;
  const size_t att_size = static_cast<size_t>(s.batch) * s.num_heads * s.seq_len * s.seq_len;
  Buffers buffers(ops);
  const float* qkv = buffers.upload(random_floats(qkv_size, 50));
  float* out = static_cast<float*>(buffers.allocate(out_size * sizeof(float)));
  float* att = static_cast<float*>(buffers.allocate(att_size * sizeof(float)));
  ops.attention_forward(out, att, qkv, s.batch, s.seq_len, s.num_heads, s.head_dim);
  Tensors result{buffers.download(out, out_size), buffers.download(att, att_size)};
  const float* backward_att = att_input != nullptr ? buffers.upload(*att_input) : att;
  float* dqkv = buffers.upload(random_floats(qkv_size, 51));
  float* scratch = static_cast<float*>(buffers.allocate(att_size * sizeof(float)));
  ops.attention_backward(dqkv, scratch, buffers.upload(random_floats(out_size, 52)), qkv,
                         backward_att, s.batch, s.seq_len, s.num_heads, s.head_dim);
  result.push_back(buffers.download(dqkv, qkv_size));
  return result;
}

TEST(CudaOps, AttentionMatchesCpuInTf32AndStrictFp32) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1);
  for (bool tf32 : {true, false}) {
    std::unique_ptr<Ops> cuda = make_cuda(tf32);
    for (const AttentionShape& s : {AttentionShape{2, 33, 3, 8}, AttentionShape{2, 64, 2, 16},
                                    AttentionShape{1, 130, 4, 32}}) {
      const Tensors expected = attention_run(*cpu, s, nullptr);
      const Tensors actual = attention_run(*cuda, s, &expected[1]);
      expect_all_close(
          actual, expected, tf32 ? kTf32Tolerance : kStrictTolerance,
          std::string(tf32 ? "tf32" : "fp32") + " attention T=" + std::to_string(s.seq_len));
      // Causal: exact zeros above the diagonal.
      const std::vector<float>& att = actual[1];
      for (size_t row = 0; row < att.size() / s.seq_len; row++) {
        const int t = static_cast<int>(row % s.seq_len);
        for (int t2 = t + 1; t2 < s.seq_len; t2++) {
          ASSERT_EQ(att[row * s.seq_len + t2], 0.0f) << "row " << row << " key " << t2;
        }
      }
    }
  }
}

// ---- loss
// ------------------------------------------------------------------------------------------

// losses, then dlogits (separate buffer), then dlogits computed in place.
Tensors cross_entropy_run(Ops& ops, const std::vector<float>& logits,
                          const std::vector<int32_t>& targets, int vocab, bool unaligned) {
  const int rows = static_cast<int>(targets.size());
  Buffers buffers(ops);
  const float* device_logits = buffers.upload(logits, unaligned);
  const int32_t* device_targets = buffers.upload(targets);
  float* losses = static_cast<float*>(buffers.allocate(rows * sizeof(float)));
  float* dlogits = static_cast<float*>(buffers.allocate(logits.size() * sizeof(float)));
  ops.softmax_cross_entropy(losses, dlogits, device_logits, device_targets, rows, vocab, 0.25f);
  Tensors result{buffers.download(losses, rows), buffers.download(dlogits, logits.size())};
  float* in_place = buffers.upload(logits, unaligned);
  ops.softmax_cross_entropy(losses, in_place, in_place, device_targets, rows, vocab, 0.25f);
  result.push_back(buffers.download(in_place, logits.size()));
  ops.softmax_cross_entropy(losses, nullptr, device_logits, device_targets, rows, vocab, 0.25f);
  result.push_back(buffers.download(losses, rows));  // evaluation: the same losses
  return result;
}

TEST(CudaOps, SoftmaxCrossEntropyMatchesCpu) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  for (auto [vocab, unaligned] :
       {std::pair{96, false}, std::pair{101, false}, std::pair{96, true}, std::pair{5000, false}}) {
    const int rows = 13;
    const std::vector<float> logits = random_floats(static_cast<size_t>(rows) * vocab, 60, 4.0f);
    std::vector<int32_t> targets = random_ints(rows, 61, 0, vocab);
    targets[0] = 0;
    targets[1] = vocab - 1;
    const Tensors actual = cross_entropy_run(*cuda, logits, targets, vocab, unaligned);
    expect_all_close(actual, cross_entropy_run(*cpu, logits, targets, vocab, unaligned),
                     kStrictTolerance, "cross-entropy V=" + std::to_string(vocab));
    EXPECT_EQ(actual[1], actual[2]) << "in place must equal out of place";
    EXPECT_EQ(actual[0], actual[3]) << "evaluation must give the training losses";
  }
}

TEST(CudaOps, CrossEntropyRejectsTargetsOutOfRange) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cuda = make_cuda(true);
  Buffers buffers(*cuda);
  const int rows = 4, vocab = 8;
  float* logits = buffers.upload(random_floats(rows * vocab, 62));
  float* losses = static_cast<float*>(buffers.allocate(rows * sizeof(float)));
  float* stats = static_cast<float*>(buffers.allocate(2 * rows * sizeof(float)));
  const int32_t* too_large = buffers.upload(std::vector<int32_t>{1, 2, 8, 3});
  const int32_t* negative = buffers.upload(std::vector<int32_t>{1, -1, 2, 3});
  const int32_t* valid = buffers.upload(std::vector<int32_t>{1, 2, 7, 3});
  EXPECT_THROW(cuda->softmax_cross_entropy(losses, nullptr, logits, too_large, rows, vocab, 1.0f),
               std::out_of_range);
  EXPECT_THROW(cuda->softmax_cross_entropy(losses, nullptr, logits, negative, rows, vocab, 1.0f),
               std::out_of_range);
  EXPECT_THROW(
      cuda->cross_entropy_shard_stats(stats, stats + rows, logits, negative, rows, vocab, 0),
      std::out_of_range);
  // A shard's stats accept targets of other shards (above its range).
  EXPECT_NO_THROW(
      cuda->cross_entropy_shard_stats(stats, stats + rows, logits, too_large, rows, vocab, 0));
  // The error record was reset: valid targets pass again.
  EXPECT_NO_THROW(cuda->softmax_cross_entropy(losses, nullptr, logits, valid, rows, vocab, 1.0f));
}

// The three vocab-parallel steps over num_shards slices, the statistics
// combined on the host as the runtime's all-reduces would: losses, dlogits.
Tensors sharded_cross_entropy(Ops& ops, const std::vector<float>& logits,
                              const std::vector<int32_t>& targets, int vocab, int num_shards) {
  const int rows = static_cast<int>(targets.size());
  Buffers buffers(ops);
  const int32_t* device_targets = buffers.upload(targets);
  auto start_of = [&](int s) {
    return static_cast<int>(static_cast<int64_t>(vocab) * s / num_shards);
  };
  std::vector<float*> slices(num_shards);
  std::vector<float> row_max(rows, -INFINITY), target_logit(rows, 0.0f), exp_sum(rows, 0.0f);
  float* stats = static_cast<float*>(buffers.allocate(2 * rows * sizeof(float)));
  for (int s = 0; s < num_shards; s++) {
    const int start = start_of(s), local = start_of(s + 1) - start;
    std::vector<float> slice(static_cast<size_t>(rows) * local);
    for (int r = 0; r < rows; r++) {
      std::copy_n(logits.begin() + static_cast<size_t>(r) * vocab + start, local,
                  slice.begin() + static_cast<size_t>(r) * local);
    }
    slices[s] = buffers.upload(slice);
    ops.cross_entropy_shard_stats(stats, stats + rows, slices[s], device_targets, rows, local,
                                  start);
    const std::vector<float> host = buffers.download(stats, 2 * rows);
    for (int r = 0; r < rows; r++) {
      row_max[r] = std::max(row_max[r], host[r]);
      target_logit[r] += host[rows + r];
    }
  }
  const float* device_max = buffers.upload(row_max);
  for (int s = 0; s < num_shards; s++) {
    ops.cross_entropy_shard_exp_sums(stats, slices[s], device_max, rows,
                                     start_of(s + 1) - start_of(s));
    const std::vector<float> host = buffers.download(stats, rows);
    for (int r = 0; r < rows; r++) exp_sum[r] += host[r];
  }
  const float* device_sum = buffers.upload(exp_sum);
  const float* device_target_logit = buffers.upload(target_logit);
  Tensors result{std::vector<float>(), std::vector<float>(logits.size())};
  for (int s = 0; s < num_shards; s++) {
    const int start = start_of(s), local = start_of(s + 1) - start;
    // In place, as the model runs it.
    ops.cross_entropy_shard_finish(stats, slices[s], slices[s], device_targets, device_max,
                                   device_sum, device_target_logit, rows, local, start, 0.25f);
    if (s == 0) result[0] = buffers.download(stats, rows);
    const std::vector<float> slice = buffers.download(slices[s], static_cast<size_t>(rows) * local);
    for (int r = 0; r < rows; r++) {
      std::copy_n(slice.begin() + static_cast<size_t>(r) * local, local,
                  result[1].begin() + static_cast<size_t>(r) * vocab + start);
    }
  }
  return result;
}

TEST(CudaOps, ShardedCrossEntropyMatchesFusedAndCpu) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  for (int vocab : {96, 101}) {
    const int rows = 11;
    const std::vector<float> logits = random_floats(static_cast<size_t>(rows) * vocab, 63, 4.0f);
    const std::vector<int32_t> targets = random_ints(rows, 64, 0, vocab);
    const Tensors fused = cross_entropy_run(*cuda, logits, targets, vocab, false);
    // One shard: the fused op's results, bitwise (same mapping, same rounding).
    const Tensors one = sharded_cross_entropy(*cuda, logits, targets, vocab, 1);
    EXPECT_EQ(one[0], fused[0]) << "V=" << vocab;
    EXPECT_EQ(one[1], fused[1]) << "V=" << vocab;
    for (int shards : {2, 3}) {
      const Tensors expected = sharded_cross_entropy(*cpu, logits, targets, vocab, shards);
      expect_all_close(sharded_cross_entropy(*cuda, logits, targets, vocab, shards), expected,
                       kStrictTolerance,
                       std::to_string(shards) + " shards V=" + std::to_string(vocab));
    }
  }
}

// ---- optimizer
// ---------------------------------------------------------------------------------------

TEST(CudaOps, AdamWAndSumOfSquaresMatchCpu) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cpu = make_cpu_ops(1), cuda = make_cuda(true);
  for (bool unaligned : {false, true}) {
    const size_t n = 10007;
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      float* params = buffers.upload(random_floats(n, 70), unaligned);
      float* m = buffers.upload(random_floats(n, 71, 0.01f));
      float* v = buffers.upload(random_floats(n, 72, 0.001f, 0.001f));
      for (int step = 1; step <= 3; step++) {
        const float* grads = buffers.upload(random_floats(n, 73 + step));
        ops.adamw(params, grads, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
      }
      return Tensors{buffers.download(params, n), buffers.download(m, n), buffers.download(v, n)};
    };
    expect_all_close(run(*cuda), run(*cpu), kStrictTolerance, "adamw");
  }
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
    for (bool unaligned : {false, true}) {
      const std::vector<float> x = random_floats(n, 80, 3.0f);
      Buffers cpu_buffers(*cpu), cuda_buffers(*cuda);
      const double expected = cpu->sum_of_squares(cpu_buffers.upload(x, unaligned), n);
      const double actual = cuda->sum_of_squares(cuda_buffers.upload(x, unaligned), n);
      EXPECT_NEAR(actual, expected, kDoubleTolerance * expected) << "n " << n;
    }
  }
}

// ---- determinism: two runs, bitwise
// ----------------------------------------------------------------

TEST(CudaOps, DeterministicTokenEmbeddingBackward) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cuda = make_cuda(true);
  const int num_tokens = 4096, vocab = 50, channels = 96;
  const std::vector<int32_t> tokens = random_ints(num_tokens, 90, 0, vocab);
  const std::vector<float> dout = random_floats(static_cast<size_t>(num_tokens) * channels, 91);
  auto run = [&] {
    Buffers buffers(*cuda);
    float* dwte = buffers.upload(random_floats(static_cast<size_t>(vocab) * channels, 92));
    cuda->token_embedding_backward(dwte, buffers.upload(dout), buffers.upload(tokens), num_tokens,
                                   0, vocab, channels);
    return buffers.download(dwte, static_cast<size_t>(vocab) * channels);
  };
  EXPECT_EQ(run(), run());
}

TEST(CudaOps, DeterministicLayerNormBackward) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cuda = make_cuda(true);
  EXPECT_EQ(layernorm_run(*cuda, 4096, 768, false), layernorm_run(*cuda, 4096, 768, false));
}

TEST(CudaOps, DeterministicSumOfSquares) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cuda = make_cuda(true);
  const std::vector<float> x = random_floats(3000017, 93);
  Buffers buffers(*cuda);
  const float* device_x = buffers.upload(x);
  const double first = cuda->sum_of_squares(device_x, x.size());
  for (int run = 0; run < 3; run++) EXPECT_EQ(cuda->sum_of_squares(device_x, x.size()), first);
}

TEST(CudaOps, DeterministicAttentionBackward) {
  if (kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  std::unique_ptr<Ops> cuda = make_cuda(true);
  const AttentionShape shape{4, 128, 4, 32};
  EXPECT_EQ(attention_run(*cuda, shape, nullptr), attention_run(*cuda, shape, nullptr));
}

}  // namespace
}  // namespace paraplan::kernels
