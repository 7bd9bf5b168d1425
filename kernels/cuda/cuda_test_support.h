// cuda_test_support.h: what the CUDA backend's op tests (cuda_ops_test.cc,
// cuda_attention_test.cc) share: tolerances against the CPU backend per
// storage dtype, the gtest fixture that runs a test once per storage dtype
// (and skips it, visibly, without a GPU), the CUDA Ops in TF32 or strict fp32
// GEMM mode and with either attention implementation, seeded random inputs,
// backend buffers that convert to and from the storage dtype and free
// themselves, and the comparisons of kernels/testing/tensor_compare.h (a
// failure's full report, its tensors dumped). Test code only.
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

#include "kernels/dtype.h"
#include "kernels/ops.h"
#include "kernels/testing/tensor_compare.h"

namespace paraplan::kernels::cuda_test_support {

// Tolerances: max |cuda - cpu| over a tensor, divided by max |cpu| (so a
// near-zero element with cancellation does not dominate). The CPU backend in
// the same storage dtype is the reference: both widen the same inputs, compute
// in fp32 and round each storage output once, so they differ only by the fp32
// differences below, and, in bf16, by where those push a value across a
// rounding boundary.
// Strict fp32: the backends differ in summation order (trees vs sequential
// loops), in exp (CUDA expf vs the CPU's exp_approx, each within 2 ulp) and in
// FMA contraction: a few ulp per op, ~1e-6 relative; 2e-5 leaves room for
// sums over a few hundred terms. Also the tolerance of every fp32 output
// (mean/rstd, losses, master weights, moments) computed from bf16 inputs:
// both backends see the same widened values.
inline constexpr double kStrictTolerance = 2e-5;
// TF32 GEMMs round their inputs to 10 mantissa bits (2^-11 = 4.9e-4 relative,
// 2^-10 where truncated), so each product carries ~1e-3 relative error;
// random-sign sums average it, leaving ~1e-3 relative to the largest output.
inline constexpr double kTf32Tolerance = 5e-3;
// bf16 storage outputs: bf16 keeps 8 significant bits, so one ulp of a value v
// is at most 2^-7 |v| <= 2^-7 max|cpu| = 7.8e-3 relative. When the two fp32
// results straddle a rounding boundary (any fp32-level difference can), the
// rounded outputs differ by one ulp; 1e-2 allows that one ulp and the fp32
// noise, while an indexing error or a second rounding of a sum (errors of
// several ulp, or O(1)) fails it.
inline constexpr double kBf16Tolerance = 1e-2;
// bf16 GEMM-like sums (linear layers, attention's gradients): cuBLAS's tensor
// cores multiply bf16 exactly but accumulate in their own order and
// alignment, and attention's gradients add a one-ulp step of the accumulated
// dqkv (which starts nonzero) to the compared difference: up to ~2 ulp.
inline constexpr double kBf16SumTolerance = 2e-2;
// sum_of_squares accumulates in double on both; only the order differs.
inline constexpr double kDoubleTolerance = 1e-10;

// The tolerance of an op's storage outputs in this dtype: `fp32` (the op's
// fp32 tolerance) for fp32 storage, `bf16` for bf16.
inline double storage_tolerance(DType dtype, double fp32, double bf16 = kBf16Tolerance) {
  return dtype == DType::kBFloat16 ? bf16 : fp32;
}

// Sets (value non-null) or unsets an environment variable for its lifetime,
// then restores what was there: the CUDA Ops read their switches
// (PARAPLAN_CUDA_TF32, PARAPLAN_CUDA_ATTENTION) when they are made.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    const char* saved = std::getenv(name);
    had_value_ = saved != nullptr;
    if (had_value_) saved_ = saved;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnvironment() {
    if (had_value_) {
      setenv(name_.c_str(), saved_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  std::string name_, saved_;
  bool had_value_ = false;
};

// The CUDA backend with TF32 GEMMs (the default) or strict fp32
// (PARAPLAN_CUDA_TF32=0; bf16 GEMMs ignore it); the environment is restored afterwards.
inline std::unique_ptr<Ops> make_cuda(bool tf32, DType storage = DType::kFloat32) {
  const ScopedEnvironment mode("PARAPLAN_CUDA_TF32", tf32 ? "1" : "0");
  return make_cuda_ops(0, storage);
}

// The CUDA backend (TF32 GEMMs) with one of its switches (PARAPLAN_CUDA_OVERLAP,
// PARAPLAN_CUDA_GRAPHS, ...) set to 1 or 0.
inline std::unique_ptr<Ops> make_cuda_switched(const char* variable, bool on, DType storage) {
  const ScopedEnvironment mode(variable, on ? "1" : "0");
  return make_cuda(true, storage);
}

// The CUDA backend (TF32 GEMMs) with PARAPLAN_CUDA_ATTENTION = attention:
// nullptr leaves it unset (the default, auto: cuDNN's SDPA for bf16 with
// head_dim 64 or 128 where it loads, else the own kernels), "own" paraplan's
// kernels (bf16 tensor cores where they apply), "fma" the FMA attention
// kernels, "cudnn" cuDNN's SDPA (throws without it).
inline std::unique_ptr<Ops> make_cuda_attention(const char* attention, DType storage) {
  const ScopedEnvironment mode("PARAPLAN_CUDA_ATTENTION", attention);
  return make_cuda(true, storage);
}

// The reference: the CPU backend, one OpenBLAS thread, the same storage dtype.
inline std::unique_ptr<Ops> make_cpu(DType storage) {
  return make_cpu_ops(1, storage);
}

// A test run once per storage dtype (fp32, bf16), skipped without a GPU.
class StorageTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  }
  DType dtype() const { return GetParam(); }
  bool bf16() const { return GetParam() == DType::kBFloat16; }
};

inline const auto kStorageDtypes = ::testing::Values(DType::kFloat32, DType::kBFloat16);
inline std::string storage_test_name(const ::testing::TestParamInfo<DType>& info) {
  return dtype_name(info.param);
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

// The values as a tensor of dtype holds them (bf16: rounded to nearest even).
inline std::vector<float> round_to(DType dtype, std::vector<float> values) {
  if (dtype == DType::kBFloat16) {
    for (float& value : values) value = round_to_bfloat16(value);
  }
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

  // Raw elements (fp32 statistics, int32 tokens and targets).
  template <typename T>
  T* upload(const std::vector<T>& host, bool unaligned = false) {
    // unaligned: one element past the allocation's start, so only 4-byte
    // aligned; exercises the scalar (non-vector) kernel paths.
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

  // A storage tensor (the Ops' dtype) holding `host` converted (bf16: rounded).
  // unaligned: one storage element past the allocation's start (2 bytes for
  // bf16), so the 16-byte vector paths do not apply.
  void* upload_storage(const std::vector<float>& host, bool unaligned = false) {
    const size_t element = ops_.storage_bytes(1);
    const size_t extra = unaligned ? element : 0;
    void* pointer = static_cast<char*>(allocate(ops_.storage_bytes(host.size()) + extra)) + extra;
    std::vector<unsigned char> converted(ops_.storage_bytes(host.size()));
    host_from_float(converted.data(), host.data(), ops_.storage_dtype(), host.size());
    ops_.copy_from_host(pointer, converted.data(), converted.size());
    return pointer;
  }
  // n storage elements, widened to floats.
  std::vector<float> download_storage(const void* pointer, size_t n) {
    std::vector<unsigned char> raw(ops_.storage_bytes(n));
    ops_.copy_to_host(raw.data(), pointer, raw.size());
    std::vector<float> host(n);
    host_to_float(host.data(), raw.data(), ops_.storage_dtype(), n);
    return host;
  }
  void* allocate_storage(size_t n) { return allocate(ops_.storage_bytes(n)); }
  float* allocate_floats(size_t n) { return static_cast<float*>(allocate(n * sizeof(float))); }

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

// The comparisons (kernels/testing/tensor_compare.h), actual = CUDA, expected
// = CPU: expect_close(actual, expected, tolerance, what) (max |cuda - cpu| <=
// tolerance * max |cpu|), expect_all_close(actual, expected, tolerances or
// tolerance, what) (tensor t within tolerances[t], the last for the rest,
// named "<what> output <t>"), expect_equal / expect_all_equal (bitwise, as
// EXPECT_EQ on vectors: -0 == +0). Each prints a `[ compare ]` line with its
// measured error and records it as a test property; a failure reports the
// count outside, the first 10 elements, NaN and Inf counts, and dumps both
// tensors to PARAPLAN_TEST_DUMP_DIR when set.
using tensor_compare::expect_all_close;
using tensor_compare::expect_all_equal;
using tensor_compare::expect_close;
using tensor_compare::expect_equal;
using tensor_compare::FloatEquality;

}  // namespace paraplan::kernels::cuda_test_support
