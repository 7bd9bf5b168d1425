// cuda_ops_test.cc: the CUDA backend (kernels/cuda) against the CPU reference
// backend in the same storage dtype, op by op, once for fp32 and once for bf16
// storage: the same random inputs (fixed seeds) go through both and the
// outputs are compared within the tolerances of cuda_test_support.h (bitwise
// where both backends compute the same IEEE operations in the same order and
// round once), fp32 GEMMs in TF32 (the default) and strict fp32 modes; the
// fp32 <-> storage conversions against kernels/dtype.h, bitwise; the ops
// of ZeRO-2's fp32 gradient shard (fp32 gradients beside storage params); plus
// determinism (two runs, bitwise) for the ops whose CUDA versions reduce
// across threads; input gradients overwritten (GradientWrite::kOverwrite)
// into NaN equal to the same gradients accumulated into zeros. Attention and the losses are in
// cuda_attention_test.cc. Every test skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

class CudaOps : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaOps, kStorageDtypes, storage_test_name);

// ---- memory, factory and conversions -----------------------------------------------------------

TEST_P(CudaOps, FactoryAndMemoryRoundTrip) {
  std::unique_ptr<Ops> ops = make_cuda(true, dtype());
  EXPECT_EQ(ops->backend(), Backend::kCuda);
  EXPECT_EQ(ops->storage_dtype(), dtype());
  EXPECT_EQ(ops->storage_bytes(10), bf16() ? 20u : 40u);
  // Device indices wrap over the visible devices (a local rank per device).
  EXPECT_EQ(make_cuda_ops(cuda_device_count(), dtype())->backend(), Backend::kCuda);
  Buffers buffers(*ops);
  const std::vector<float> host = round_to(dtype(), random_floats(1001, 1));
  void* a = buffers.upload_storage(host);
  void* b = buffers.allocate_storage(host.size());
  ops->copy(b, a, ops->storage_bytes(host.size()));
  expect_equal(buffers.download_storage(b, host.size()), host, "copy");
  ops->zero_bytes(static_cast<char*>(b) + ops->storage_bytes(3), ops->storage_bytes(500));
  std::vector<float> expected = host;
  std::fill(expected.begin() + 3, expected.begin() + 503, 0.0f);
  expect_equal(buffers.download_storage(b, host.size()), expected, "zero_bytes");
  void* empty = ops->allocate(0);  // a unique, freeable pointer, as on the CPU
  EXPECT_NE(empty, nullptr);
  ops->deallocate(empty);
  ops->synchronize();
}

TEST_P(CudaOps, ConversionsMatchDtypeHeaderBitwise) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  // 1003 values (a scalar tail), ties in both directions, the edges of bf16's
  // range, subnormals, infinities and NaN.
  std::vector<float> values = random_floats(1003, 2, 100.0f);
  for (float x :
       {0.0f, -0.0f, 1.00390625f /* tie: to even, down */, 1.01171875f /* tie: to even, up */,
        -1.01171875f, FLT_MAX, -FLT_MAX, 3.3961e38f, 1e-45f, 1e-40f, -3e-39f,
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()}) {
    values.push_back(x);
  }
  const size_t n = values.size();
  // What dtype.h gives: the storage values, and them widened back.
  std::vector<float> expected(n);
  {
    std::vector<unsigned char> storage(cuda->storage_bytes(n));
    host_from_float(storage.data(), values.data(), dtype(), n);
    host_to_float(expected.data(), storage.data(), dtype(), n);
  }
  for (bool unaligned : {false, true}) {
    Buffers buffers(*cuda);
    const float* in = buffers.upload(values, unaligned);
    void* storage = buffers.upload_storage(std::vector<float>(n, 7.0f), unaligned);
    cuda->convert_from_float(storage, in, n);
    float* back = buffers.upload(std::vector<float>(n, 7.0f), unaligned);
    cuda->convert_to_float(back, storage, n);
    // Bits, with every NaN the same (the GPU's NaN payload is its own).
    // Element i converts values[i].
    const std::string what = " unaligned " + std::to_string(unaligned);
    expect_equal(buffers.download_storage(storage, n), expected, "convert_from_float" + what,
                 FloatEquality::kBits);
    expect_equal(buffers.download(back, n), expected, "convert_to_float" + what,
                 FloatEquality::kBits);
  }
}

