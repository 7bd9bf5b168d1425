// cpu_optimizer_test.cc: the CPU backend's optimizer ops (kernels/ops.h):
// AdamW against a hand computation, a zero gradient, the gradient scale as a
// pre-scaled gradient bitwise, sum_of_squares, and both bitwise the same for
// every thread count; the fp32-gradient ops of ZeRO-2's fp32 shard
// (accumulate_into_float, adamw_float_gradients,
// accumulate_float_sum_of_squares) and the context-parallel ring's fp32
// sums (accumulate_float32) for both storage dtypes; adamw_runs bitwise the
// run-by-run adamw calls, and clip_scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops_test_support.h"
#include "kernels/cpu/openblas_library.h"
#include "kernels/ops.h"
#include "kernels/testing/adamw_runs_case.h"

namespace paraplan::kernels {
namespace {

// ---- optimizer -------------------------------------------------------------------------------

TEST_F(CpuOpsTest, AdamWMatchesHandComputation) {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.1; p = 1.
  // Step 1, g = 0.5: p = 1 * (1 - 0.01) = 0.99; m = 0.05, v = 0.00025;
  //   mhat = 0.5, vhat = 0.25; p = 0.99 - 0.1 * 0.5 / (0.5 + 1e-8) = 0.89.
  // Step 2, g = -0.25: p = 0.89 * 0.99 = 0.8811; m = 0.02, v = 0.00031225;
  //   mhat = 0.02 / 0.19, vhat = 0.00031225 / 0.001999;
  //   p = 0.8811 - 0.1 * mhat / (sqrt(vhat) + 1e-8) = 0.8544663.
  float param = 1.0f, first_moment = 0.0f, second_moment = 0.0f;
  float grad = 0.5f;
  AdamWStep hyperparameters{.learning_rate = 0.1f,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .epsilon = 1e-8f,
                            .weight_decay = 0.1f,
                            .step = 1};
  ops->adamw(&param, &param, &grad, &first_moment, &second_moment, 1, hyperparameters);
  EXPECT_NEAR(param, 0.89f, kTolerance);
  EXPECT_NEAR(first_moment, 0.05f, kTolerance);
  EXPECT_NEAR(second_moment, 0.00025f, 0.00025f * 1e-4f);  // 1 - 0.999f is inexact
  grad = -0.25f;
  hyperparameters.step = 2;
  ops->adamw(&param, &param, &grad, &first_moment, &second_moment, 1, hyperparameters);
  EXPECT_NEAR(param, 0.8544663f, kTolerance);
  EXPECT_NEAR(first_moment, 0.02f, kTolerance);
  EXPECT_NEAR(second_moment, 0.00031225f, 0.00031225f * 1e-4f);
}

TEST_F(CpuOpsTest, AdamWZeroGradientOnlyDecays) {
  std::vector<float> params = {2.0f, -4.0f}, grads = {0.0f, 0.0f};
  std::vector<float> first_moment = {0.0f, 0.0f}, second_moment = {0.0f, 0.0f};
  ops->adamw(params.data(), params.data(), grads.data(), first_moment.data(), second_moment.data(),
             2, {.learning_rate = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.5f});
  EXPECT_NEAR(params[0], 2.0f * (1.0f - 0.005f), kTolerance);
  EXPECT_NEAR(params[1], -4.0f * (1.0f - 0.005f), kTolerance);
}

TEST_F(CpuOpsTest, AdamWGradientScaleIsAPreScaledGradientBitwise) {
  // The clip factor rides in AdamW: scaling as it reads equals an AdamW step
  // over gradients scaled beforehand (the pass it replaces), bitwise.
  const size_t n = 1000;
  std::vector<float> grads(n), scaled(n);
  for (size_t i = 0; i < n; ++i) {
    grads[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
    scaled[i] = grads[i] * 0.2371f;
  }
  std::vector<float> folded(n, 0.5f), folded_m(n, 0), folded_v(n, 0);
  std::vector<float> separate(n, 0.5f), separate_m(n, 0), separate_v(n, 0);
  AdamWStep hyperparameters{.learning_rate = 1e-3f, .weight_decay = 0.1f};
  for (int step = 1; step <= 3; ++step) {
    hyperparameters.step = step;
    hyperparameters.gradient_scale = 0.2371f;
    ops->adamw(folded.data(), folded.data(), grads.data(), folded_m.data(), folded_v.data(), n,
               hyperparameters);
    hyperparameters.gradient_scale = 1.0f;
    ops->adamw(separate.data(), separate.data(), scaled.data(), separate_m.data(),
               separate_v.data(), n, hyperparameters);
  }
  EXPECT_EQ(folded, separate);
  EXPECT_EQ(folded_m, separate_m);
  EXPECT_EQ(folded_v, separate_v);
  // And the factor is applied at all: one step's first moment is
  // (1 - beta1) * gradient * factor.
  std::vector<float> once(n, 0.5f), once_m(n, 0), once_v(n, 0);
  hyperparameters.step = 1;
  hyperparameters.gradient_scale = 0.2371f;
  ops->adamw(once.data(), once.data(), grads.data(), once_m.data(), once_v.data(), n,
             hyperparameters);
  EXPECT_NEAR(once_m[5], 0.1f * grads[5] * 0.2371f, 1e-6f);
}

TEST_F(CpuOpsTest, SumOfSquares) {
  const std::vector<float> x = {1, 2, 3, -4};
  EXPECT_EQ(ops->sum_of_squares(x.data(), x.size()), 30.0);
  EXPECT_EQ(ops->sum_of_squares(x.data(), 0), 0.0);
  // 1e4^2 + 1000 * 1^2: a float accumulator would stay at 1e8 (its spacing
  // there is 8); the double accumulator is exact.
  std::vector<float> large(1001, 1.0f);
  large[0] = 1e4f;
  EXPECT_EQ(ops->sum_of_squares(large.data(), large.size()), 100001000.0);
}

// ---- fp32 gradients (ZeRO-2's shard) -----------------------------------------------------------

class FloatGradientOps : public ::testing::TestWithParam<DType> {
 protected:
  DType storage() const { return GetParam(); }
  std::unique_ptr<Ops> ops = make_cpu_ops(1, GetParam());
  // Host storage tensors of values (rounded to the storage dtype), and back.
  std::vector<char> stored(const std::vector<float>& values) const {
    std::vector<char> out(values.size() * dtype_bytes(storage()));
    host_from_float(out.data(), values.data(), storage(), values.size());
    return out;
  }
  std::vector<float> widened(const std::vector<char>& values) const {
    std::vector<float> out(values.size() / dtype_bytes(storage()));
    host_to_float(out.data(), values.data(), storage(), out.size());
    return out;
  }
};
INSTANTIATE_TEST_SUITE_P(Storage, FloatGradientOps,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// x += widen(y), one fp32 addition per element: 256 + 1 stays 257 (bf16
// holds 256 or 258 only), and the values are fp32's sums bitwise.
TEST_P(FloatGradientOps, AccumulateIntoFloatAddsWidenedValuesInFp32) {
  const size_t n = 1029;  // not a multiple of any vector width
  std::vector<float> x = pseudo_random(n, 7), y_values = pseudo_random(n, 8);
  x[3] = 256.0f, y_values[3] = 1.0f;
  const std::vector<char> y = stored(y_values);
  y_values = widened(y);
  std::vector<float> expected = x;
  for (size_t i = 0; i < n; ++i) expected[i] += y_values[i];
  ops->accumulate_into_float(x.data(), y.data(), n);
  EXPECT_EQ(x, expected);
  EXPECT_EQ(x[3], 257.0f);
}

// x += y, both fp32 whatever the storage: fp32's sums bitwise, y unrounded
// (1 + 2^-20 is no bf16 value: rounded, 0.5 + y would be 1.5).
TEST_P(FloatGradientOps, AccumulateFloat32AddsFp32ValuesUnrounded) {
  const size_t n = 1029;
  std::vector<float> x = pseudo_random(n, 9), y = pseudo_random(n, 10);
  x[3] = 0.5f, y[3] = 1.0f + 0x1p-20f;
  std::vector<float> expected = x;
  for (size_t i = 0; i < n; ++i) expected[i] += y[i];
  ops->accumulate_float32(x.data(), y.data(), n);
  EXPECT_EQ(x, expected);
  EXPECT_EQ(x[3], 1.5f + 0x1p-20f);
}

// AdamW from fp32 gradients is fp32 AdamW on the master weights, with the
// storage params their rounding: bitwise adamw given the same values as
// storage gradients where they are representable, and moved by the fp32
// values where they are not (bf16).
TEST_P(FloatGradientOps, AdamWFloatGradientsIsAdamWOnFp32Values) {
  const size_t n = (size_t{1} << 17) + 11;  // several tasks and a ragged end
  const std::vector<float> start = pseudo_random(n, 21), grads = pseudo_random(n, 22);
  const std::vector<float> representable = widened(stored(grads));
  AdamWStep hyperparameters{.learning_rate = 1e-2f, .beta2 = 0.95f, .weight_decay = 0.1f};
  struct Run {
    std::vector<float> master, m, v;
    std::vector<char> params;
  };
  auto run = [&](Ops& ops, const std::vector<float>& fp32_grads, const void* storage_grads) {
    Run r{start, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f), stored(start)};
    for (hyperparameters.step = 1; hyperparameters.step <= 2; ++hyperparameters.step) {
      hyperparameters.gradient_scale = 0.75f;
      if (storage_grads)
        ops.adamw(r.master.data(), r.params.data(), storage_grads, r.m.data(), r.v.data(), n,
                  hyperparameters);
      else
        ops.adamw_float_gradients(r.master.data(), r.params.data(), fp32_grads.data(), r.m.data(),
                                  r.v.data(), n, hyperparameters);
    }
    return r;
  };
  const std::vector<char> storage_grads = stored(grads);
  const Run from_float = run(*ops, representable, nullptr);
  const Run from_storage = run(*ops, {}, storage_grads.data());
  EXPECT_EQ(from_float.master, from_storage.master);
  EXPECT_EQ(from_float.m, from_storage.m);
  EXPECT_EQ(from_float.v, from_storage.v);
  EXPECT_EQ(from_float.params, from_storage.params);
  // The fp32 values themselves: fp32 AdamW's master weights, rounded into params.
  auto fp32 = make_cpu_ops(1, DType::kFloat32);
  const Run exact = run(*ops, grads, nullptr);
  Run reference{start, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f), {}};
  for (hyperparameters.step = 1; hyperparameters.step <= 2; ++hyperparameters.step)
    fp32->adamw(reference.master.data(), reference.master.data(), grads.data(), reference.m.data(),
                reference.v.data(), n, hyperparameters);
  EXPECT_EQ(exact.master, reference.master);
  EXPECT_EQ(exact.m, reference.m);
  EXPECT_EQ(exact.params, stored(reference.master));
  if (storage() == DType::kBFloat16) {
    EXPECT_NE(exact.master, from_float.master);  // the values bf16 would round do move it
  }
}

// The sum of squares of fp32 values, in sum_of_squares' order: bitwise the
// fp32 backend's, whatever the storage; 1 + 2^-12 keeps its low bits, which
// bf16 storage would round away.
TEST_P(FloatGradientOps, FloatSumOfSquaresSumsFp32ValuesAsTheFp32Backend) {
  const size_t n = (size_t{1} << 16) + 4099;
  std::vector<float> x = pseudo_random(n, 31);
  x[0] = 1.0f + 1.0f / 4096;
  auto fp32 = make_cpu_ops(1, DType::kFloat32);
  const double expected = fp32->sum_of_squares(x.data(), n);
  double accumulator = 0.5;
  ops->accumulate_float_sum_of_squares(&accumulator, x.data(), n);
  EXPECT_EQ(accumulator, 0.5 + expected);
  double single = 0;
  ops->accumulate_float_sum_of_squares(&single, x.data(), 1);
  EXPECT_EQ(single, double{x[0]} * x[0]);
}

// The optimizer's passes run on the backend's threads (make_cpu_ops'
// num_threads): the same bits for 1, 2, 3 and 8 threads, for both storage
// dtypes, on a buffer of many tasks and blocks with a ragged end. The sum is
// checked against a long double sum too (its order is fixed, not arbitrary).
TEST(CpuOptimizer, ClipScaleIsTorchsClipGradNormFactor) {
  EXPECT_EQ(clip_scale(100.0, 1.0f), static_cast<float>(1.0 / (10.0 + 1e-6)));
  EXPECT_EQ(clip_scale(0.25, 1.0f), 1.0f);  // norm 0.5 is under max_norm: no clip
  EXPECT_EQ(clip_scale(4.0, 2.0f), static_cast<float>(2.0 / (2.0 + 1e-6)));  // just below 1
  EXPECT_EQ(clip_scale(1e6, 0.0f), 1.0f);  // max_norm 0: clipping off
}

// Run lists as the distributed optimizer makes them, both dtypes, storage
// and fp32 gradients: one adamw_runs per step is the per-run adamw calls.
TEST(CpuOptimizer, AdamWRunsIsAdamWRunByRunBitwise) {
  namespace cases = adamw_runs_testing;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    std::unique_ptr<Ops> ops = make_cpu_ops(2, dtype);
    for (bool float_gradients : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (float_gradients ? " fp32 gradients" : ""));
      const cases::Result fused = cases::run_case(*ops, true, float_gradients);
      EXPECT_TRUE(cases::same_bits(fused, cases::run_case(*ops, false, float_gradients)));
      const cases::Changed changed = cases::changed_master_weights(fused);
      EXPECT_EQ(changed.in_runs, cases::run_elements());
      EXPECT_EQ(changed.in_gaps, 0u);
    }
  }
}

