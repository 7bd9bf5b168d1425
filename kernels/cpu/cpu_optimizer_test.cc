// cpu_optimizer_test.cc: the CPU backend's optimizer ops (kernels/ops.h):
// AdamW against a hand computation, a zero gradient, the gradient scale as a
// pre-scaled gradient bitwise, sum_of_squares, and both bitwise the same for
// every thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_ops_test_support.h"
#include "kernels/cpu/openblas_library.h"
#include "kernels/ops.h"

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

// The optimizer's passes run on the backend's threads (make_cpu_ops'
// num_threads): the same bits for 1, 2, 3 and 8 threads, for both storage
// dtypes, on a buffer of many tasks and blocks with a ragged end. The sum is
// checked against a long double sum too (its order is fixed, not arbitrary).
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
