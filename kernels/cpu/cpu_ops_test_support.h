// cpu_ops_test_support.h: test support shared by the CPU backend's op tests:
// the fixture (a CPU op set), the tolerance of hand-computed values and
// deterministic pseudo-random inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ops.h"

namespace paraplan::kernels {

// Hand-computed values are compared to float precision.
inline constexpr float kTolerance = 1e-6f;

class CpuOpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

// Deterministic values in [-1, 1) from a linear congruential generator.
inline std::vector<float> pseudo_random(size_t n, uint32_t seed) {
  std::vector<float> values(n);
  uint32_t state = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    values[i] = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
  }
  return values;
}

}  // namespace paraplan::kernels