// ---- embeddings -----------------------------------------------------------------------------

// Tokens in [0, 40), vocab shard [8, 32): some belong to other shards. Short:
// 300 tokens, runs of about 10. Long: 3000 tokens, token 10 in about 80% of
// positions (a run of some 75 segments, as " the" and "," make in real text),
// tokens 11, 12 and 13 exactly one segment, one more, and two segments long.
std::vector<int32_t> embedding_tokens(bool long_runs) {
  if (!long_runs) return random_ints(300, 2, 0, 40);
  std::vector<int32_t> tokens = random_ints(3000, 6, 0, 40);
  for (size_t i = 0; i < tokens.size(); i++) {
    if (tokens[i] >= 11 && tokens[i] <= 13) tokens[i] = 10;
    if (i % 5 != 0) tokens[i] = 10;
  }
  int next = 1;
  for (auto [token, count] :
       {std::pair{11, kTokenEmbeddingSegment}, std::pair{12, kTokenEmbeddingSegment + 1},
        std::pair{13, 2 * kTokenEmbeddingSegment}}) {
    for (int k = 0; k < count; k++, next += 7) tokens[next] = token;
  }
  return tokens;
}

TEST_P(CudaOps, TokenEmbeddingMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  for (bool long_runs : {false, true}) {
    for (int channels : {16, 7}) {
      for (bool unaligned : {false, true}) {
        const int vocab_start = 8, vocab_local = 24;
        const std::vector<int32_t> tokens = embedding_tokens(long_runs);
        const int num_tokens = static_cast<int>(tokens.size());
        const std::vector<float> wte =
            random_floats(static_cast<size_t>(vocab_local) * channels, 3);
        const std::vector<float> dwte = random_floats(wte.size(), 4);
        const std::vector<float> dout =
            random_floats(static_cast<size_t>(num_tokens) * channels, 5);
        auto run = [&](Ops& ops) {
          Buffers buffers(ops);
          const size_t n = static_cast<size_t>(num_tokens) * channels;
          void* out = buffers.allocate_storage(n);
          int32_t* device_tokens = buffers.upload(tokens);
          ops.token_embedding_forward(out, device_tokens, buffers.upload_storage(wte, unaligned),
                                      num_tokens, vocab_start, vocab_local, channels);
          void* gradient = buffers.upload_storage(dwte, unaligned);
          ops.token_embedding_backward(gradient, buffers.upload_storage(dout), device_tokens,
                                       num_tokens, vocab_start, vocab_local, channels);
          return Tensors{buffers.download_storage(out, n),
                         buffers.download_storage(gradient, dwte.size())};
        };
        const Tensors actual = run(*cuda), expected = run(*cpu);
        const std::string what = std::string(long_runs ? "long" : "short") + " runs channels " +
                                 std::to_string(channels) + " unaligned " +
                                 std::to_string(unaligned);
        // Forward copies: exact in any dtype.
        expect_equal(actual[0], expected[0], "token embedding forward " + what);
        // Backward sums in ops.h's segment order in fp32 on both backends,
        // and bf16 rounds that sum once: bitwise in either dtype.
        expect_equal(actual[1], expected[1], "token embedding backward " + what);
      }
    }
  }
}