TEST(CpuOptimizerThreads, AdamWAndSumOfSquaresAreBitwiseTheSameForEveryThreadCount) {
  const int before = cpu::openblas_library().openblas_get_num_threads();
  const size_t n = (size_t{1} << 20) + 4099;
  const std::vector<float> start = pseudo_random(n, 41), grads = pseudo_random(n, 42);
  for (DType storage : {DType::kFloat32, DType::kBFloat16}) {
    std::vector<char> storage_grads(n * dtype_bytes(storage));
    host_from_float(storage_grads.data(), grads.data(), storage, n);
    long double reference = 0;
    for (size_t i = 0; i < n; i++) {
      const long double g = storage == DType::kBFloat16 ? round_to_bfloat16(grads[i]) : grads[i];
      reference += g * g;
    }
    std::vector<float> first_master, first_m, first_v;
    std::vector<char> first_params;
    double first_sum = 0;
    for (int threads : {1, 2, 3, 8}) {
      auto ops = make_cpu_ops(threads, storage);
      const double sum = ops->sum_of_squares(storage_grads.data(), n);
      EXPECT_NEAR(sum, static_cast<double>(reference), 1e-12 * static_cast<double>(reference));
      std::vector<float> master = start, m(n, 0.0f), v(n, 0.0f);
      std::vector<char> params(n * dtype_bytes(storage));
      host_from_float(params.data(), master.data(), storage, n);
      AdamWStep step{.learning_rate = 1e-2f, .beta2 = 0.95f, .weight_decay = 0.1f};
      for (step.step = 1; step.step <= 3; step.step++) {
        step.gradient_scale = 0.75f;
        void* out = storage == DType::kFloat32 ? static_cast<void*>(master.data()) : params.data();
        ops->adamw(master.data(), out, storage_grads.data(), m.data(), v.data(), n, step);
      }
      if (storage == DType::kFloat32) std::memcpy(params.data(), master.data(), n * 4);
      if (threads == 1) {
        first_sum = sum, first_master = master, first_m = m, first_v = v, first_params = params;
        // Every element moved: the step ran over the whole buffer.
        for (size_t i = 0; i < n; i += 4097) ASSERT_NE(master[i], start[i]) << i;
        ASSERT_NE(master[n - 1], start[n - 1]);
        continue;
      }
      SCOPED_TRACE(std::string(dtype_name(storage)) + ", " + std::to_string(threads) + " threads");
      EXPECT_EQ(std::memcmp(&sum, &first_sum, sizeof sum), 0);
      EXPECT_EQ(master, first_master);
      EXPECT_EQ(m, first_m);
      EXPECT_EQ(v, first_v);
      EXPECT_EQ(params, first_params);
    }
  }
  cpu::openblas_library().openblas_set_num_threads(before);  // the setting is process-wide
}

}  // namespace
}  // namespace paraplan::kernels
