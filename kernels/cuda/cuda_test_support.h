// cuda_test_support.h: what the CUDA backend's op tests (cuda_ops_test.cc,
// cuda_attention_test.cc) share: tolerances against the CPU backend, the
// CUDA Ops in TF32 or strict fp32 mode, seeded random inputs, backend buffers
// that free themselves, and max-error comparisons. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace paraplan::kernels::cuda_test_support {

// Tolerances: max |cuda - cpu| over a tensor, divided by max |cpu| (so a
// near-zero element with cancellation does not dominate).
// Strict fp32: the backends differ in summation order (trees vs sequential
// loops), in exp (CUDA expf vs the CPU's exp_approx, each within 2 ulp) and in
// FMA contraction: a few ulp per op, ~1e-6 relative; 2e-5 leaves room for
// sums over a few hundred terms.
inline constexpr double kStrictTolerance = 2e-5;
// TF32 GEMMs round their inputs to 10 mantissa bits (2^-11 = 4.9e-4 relative,
// 2^-10 where truncated), so each product carries ~1e-3 relative error;
// random-sign sums average it, leaving ~1e-3 relative to the largest output.
inline constexpr double kTf32Tolerance = 5e-3;
// sum_of_squares accumulates in double on both; only the order differs.
inline constexpr double kDoubleTolerance = 1e-10;

// The CUDA backend with TF32 GEMMs (the default) or strict fp32
// (PARAPLAN_CUDA_TF32=0); the environment is restored afterwards.
inline std::unique_ptr<Ops> make_cuda(bool tf32) {
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

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f,
                                        float shift = 0.0f) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-scale, scale);
  std::vector<float> values(n);
  for (float& value : values) value = distribution(generator) + shift;
  return values;
}

inline std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t low, int32_t high) {
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

inline void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
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

inline void expect_all_close(const Tensors& actual, const Tensors& expected, double tolerance,
                             const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t t = 0; t < actual.size(); t++) {
    expect_close(actual[t], expected[t], tolerance, what + " output " + std::to_string(t));
  }
}

}  // namespace paraplan::kernels::cuda_test_support