TEST_P(CudaOps, PositionEmbeddingMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  for (int channels : {16, 12, 7}) {
    const int batch = 3, seq_len = 10;
    const size_t n = static_cast<size_t>(batch) * seq_len * channels;
    const std::vector<float> activation = random_floats(n, 6);
    const std::vector<float> wpe = random_floats(static_cast<size_t>(seq_len) * channels, 7);
    const std::vector<float> dwpe = random_floats(wpe.size(), 8);
    const std::vector<float> dout = random_floats(n, 9);
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      void* out = buffers.upload_storage(activation);
      ops.position_embedding_forward(out, buffers.upload_storage(wpe), batch, seq_len, channels);
      void* gradient = buffers.upload_storage(dwpe);
      ops.position_embedding_backward(gradient, buffers.upload_storage(dout), batch, seq_len,
                                      channels);
      return Tensors{buffers.download_storage(out, n),
                     buffers.download_storage(gradient, dwpe.size())};
    };
    const Tensors actual = run(*cuda), expected = run(*cpu);
    const std::string what = "channels " + std::to_string(channels);
    // Forward: one addition and one rounding per element, bitwise.
    expect_equal(actual[0], expected[0], "position embedding forward " + what);
    // Backward: the batch summed in order b = 0, 1, ... onto dwpe, rounded once.
    if (bf16()) {
      expect_close(actual[1], expected[1], kBf16Tolerance, "position embedding backward " + what);
    } else {
      expect_equal(actual[1], expected[1], "position embedding backward " + what);
    }
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
  void* out = buffers.allocate_storage(n);
  float* mean = buffers.allocate_floats(rows);
  float* rstd = buffers.allocate_floats(rows);
  const void* device_inp = buffers.upload_storage(inp, unaligned);
  const void* device_weight = buffers.upload_storage(weight, unaligned);
  ops.layernorm_forward(out, mean, rstd, device_inp, device_weight, buffers.upload_storage(bias),
                        rows, channels, 1e-5f);
  void* dinp = buffers.upload_storage(random_floats(n, 14));
  void* dweight = buffers.upload_storage(random_floats(channels, 15));
  void* dbias = buffers.upload_storage(random_floats(channels, 16));
  ops.layernorm_backward(dinp, dweight, dbias, buffers.upload_storage(dout), device_inp,
                         device_weight, mean, rstd, rows, channels);
  return {buffers.download_storage(out, n),
          buffers.download(mean, rows),
          buffers.download(rstd, rows),
          buffers.download_storage(dinp, n),
          buffers.download_storage(dweight, channels),
          buffers.download_storage(dbias, channels)};
}

