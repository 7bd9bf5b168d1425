// cpu_gradient_write_test.cc: the CPU backend's GradientWrite::kOverwrite
// (kernels/ops.h) for the four ops that take it (linear_backward's dinp,
// gelu_backward, swiglu_backward, attention_backward), in fp32 and bf16
// storage: an input gradient overwritten into a buffer of NaN (a stray read of
// the old value shows as NaN) equals the same gradient accumulated into zeros,
// as values (-0 == +0: the GEMMs' beta = 0 may give -0 where 0 + -0 gives
// +0), and the parameter gradients still accumulate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

// n values from an LCG in [-amplitude, amplitude).
std::vector<float> random_values(size_t n, uint32_t seed, float amplitude = 1.0f) {
  std::vector<float> values(n);
  uint32_t state = seed * 2654435761u + 1u;
  for (float& value : values) {
    state = state * 1664525u + 1013904223u;
    value = amplitude * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
  }
  return values;
}

// A storage tensor of the CPU backend (host memory) in a given dtype.
class Storage {
 public:
  Storage(DType dtype, const std::vector<float>& values)
      : dtype_(dtype), size_(values.size()), words_((size_ * dtype_bytes(dtype) + 3) / 4 + 1) {
    host_from_float(words_.data(), values.data(), dtype_, size_);
  }
  void* data() { return words_.data(); }
  std::vector<float> values() const {
    std::vector<float> out(size_);
    host_to_float(out.data(), words_.data(), dtype_, size_);
    return out;
  }

 private:
  DType dtype_;
  size_t size_;
  std::vector<uint32_t> words_;  // 4-byte aligned, at least one word
};

// A gradient buffer's start: zeros to accumulate into, NaN to overwrite.
std::vector<float> start_for(GradientWrite write, size_t n) {
  return std::vector<float>(n, write == GradientWrite::kOverwrite ? std::nanf("") : 0.0f);
}

class GradientWriteTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  std::unique_ptr<Ops> ops_ = make_cpu_ops(1, GetParam());
};

