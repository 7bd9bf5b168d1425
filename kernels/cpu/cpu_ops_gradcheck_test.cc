// cpu_ops_gradcheck_test.cc: finite-difference gradient checks of every CPU
// backward op in kernels/ops.h, plus the "backward accumulates" contract.
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
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

constexpr float kFiniteDifferenceStep = 1e-2f;
constexpr double kRelativeTolerance = 2e-3;
constexpr double kAbsoluteTolerance = 1e-4;

// Reproducible uniform values in [low, high) from splitmix64 (the standard
// library's distributions differ between implementations).
std::vector<float> random_vector(size_t n, uint64_t seed, float low = -1.0f, float high = 1.0f) {
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

double weighted_sum(const std::vector<float>& out, const std::vector<float>& probe) {
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); i++) sum += static_cast<double>(out[i]) * probe[i];
  return sum;
}

// Compares `analytic` (the gradient the backward added) with central
// differences of `objective` with respect to each element of `input`.
void expect_gradient_matches(const std::string& name, std::vector<float>& input,
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
std::vector<float> added(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<float> difference(after.size());
  for (size_t i = 0; i < after.size(); i++) difference[i] = after[i] - before[i];
  return difference;
}

// Calls `backward` twice on zeroed gradients and expects the second call to
// double them: backward accumulates, it does not overwrite.
void expect_backward_accumulates(const std::string& name,
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

class CpuGradientCheck : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

TEST_F(CpuGradientCheck, TokenAndPositionEmbedding) {
  const int batch = 2, seq_len = 3, channels = 4;
  const int vocab_start = 2, vocab_local = 4;  // this rank owns tokens 2..5
  // 9 and 0 lie outside the local range; 3 repeats, so its row accumulates twice.
  const std::vector<int32_t> tokens = {3, 5, 2, 9, 0, 3};
  const int num_tokens = batch * seq_len;
  std::vector<float> wte = random_vector(vocab_local * channels, 1);
  std::vector<float> wpe = random_vector(seq_len * channels, 2);
  const std::vector<float> probe = random_vector(num_tokens * channels, 3);
  std::vector<float> out(num_tokens * channels);
  auto objective = [&] {
    ops->token_embedding_forward(out.data(), tokens.data(), wte.data(), num_tokens, vocab_start,
                                 vocab_local, channels);
    ops->position_embedding_forward(out.data(), wpe.data(), batch, seq_len, channels);
    return weighted_sum(out, probe);
  };
  // Start from random gradients so the check sees what backward adds.
  std::vector<float> dwte_before = random_vector(wte.size(), 4);
  std::vector<float> dwpe_before = random_vector(wpe.size(), 5);
  std::vector<float> dwte = dwte_before, dwpe = dwpe_before;
  auto backward = [&] {
    ops->token_embedding_backward(dwte.data(), probe.data(), tokens.data(), num_tokens, vocab_start,
                                  vocab_local, channels);
    ops->position_embedding_backward(dwpe.data(), probe.data(), batch, seq_len, channels);
  };
  backward();
  expect_gradient_matches("dwte", wte, added(dwte, dwte_before), objective);
  expect_gradient_matches("dwpe", wpe, added(dwpe, dwpe_before), objective);
  expect_backward_accumulates("embedding", {&dwte, &dwpe}, backward);
}

TEST_F(CpuGradientCheck, LayerNorm) {
  const int rows = 3, channels = 5;
  const float epsilon = 1e-5f;
  std::vector<float> inp = random_vector(rows * channels, 11, -2.0f, 2.0f);
  std::vector<float> weight = random_vector(channels, 12, 0.5f, 1.5f);
  std::vector<float> bias = random_vector(channels, 13);
  const std::vector<float> probe = random_vector(rows * channels, 14);
  std::vector<float> out(rows * channels), mean(rows), rstd(rows);
  auto objective = [&] {
    ops->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(),
                           bias.data(), rows, channels, epsilon);
    return weighted_sum(out, probe);
  };
  objective();  // fills mean and rstd for the backward
  std::vector<float> dinp_before = random_vector(inp.size(), 15);
  std::vector<float> dweight_before = random_vector(weight.size(), 16);
  std::vector<float> dbias_before = random_vector(bias.size(), 17);
  std::vector<float> dinp = dinp_before, dweight = dweight_before, dbias = dbias_before;
  auto backward = [&] {
    ops->layernorm_backward(dinp.data(), dweight.data(), dbias.data(), probe.data(), inp.data(),
                            weight.data(), mean.data(), rstd.data(), rows, channels);
  };
  backward();
  expect_gradient_matches("dinp", inp, added(dinp, dinp_before), objective);
  expect_gradient_matches("dweight", weight, added(dweight, dweight_before), objective);
  expect_gradient_matches("dbias", bias, added(dbias, dbias_before), objective);
  objective();  // restores the saved statistics of the unperturbed input
  expect_backward_accumulates("layernorm", {&dinp, &dweight, &dbias}, backward);
}

// Non-square on purpose, so a transposed GEMM argument would fail.
void check_linear(Ops& ops, bool with_bias, int rows, int in_features, int out_features) {
  const std::string name = with_bias ? "linear with bias" : "linear without bias";
  std::vector<float> inp = random_vector(rows * in_features, 21);
  std::vector<float> weight = random_vector(out_features * in_features, 22);
  std::vector<float> bias = random_vector(out_features, 23);
  const std::vector<float> probe = random_vector(rows * out_features, 24);
  std::vector<float> out(rows * out_features);
  auto objective = [&] {
    ops.linear_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr,
                       rows, in_features, out_features);
    return weighted_sum(out, probe);
  };
  std::vector<float> dinp_before = random_vector(inp.size(), 25);
  std::vector<float> dweight_before = random_vector(weight.size(), 26);
  std::vector<float> dbias_before = random_vector(bias.size(), 27);
  std::vector<float> dinp = dinp_before, dweight = dweight_before, dbias = dbias_before;
  ops.linear_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, probe.data(),
                      inp.data(), weight.data(), rows, in_features, out_features);
  expect_gradient_matches(name + " dinp", inp, added(dinp, dinp_before), objective);
  expect_gradient_matches(name + " dweight", weight, added(dweight, dweight_before), objective);
  if (with_bias) {
    expect_gradient_matches(name + " dbias", bias, added(dbias, dbias_before), objective);
  } else {
    EXPECT_EQ(dbias, dbias_before) << "a null dbias must be skipped";
  }

  // Each of dinp, dweight, dbias may be null independently.
  std::vector<float> dweight_alone = dweight_before;
  ops.linear_backward(nullptr, dweight_alone.data(), nullptr, probe.data(), inp.data(),
                      weight.data(), rows, in_features, out_features);
  EXPECT_EQ(dweight_alone, dweight);
  std::vector<float> dinp_alone = dinp_before;
  ops.linear_backward(dinp_alone.data(), nullptr, nullptr, probe.data(), inp.data(), weight.data(),
                      rows, in_features, out_features);
  EXPECT_EQ(dinp_alone, dinp);

  auto backward = [&] {
    ops.linear_backward(dinp.data(), dweight.data(), dbias.data(), probe.data(), inp.data(),
                        weight.data(), rows, in_features, out_features);
  };
  expect_backward_accumulates(name, {&dinp, &dweight, &dbias}, backward);
}