TEST_P(CudaOps, LayerNormMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  // out, mean, rstd, dinp, dweight, dbias: storage, fp32, fp32, then storage.
  const double storage = storage_tolerance(dtype(), kStrictTolerance);
  const std::vector<double> tolerances = {storage, kStrictTolerance, kStrictTolerance, storage};
  // 64 channels take the 16-byte path (4 floats or 8 bf16), 37 the scalar one;
  // 300 rows are one or two per block of the backward (cuda_norm_test.cc has
  // the shapes that reach its other paths).
  for (auto [rows, channels, unaligned] : {std::tuple{19, 64, false}, std::tuple{300, 64, false},
                                           std::tuple{300, 37, false}, std::tuple{19, 64, true}}) {
    expect_all_close(layernorm_run(*cuda, rows, channels, unaligned),
                     layernorm_run(*cpu, rows, channels, unaligned), tolerances,
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

// What dinp holds before backward: random values or zeros, added to
// (GradientWrite::kAccumulate), or NaN, overwritten (kOverwrite: a stray
// read of the old value shows as NaN).
enum class DinpStart { kRandom, kZeros, kNaN };

Tensors linear_run(Ops& ops, const LinearCase& c, DinpStart start) {
  const size_t in_size = static_cast<size_t>(c.rows) * c.in_features;
  const size_t out_size = static_cast<size_t>(c.rows) * c.out_features;
  const size_t weight_size = static_cast<size_t>(c.out_features) * c.in_features;
  Buffers buffers(ops);
  const void* inp = buffers.upload_storage(random_floats(in_size, 20));
  const void* weight = buffers.upload_storage(random_floats(weight_size, 21, 0.3f), c.unaligned);
  const void* bias =
      c.bias ? buffers.upload_storage(random_floats(c.out_features, 22), c.unaligned) : nullptr;
  void* out = buffers.allocate_storage(out_size);
  ops.linear_forward(out, inp, weight, bias, c.rows, c.in_features, c.out_features);
  const void* dout = buffers.upload_storage(random_floats(out_size, 23));
  const std::vector<float> dinp_start =
      start == DinpStart::kRandom
          ? random_floats(in_size, 24)
          : std::vector<float>(in_size, start == DinpStart::kNaN ? std::nanf("") : 0.0f);
  void* dinp = c.dinp ? buffers.upload_storage(dinp_start) : nullptr;
  void* dweight =
      c.dweight ? buffers.upload_storage(random_floats(weight_size, 25), c.unaligned) : nullptr;
  void* dbias =
      c.dbias ? buffers.upload_storage(random_floats(c.out_features, 26), c.unaligned) : nullptr;
  ops.linear_backward(
      dinp, dweight, dbias, dout, inp, weight, c.rows, c.in_features, c.out_features,
      start == DinpStart::kNaN ? GradientWrite::kOverwrite : GradientWrite::kAccumulate);
  Tensors result{buffers.download_storage(out, out_size)};
  if (dinp != nullptr) result.push_back(buffers.download_storage(dinp, in_size));
  if (dweight != nullptr) result.push_back(buffers.download_storage(dweight, weight_size));
  if (dbias != nullptr) result.push_back(buffers.download_storage(dbias, c.out_features));
  return result;
}

TEST_P(CudaOps, LinearMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype());
  const LinearCase cases[] = {
      {37, 24, 20, true, false, true, true, true},     // bias epilogues (cuBLASLt)
      {37, 24, 20, false, false, true, true, false},   // no bias
      {50, 13, 7, true, true, true, true, true},       // unaligned: the fallbacks
      {8, 64, 96, true, false, false, true, true},     // dweight + dbias only
      {8, 64, 96, true, false, false, false, true},    // dbias alone: the column-sum kernel
      {8, 64, 96, true, false, true, false, false},    // dinp alone
      {300, 128, 384, true, false, true, true, true},  // a few tiles of every GEMM
  };
  // fp32: TF32 and strict fp32 GEMMs; bf16: one mode (bf16 GEMMs accumulate in
  // fp32 whatever PARAPLAN_CUDA_TF32 says).
  const std::vector<bool> modes = bf16() ? std::vector<bool>{true} : std::vector<bool>{true, false};
  for (bool tf32 : modes) {
    std::unique_ptr<Ops> cuda = make_cuda(tf32, dtype());
    const double tolerance =
        bf16() ? kBf16SumTolerance : (tf32 ? kTf32Tolerance : kStrictTolerance);
    for (const LinearCase& c : cases) {
      expect_all_close(linear_run(*cuda, c, DinpStart::kRandom),
                       linear_run(*cpu, c, DinpStart::kRandom), tolerance,
                       std::string(bf16() ? "bf16" : (tf32 ? "tf32" : "fp32")) + " linear " +
                           std::to_string(c.rows) + "x" + std::to_string(c.in_features) + "->" +
                           std::to_string(c.out_features));
    }
  }
}

// dinp overwritten into NaN (cuBLAS with beta = 0) equals dinp accumulated
// into zeros (beta = 1), as values; out, dweight and dbias are the same
// computation both times. Every GEMM path: the cuBLASLt epilogues, the
// unaligned fallbacks (cublasGemmEx), dinp alone, several tiles.
TEST_P(CudaOps, LinearOverwriteEqualsAccumulateIntoZeros) {
  const LinearCase cases[] = {
      {37, 24, 20, true, false, true, true, true},
      {50, 13, 7, true, true, true, true, true},
      {8, 64, 96, true, false, true, false, false},
      {300, 128, 384, true, false, true, true, true},
  };
  const std::vector<bool> modes = bf16() ? std::vector<bool>{true} : std::vector<bool>{true, false};
  for (bool tf32 : modes) {
    std::unique_ptr<Ops> cuda = make_cuda(tf32, dtype());
    for (const LinearCase& c : cases) {
      expect_all_equal(
          linear_run(*cuda, c, DinpStart::kNaN), linear_run(*cuda, c, DinpStart::kZeros),
          std::string(bf16() ? "bf16" : (tf32 ? "tf32" : "fp32")) +
              " linear dinp overwritten vs accumulated into zeros " + std::to_string(c.rows) + "x" +
              std::to_string(c.in_features) + "->" + std::to_string(c.out_features));
    }
  }
}

// ---- elementwise --------------------------------------------------------------------------------

TEST_P(CudaOps, GeluMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  std::vector<float> inp = random_floats(1003, 30, 6.0f);  // 1003: a scalar tail
  // The saturated ends, where exp(-2u) would overflow without the clamp.
  for (float x : {-30.0f, -20.0f, -12.0f, -9.0f, 0.0f, 9.0f, 12.0f, 30.0f}) inp.push_back(x);
  const std::vector<float> dout = random_floats(inp.size(), 31);
  const std::vector<float> dinp = random_floats(inp.size(), 32);
  for (bool unaligned : {false, true}) {
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      void* out = buffers.allocate_storage(inp.size());
      const void* device_inp = buffers.upload_storage(inp, unaligned);
      ops.gelu_forward(out, device_inp, inp.size());
      void* gradient = buffers.upload_storage(dinp);
      ops.gelu_backward(gradient, device_inp, buffers.upload_storage(dout), inp.size(),
                        GradientWrite::kAccumulate);
      return Tensors{buffers.download_storage(out, inp.size()),
                     buffers.download_storage(gradient, inp.size())};
    };
    const Tensors actual = run(*cuda), expected = run(*cpu);
    expect_all_close(actual, expected, storage_tolerance(dtype(), kStrictTolerance), "gelu");
    for (float value : actual[1]) ASSERT_TRUE(std::isfinite(value));
  }
}

// GELU's backward overwriting dinp into NaN equals accumulating it into
// zeros, as values, on the 16-byte path (with its scalar tail) and the
// scalar one (unaligned).
TEST_P(CudaOps, GeluOverwriteEqualsAccumulateIntoZeros) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  const std::vector<float> inp = random_floats(1003, 30, 6.0f), dout = random_floats(1003, 31);
  for (bool unaligned : {false, true}) {
    auto run = [&](GradientWrite write) {
      Buffers buffers(*cuda);
      const float start = write == GradientWrite::kOverwrite ? std::nanf("") : 0.0f;
      void* gradient = buffers.upload_storage(std::vector<float>(inp.size(), start), unaligned);
      cuda->gelu_backward(gradient, buffers.upload_storage(inp, unaligned),
                          buffers.upload_storage(dout, unaligned), inp.size(), write);
      return buffers.download_storage(gradient, inp.size());
    };
    expect_equal(run(GradientWrite::kOverwrite), run(GradientWrite::kAccumulate),
                 std::string("gelu dinp overwritten vs accumulated into zeros") +
                     (unaligned ? " unaligned" : ""));
  }
}