INSTANTIATE_TEST_SUITE_P(Storage, GradientWriteTest,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

struct LinearCase {
  int rows, in_features, out_features;
  bool weights;  // dweight and dbias too (they start nonzero and accumulate)
};

// dinp, then dweight and dbias when the case has them.
std::vector<std::vector<float>> linear_gradients(Ops& ops, DType dtype, const LinearCase& c,
                                                 GradientWrite write) {
  const size_t in_n = static_cast<size_t>(c.rows) * c.in_features;
  const size_t weight_n = static_cast<size_t>(c.out_features) * c.in_features;
  Storage inp(dtype, random_values(in_n, 1)), weight(dtype, random_values(weight_n, 2, 0.3f));
  Storage dout(dtype, random_values(static_cast<size_t>(c.rows) * c.out_features, 3));
  Storage dinp(dtype, start_for(write, in_n)), dweight(dtype, random_values(weight_n, 4)),
      dbias(dtype, random_values(c.out_features, 5));
  ops.linear_backward(dinp.data(), c.weights ? dweight.data() : nullptr,
                      c.weights ? dbias.data() : nullptr, dout.data(), inp.data(), weight.data(),
                      c.rows, c.in_features, c.out_features, write);
  std::vector<std::vector<float>> result{dinp.values()};
  if (c.weights) {
    result.push_back(dweight.values());
    result.push_back(dbias.values());
  }
  return result;
}

TEST_P(GradientWriteTest, LinearOverwriteEqualsAccumulateIntoZeros) {
  // out_features 0: a sum over nothing, which overwriting writes as zeros.
  for (const LinearCase& c : {LinearCase{5, 7, 3, true}, LinearCase{33, 16, 40, true},
                              LinearCase{64, 48, 96, false}, LinearCase{4, 6, 0, false}}) {
    const std::string what = std::to_string(c.rows) + "x" + std::to_string(c.in_features) + "->" +
                             std::to_string(c.out_features);
    const auto overwritten = linear_gradients(*ops_, dtype(), c, GradientWrite::kOverwrite);
    EXPECT_EQ(overwritten, linear_gradients(*ops_, dtype(), c, GradientWrite::kAccumulate)) << what;
    for (float value : overwritten[0]) ASSERT_FALSE(std::isnan(value)) << what;
  }
}

TEST_P(GradientWriteTest, GeluOverwriteEqualsAccumulateIntoZeros) {
  std::vector<float> inp = random_values(37, 6, 6.0f);
  for (float x : {-30.0f, -9.0f, -0.0f, 0.0f, 9.0f, 30.0f}) inp.push_back(x);
  const std::vector<float> dout = random_values(inp.size(), 7);
  auto run = [&](GradientWrite write) {
    Storage dinp(dtype(), start_for(write, inp.size())), x(dtype(), inp), dy(dtype(), dout);
    ops_->gelu_backward(dinp.data(), x.data(), dy.data(), inp.size(), write);
    return dinp.values();
  };
  EXPECT_EQ(run(GradientWrite::kOverwrite), run(GradientWrite::kAccumulate));
}

TEST_P(GradientWriteTest, SwigluOverwriteEqualsAccumulateIntoZeros) {
  for (auto [rows, hidden] : {std::pair{3, 5}, std::pair{4, 16}}) {
    const size_t n = static_cast<size_t>(rows) * hidden;
    const std::vector<float> gate_up = random_values(2 * n, 8, 6.0f), dout = random_values(n, 9);
    auto run = [&](GradientWrite write) {
      Storage dgate_up(dtype(), start_for(write, 2 * n)), input(dtype(), gate_up),
          dy(dtype(), dout);
      ops_->swiglu_backward(dgate_up.data(), input.data(), dy.data(), rows, hidden, write);
      return dgate_up.values();
    };
    EXPECT_EQ(run(GradientWrite::kOverwrite), run(GradientWrite::kAccumulate))
        << rows << "x" << hidden;
  }
}

struct AttentionCase {
  int batch, seq_len, heads, kv_heads, head_dim;
};

TEST_P(GradientWriteTest, AttentionOverwriteEqualsAccumulateIntoZeros) {
  // Tiles of 64 (three, the last partial), of 128 (from T = 512), grouped KV
  // heads (each KV head's first product comes from its group's first query
  // head), one token.
  for (const AttentionCase& c : {AttentionCase{2, 150, 4, 2, 8}, AttentionCase{2, 33, 3, 3, 8},
                                 AttentionCase{1, 520, 2, 1, 4}, AttentionCase{1, 1, 2, 2, 4}}) {
    const size_t rows = static_cast<size_t>(c.batch) * c.seq_len;
    const size_t qkv_n = rows * (c.heads + 2 * c.kv_heads) * c.head_dim;
    const size_t out_n = rows * c.heads * c.head_dim;
    Storage qkv(dtype(), random_values(qkv_n, 10, 1.5f)), out(dtype(), std::vector<float>(out_n));
    Storage dout(dtype(), random_values(out_n, 11));
    std::vector<float> logsumexp(rows * c.heads), scratch(rows * c.heads);
    ops_->attention_forward(out.data(), logsumexp.data(), qkv.data(), c.batch, c.seq_len, c.heads,
                            c.kv_heads, c.head_dim);
    auto run = [&](GradientWrite write) {
      Storage dqkv(dtype(), start_for(write, qkv_n));
      ops_->attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                               logsumexp.data(), c.batch, c.seq_len, c.heads, c.kv_heads,
                               c.head_dim, write);
      return dqkv.values();
    };
    EXPECT_EQ(run(GradientWrite::kOverwrite), run(GradientWrite::kAccumulate))
        << "B=" << c.batch << " T=" << c.seq_len << " H=" << c.heads << " Hkv=" << c.kv_heads
        << " D=" << c.head_dim;
  }
}

// Accumulating still adds: the old value plus what overwriting writes.
TEST_P(GradientWriteTest, AccumulateAddsToWhatOverwriteWrites) {
  const size_t n = 40;
  const std::vector<float> inp = random_values(n, 12, 3.0f), dout = random_values(n, 13);
  const std::vector<float> old = random_values(n, 14);
  Storage x(dtype(), inp), dy(dtype(), dout),
      overwritten(dtype(), start_for(GradientWrite::kOverwrite, n)), accumulated(dtype(), old);
  ops_->gelu_backward(overwritten.data(), x.data(), dy.data(), n, GradientWrite::kOverwrite);
  ops_->gelu_backward(accumulated.data(), x.data(), dy.data(), n, GradientWrite::kAccumulate);
  const std::vector<float> g = overwritten.values(), sum = accumulated.values();
  const std::vector<float> old_stored = Storage(dtype(), old).values();
  for (size_t i = 0; i < n; i++) {
    // bf16: g was rounded once, the sum once more; both are within an ulp.
    const float tolerance = dtype() == DType::kBFloat16 ? 0x1p-7f * 4 : 1e-6f;
    EXPECT_NEAR(sum[i], old_stored[i] + g[i], tolerance) << i;
  }
}

}  // namespace
}  // namespace paraplan::kernels