TEST_F(CpuGradientCheck, LinearWithBias) {
  check_linear(*ops, true, 3, 4, 5);
}

TEST_F(CpuGradientCheck, LinearWithoutBias) {
  check_linear(*ops, false, 4, 6, 3);
}

TEST_F(CpuGradientCheck, Gelu) {
  const size_t n = 16;
  std::vector<float> inp = random_vector(n, 31, -3.0f, 3.0f);
  const std::vector<float> probe = random_vector(n, 32);
  std::vector<float> out(n);
  auto objective = [&] {
    ops->gelu_forward(out.data(), inp.data(), n);
    return weighted_sum(out, probe);
  };
  std::vector<float> dinp_before = random_vector(n, 33);
  std::vector<float> dinp = dinp_before;
  auto backward = [&] { ops->gelu_backward(dinp.data(), inp.data(), probe.data(), n); };
  backward();
  expect_gradient_matches("gelu dinp", inp, added(dinp, dinp_before), objective);
  expect_backward_accumulates("gelu", {&dinp}, backward);
}

void check_attention(Ops& ops, int batch, int seq_len, int num_heads, int head_dim) {
  const int channels = num_heads * head_dim;
  // Scores of a few units, so the softmax is far from uniform.
  std::vector<float> qkv = random_vector(batch * seq_len * 3 * channels, 41, -1.5f, 1.5f);
  const std::vector<float> probe = random_vector(batch * seq_len * channels, 42);
  std::vector<float> out(batch * seq_len * channels);
  std::vector<float> logsumexp(batch * num_heads * seq_len);
  auto objective = [&] {
    ops.attention_forward(out.data(), logsumexp.data(), qkv.data(), batch, seq_len, num_heads,
                          head_dim);
    return weighted_sum(out, probe);
  };
  objective();  // fills out and logsumexp for the backward
  std::vector<float> scratch(logsumexp.size());
  std::vector<float> dqkv_before = random_vector(qkv.size(), 43);
  std::vector<float> dqkv = dqkv_before;
  auto backward = [&] {
    // Fill scratch with garbage: the backward must not depend on its contents.
    std::fill(scratch.begin(), scratch.end(), 1e30f);
    ops.attention_backward(dqkv.data(), scratch.data(), probe.data(), qkv.data(), out.data(),
                           logsumexp.data(), batch, seq_len, num_heads, head_dim);
  };
  backward();
  expect_gradient_matches("attention dqkv", qkv, added(dqkv, dqkv_before), objective);
  objective();  // restores out and logsumexp of the unperturbed input
  expect_backward_accumulates("attention", {&dqkv}, backward);
}

TEST_F(CpuGradientCheck, Attention) {
  check_attention(*ops, 2, 5, 2, 3);
}

TEST_F(CpuGradientCheck, AttentionAcrossTiles) {
  // 70 tokens: two query blocks and key chunks (64 + 6), so the online
  // softmax's rescaling and the off-diagonal tiles carry gradient.
  check_attention(*ops, 1, 70, 1, 4);
}

TEST_F(CpuGradientCheck, SoftmaxCrossEntropy) {
  const int rows = 4, vocab = 7;
  std::vector<float> logits = random_vector(rows * vocab, 51, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {0, 6, 3, 3};
  std::vector<float> losses(rows);
  // The objective is the mean loss, so loss_scale = 1 / rows.
  auto objective = [&] {
    ops->softmax_cross_entropy(losses.data(), nullptr, logits.data(), targets.data(), rows, vocab,
                               1.0f / rows);
    double sum = 0.0;
    for (float loss : losses) sum += loss;
    return sum / rows;
  };
  std::vector<float> dlogits(logits.size(), 123.0f);  // overwritten, not accumulated
  ops->softmax_cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), rows,
                             vocab, 1.0f / rows);
  expect_gradient_matches("dlogits", logits, dlogits, objective);
}

}  // namespace
}  // namespace paraplan::kernels