TEST_P(CudaOps, ResidualAccumulateScaleMatchCpuBitwise) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  const size_t n = 4099;
  const std::vector<float> a = random_floats(n, 40), b = random_floats(n, 41);
  for (bool unaligned : {false, true}) {
    auto run = [&](Ops& ops) {
      Buffers buffers(ops);
      void* out = buffers.allocate_storage(n);
      const void* device_a = buffers.upload_storage(a, unaligned);
      const void* device_b = buffers.upload_storage(b);
      ops.residual_forward(out, device_a, device_b, n);
      void* in_place = buffers.upload_storage(a);
      ops.residual_forward(in_place, in_place, device_b, n);  // out aliasing a, as the model does
      void* dx = buffers.upload_storage(b, unaligned);
      ops.accumulate(dx, device_a, n);
      ops.scale(dx, 0.37f, n);
      return Tensors{buffers.download_storage(out, n), buffers.download_storage(in_place, n),
                     buffers.download_storage(dx, n)};
    };
    // One IEEE operation per element and op, then one rounding: bitwise in either dtype.
    expect_all_equal(run(*cuda), run(*cpu),
                     "residual, in place, accumulate+scale unaligned " + std::to_string(unaligned));
  }
}

// ---- optimizer
// ------------------------------------------------------------------------------------

