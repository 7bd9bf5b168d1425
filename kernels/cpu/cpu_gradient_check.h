// cpu_gradient_check.h: the finite-difference gradient check the CPU op tests
// share (cpu_ops_gradcheck_test.cc, cpu_llama_ops_test.cc), and the check of
// the "backward accumulates" contract. Test-only.
//
// Method: for a scalar objective L = sum(out * probe) with fixed random probe
// weights (or the mean loss, for cross-entropy), the analytic gradient is the
// op's backward with dout = probe. The numerical gradient of each input element
// is the central difference (L(x + eps) - L(x - eps)) / (2 eps), where the
// forward runs in float (the op under test) and L is summed in double.
//
// Tolerances: eps = 1e-2; an element passes when
//   |analytic - numeric| <= kAbsoluteTolerance + kRelativeTolerance * max(|analytic|, |numeric|)
// with kRelativeTolerance = 2e-3 and kAbsoluteTolerance = 1e-4. Why eps = 1e-2
// rather than 1e-3: the forward runs in float, so each changed output of size
// ~1 carries ~6e-8 rounding error, which dividing by 2 eps amplifies to ~3e-5
// at eps = 1e-3 (observed worst case 1.7e-4), while the truncation error of the
// central difference, ~eps^2 / 6 * f''', is still ~1e-5 at eps = 1e-2
// (observed worst case over all checks 2.5e-5). A 1% error in a gradient of
// size ~1 fails. Each check also asserts the gradient is not trivially zero.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace paraplan::kernels::gradient_check {

inline constexpr float kFiniteDifferenceStep = 1e-2f;
inline constexpr double kRelativeTolerance = 2e-3;
inline constexpr double kAbsoluteTolerance = 1e-4;

// Reproducible uniform values in [low, high) from splitmix64 (the standard
// library's distributions differ between implementations).
inline std::vector<float> random_vector(size_t n, uint64_t seed, float low = -1.0f,
                                        float high = 1.0f) {
  std::vector<float> values(n);
  uint64_t state = seed;
  for (size_t i = 0; i < n; i++) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double unit = static_cast<double>(z >> 11) / 9007199254740992.0;  // [0, 1)
    values[i] = static_cast<float>(low + (high - low) * unit);
  }
  return values;
}

inline double weighted_sum(const std::vector<float>& out, const std::vector<float>& probe) {
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); i++) sum += static_cast<double>(out[i]) * probe[i];
  return sum;
}

// Compares `analytic` (the gradient the backward added) with central
// differences of `objective` with respect to each element of `input`.
inline void expect_gradient_matches(const std::string& name, std::vector<float>& input,
                                    const std::vector<float>& analytic,
                                    const std::function<double()>& objective) {
  ASSERT_EQ(input.size(), analytic.size()) << name;
  double largest_gradient = 0.0;
  for (size_t j = 0; j < input.size(); j++) {
    const float original = input[j];
    const float plus = original + kFiniteDifferenceStep;
    const float minus = original - kFiniteDifferenceStep;
    input[j] = plus;
    const double objective_plus = objective();
    input[j] = minus;
    const double objective_minus = objective();
    input[j] = original;
    // Divide by the step actually taken in float, not the nominal 2 eps.
    const double numeric = (objective_plus - objective_minus) / (static_cast<double>(plus) - minus);
    const double difference = std::fabs(analytic[j] - numeric);
    const double bound =
        kAbsoluteTolerance +
        kRelativeTolerance * std::max(std::fabs(numeric), std::fabs(double{analytic[j]}));
    EXPECT_LE(difference, bound) << name << "[" << j << "]: analytic " << analytic[j] << " numeric "
                                 << numeric;
    largest_gradient = std::max(largest_gradient, std::fabs(numeric));
  }
  EXPECT_GT(largest_gradient, 1e-2) << name << ": the gradient is trivially zero";
}

// Returns after - before, the amount a backward call added.
inline std::vector<float> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<float> difference(after.size());
  for (size_t i = 0; i < after.size(); i++) difference[i] = after[i] - before[i];
  return difference;
}

// Calls `backward` twice on zeroed gradients and expects the second call to
// double them: backward accumulates, it does not overwrite.
inline void expect_backward_accumulates(const std::string& name,
                                        const std::vector<std::vector<float>*>& gradients,
                                        const std::function<void()>& backward) {
  for (auto* gradient : gradients) std::fill(gradient->begin(), gradient->end(), 0.0f);
  backward();
  std::vector<std::vector<float>> once;
  for (auto* gradient : gradients) once.push_back(*gradient);
  backward();
  for (size_t g = 0; g < gradients.size(); g++) {
    bool any_nonzero = false;
    for (size_t i = 0; i < once[g].size(); i++) {
      const float expected = 2.0f * once[g][i];
      EXPECT_NEAR((*gradients[g])[i], expected, 1e-6 + 1e-5 * std::fabs(expected))
          << name << " gradient " << g << "[" << i << "]";
      any_nonzero = any_nonzero || once[g][i] != 0.0f;
    }
    EXPECT_TRUE(any_nonzero) << name << " gradient " << g << " is all zero";
  }
}

}  // namespace paraplan::kernels::gradient_check