// Three AdamW steps from the same state: master, params, first and second moments.
// params_are_master (fp32 only): params is the master buffer itself.
// float_gradients: fp32 gradients (adamw_float_gradients), else storage ones.
Tensors adamw_run(Ops& ops, size_t n, bool unaligned, bool params_are_master,
                  bool float_gradients = false) {
  Buffers buffers(ops);
  float* master = buffers.upload(random_floats(n, 70), unaligned);
  void* params = params_are_master ? static_cast<void*>(master)
                                   : buffers.upload_storage(std::vector<float>(n, 0.0f), unaligned);
  float* m = buffers.upload(random_floats(n, 71, 0.01f));
  float* v = buffers.upload(random_floats(n, 72, 0.001f, 0.001f));
  for (int step = 1; step <= 3; step++) {
    const std::vector<float> values = random_floats(n, 73 + step);
    const float* float_grads = float_gradients ? buffers.upload(values) : nullptr;
    const void* grads = float_gradients ? nullptr : buffers.upload_storage(values);
    // Steps 2 and 3 carry a clip factor, which AdamW applies as it reads.
    const AdamWStep hyperparameters{.learning_rate = 1e-3f,
                                    .beta1 = 0.9f,
                                    .beta2 = 0.95f,
                                    .epsilon = 1e-8f,
                                    .weight_decay = 0.1f,
                                    .step = step,
                                    .gradient_scale = step == 1 ? 1.0f : 0.37f};
    if (float_gradients)
      ops.adamw_float_gradients(master, params, float_grads, m, v, n, hyperparameters);
    else
      ops.adamw(master, params, grads, m, v, n, hyperparameters);
  }
  return Tensors{buffers.download(master, n), buffers.download_storage(params, n),
                 buffers.download(m, n), buffers.download(v, n)};
}

TEST_P(CudaOps, AdamWAndSumOfSquaresMatchCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  // master and moments are fp32 (fed the same storage gradients); params are
  // the master weights rounded to the storage dtype.
  const std::vector<double> tolerances = {
      kStrictTolerance, storage_tolerance(dtype(), kStrictTolerance), kStrictTolerance};
  for (bool unaligned : {false, true}) {
    const size_t n = 10007;
    const Tensors actual = adamw_run(*cuda, n, unaligned, false);
    expect_all_close(actual, adamw_run(*cpu, n, unaligned, false), tolerances, "adamw");
    const std::string what = " unaligned " + std::to_string(unaligned);
    // params = round(master), exactly.
    expect_equal(actual[1], round_to(dtype(), actual[0]), "adamw params = round(master)" + what);
    if (!bf16()) {
      // fp32: the master weights may be the params themselves; the same bits.
      expect_all_equal(adamw_run(*cuda, n, unaligned, true), actual,
                       "adamw params are master" + what);
    }
  }
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
    for (bool unaligned : {false, true}) {
      const std::vector<float> x = random_floats(n, 80, 3.0f);
      Buffers cpu_buffers(*cpu), cuda_buffers(*cuda);
      // Both sum the squares of the same storage values in double.
      const double expected = cpu->sum_of_squares(cpu_buffers.upload_storage(x, unaligned), n);
      const double actual = cuda->sum_of_squares(cuda_buffers.upload_storage(x, unaligned), n);
      EXPECT_NEAR(actual, expected, kDoubleTolerance * expected) << "n " << n;
    }
  }
}

// ZeRO-2's fp32 gradient shard: accumulate_into_float (one fp32 addition
// per element) bitwise the CPU's, AdamW from fp32 gradients against the CPU
// as adamw is (fp32 storage: bitwise adamw), the sum of fp32 squares as the
// storage sum is (fp32 storage: bitwise it).
TEST_P(CudaOps, FloatGradientOpsMatchCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  for (bool unaligned : {false, true}) {
    const std::string what = " unaligned " + std::to_string(unaligned);
    const size_t n = 4099;
    auto accumulate = [&](Ops& ops) {
      Buffers buffers(ops);
      float* x = buffers.upload(random_floats(n, 60, 300.0f), unaligned);
      ops.accumulate_into_float(x, buffers.upload_storage(random_floats(n, 61), unaligned), n);
      return buffers.download(x, n);
    };
    expect_equal(accumulate(*cuda), accumulate(*cpu), "accumulate_into_float" + what);
    const size_t m = 10007;
    const Tensors actual = adamw_run(*cuda, m, unaligned, false, true);
    const std::vector<double> tolerances = {
        kStrictTolerance, storage_tolerance(dtype(), kStrictTolerance), kStrictTolerance};
    expect_all_close(actual, adamw_run(*cpu, m, unaligned, false, true), tolerances,
                     "adamw fp32 gradients" + what);
    expect_equal(actual[1], round_to(dtype(), actual[0]), "adamw fp32 gradients params" + what);
    if (!bf16())
      expect_all_equal(actual, adamw_run(*cuda, m, unaligned, false, false),
                       "fp32 storage: adamw_float_gradients is adamw" + what);
  }
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1000003}}) {
    for (bool unaligned : {false, true}) {
      const std::vector<float> x = random_floats(n, 81, 3.0f);
      Buffers cpu_buffers(*cpu), cuda_buffers(*cuda);
      double expected = 0;
      cpu->accumulate_float_sum_of_squares(&expected, cpu_buffers.upload(x, unaligned), n);
      double* accumulator = cuda_buffers.upload(std::vector<double>{0.0});
      cuda->accumulate_float_sum_of_squares(accumulator, cuda_buffers.upload(x, unaligned), n);
      const double actual = cuda_buffers.download(accumulator, 1)[0];
      EXPECT_NEAR(actual, expected, kDoubleTolerance * expected) << "n " << n;
      if (!bf16()) {
        EXPECT_EQ(actual, cuda->sum_of_squares(cuda_buffers.upload_storage(x, unaligned), n));
      }
    }
  }
}

// ---- determinism: two runs, bitwise ----------------------------------------------------------

TEST_P(CudaOps, DeterministicTokenEmbeddingBackward) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  const int num_tokens = 4096, vocab = 50, channels = 96;
  const std::vector<int32_t> tokens = random_ints(num_tokens, 90, 0, vocab);
  const std::vector<float> dout = random_floats(static_cast<size_t>(num_tokens) * channels, 91);
  auto run = [&] {
    Buffers buffers(*cuda);
    void* dwte = buffers.upload_storage(random_floats(static_cast<size_t>(vocab) * channels, 92));
    cuda->token_embedding_backward(dwte, buffers.upload_storage(dout), buffers.upload(tokens),
                                   num_tokens, 0, vocab, channels);
    return buffers.download_storage(dwte, static_cast<size_t>(vocab) * channels);
  };
  expect_equal(run(), run(), "token embedding backward run to run");
}

TEST_P(CudaOps, DeterministicLayerNormBackward) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  expect_all_equal(layernorm_run(*cuda, 4096, 768, false), layernorm_run(*cuda, 4096, 768, false),
                   "layernorm 4096x768 run to run");
}

TEST_P(CudaOps, DeterministicSumOfSquares) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  const std::vector<float> x = random_floats(3000017, 93);
  Buffers buffers(*cuda);
  const void* device_x = buffers.upload_storage(x);
  const double first = cuda->sum_of_squares(device_x, x.size());
  for (int run = 0; run < 3; run++) EXPECT_EQ(cuda->sum_of_squares(device_x, x.size()), first);
}

}  // namespace
}  // namespace paraplan::kernels
