// cpu_attention_block_test.cc: the CPU backend's attention by blocks
// (kernels/cpu/cpu_attention_block.cc; kernels/ops.h attention_block_forward/
// backward, copy_rows) against the fused attention it generalises: one block
// of the whole sequence equals attention_forward/backward (multi-head and
// grouped KV heads, and T = 4096, timed); the load-balanced context-parallel
// layout over 2 and 4 ranks (the ring run of kernels/testing/
// attention_block_runs.h) gives the whole sequence's rows and gradients; a
// document mask equals attention run on each document alone, also split over
// ranks; rows that see no key of a block are left as they were (a first
// block: 0 and -inf), never NaN; copy_rows round trips a qkv tensor's
// key/value heads; bf16 storage equals fp32 on the rounded inputs, bitwise;
// runs are deterministic and batch entries independent. Every comparison
// prints its measured error (`[ compare ]`).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops_test_support.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"
#include "kernels/testing/attention_block_runs.h"
#include "kernels/testing/tensor_compare.h"

namespace paraplan::kernels {
namespace {

using namespace attention_block_testing;
using tensor_compare::expect_close;
using tensor_compare::expect_equal;

// Relative to each tensor's largest magnitude. One block of the whole
// sequence runs the fused kernel's tiles and online softmax, so only the
// handling of masked entries differs (a few ulp at most); splits add the
// log-sum-exp fold (in double) and change the order of the sums of dK, dV.
constexpr double kForwardTolerance = 1e-6;
constexpr double kGradientTolerance = 1e-6;

std::vector<float> scaled_random(size_t n, uint32_t seed, float scale) {
  std::vector<float> values = pseudo_random(n, seed);
  for (float& value : values) value *= scale;
  return values;
}

std::string describe(const Dims& d) {
  return "B=" + std::to_string(d.batch) + " T=" + std::to_string(d.seq_len) +
         " H=" + std::to_string(d.heads) + " Hkv=" + std::to_string(d.kv_heads) +
         " D=" + std::to_string(d.head_dim);
}

std::vector<int32_t> all_positions(int seq_len) {
  std::vector<int32_t> positions(seq_len);
  std::iota(positions.begin(), positions.end(), 0);
  return positions;
}

void expect_results_close(const Result& actual, const Result& expected, const std::string& what) {
  expect_close(actual.out, expected.out, kForwardTolerance, "out " + what);
  expect_close(actual.logsumexp, expected.logsumexp, kForwardTolerance, "logsumexp " + what);
  expect_close(actual.dqkv, expected.dqkv, kGradientTolerance, "dqkv " + what);
}

// A run over the whole sequence as one block, and over the load-balanced
// layout of each cp, against the fused attention.
void check_splits(const Dims& d, std::initializer_list<int> cps) {
  auto ops = make_cpu_ops(1);
  const auto qkv = scaled_random(d.qkv_elements(), 1, 1.5f);
  const auto dout = pseudo_random(d.out_elements(), 2);
  const Result expected = full_attention(*ops, d, qkv, dout);
  for (int cp : cps) {
    // cp = 1: one rank holding the whole sequence in order.
    const auto ranks = load_balanced_ranks(d.seq_len, cp);
    expect_results_close(ring_attention(*ops, d, qkv, dout, {}, ranks), expected,
                         describe(d) + " cp=" + std::to_string(cp));
  }
}

TEST(CpuAttentionBlock, WholeSequenceBlockEqualsAttention) {
  check_splits({2, 200, 3, 3, 16}, {1});  // GPT-2-like: partial last tile
  check_splits({1, 256, 4, 2, 8}, {1});   // grouped KV heads
  check_splits({2, 130, 4, 1, 16}, {1});  // one KV head for four query heads
  check_splits({1, 600, 2, 2, 8}, {1});   // tiles of 128
}

TEST(CpuAttentionBlock, ContextParallelSplitsEqualAttention) {
  check_splits({2, 256, 4, 2, 8}, {2, 4});
  check_splits({1, 192, 3, 3, 16}, {2, 4});
  check_splits({1, 1024, 2, 1, 8}, {2, 4});  // tiles of 128 across chunk boundaries
}

TEST(CpuAttentionBlock, LongSequenceRunsInSeconds) {
  const Dims d{1, 4096, 2, 2, 8};
  auto ops = make_cpu_ops(1);
  const auto qkv = scaled_random(d.qkv_elements(), 3, 1.5f);
  const auto dout = pseudo_random(d.out_elements(), 4);
  const Result expected = full_attention(*ops, d, qkv, dout);
  for (int cp : {1, 2}) {
    // cp = 1: one rank holding the whole sequence in order.
    const auto ranks = load_balanced_ranks(d.seq_len, cp);
    const auto start = std::chrono::steady_clock::now();
    const Result actual = ring_attention(*ops, d, qkv, dout, {}, ranks);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("[ timing  ] T=4096 cp=%d forward + backward (with transfers): %.3f s\n", cp,
                seconds);
    expect_results_close(actual, expected, describe(d) + " cp=" + std::to_string(cp));
  }
}

// Tokens in [0, 40) with separator 0 (about one in 40), plus a one-token
// document at position 0 and back-to-back separators in batch entry 0.
std::vector<int32_t> separated_documents(const Dims& d) {
  std::vector<int32_t> tokens(static_cast<size_t>(d.batch) * d.seq_len);
  uint32_t state = 12345u;
  for (int32_t& token : tokens) {
    state = state * 1664525u + 1013904223u;
    token = static_cast<int32_t>((state >> 8) % 40);
  }
  tokens[0] = 0;
  tokens[100] = tokens[101] = tokens[102] = 0;
  return documents_from_separators(tokens, d.batch, d.seq_len, 0);
}

TEST(CpuAttentionBlock, DocumentMaskEqualsAttentionPerDocument) {
  for (const Dims& d : {Dims{2, 300, 4, 2, 8}, Dims{1, 768, 2, 2, 16}}) {
    auto ops = make_cpu_ops(1);
    const auto qkv = scaled_random(d.qkv_elements(), 5, 1.5f);
    const auto dout = pseudo_random(d.out_elements(), 6);
    const auto documents = separated_documents(d);
    const Result expected = per_document_attention(*ops, d, qkv, dout, documents);
    expect_results_close(ring_attention(*ops, d, qkv, dout, documents, {all_positions(d.seq_len)}),
                         expected, describe(d) + " documents, one block");
    for (int cp : {2, 3}) {
      expect_results_close(
          ring_attention(*ops, d, qkv, dout, documents, load_balanced_ranks(d.seq_len, cp)),
          expected, describe(d) + " documents, cp=" + std::to_string(cp));
    }
  }
}

// Queries [0, 128) of a 128-token sequence against the block of keys [64, 128).
struct MaskedRowsCase {
  Dims d{1, 128, 2, 1, 8};
  std::vector<float> qkv = scaled_random(d.qkv_elements(), 7, 1.5f);
  std::vector<int32_t> q_positions = all_positions(128);
  std::vector<int32_t> kv_positions =
      std::vector<int32_t>(q_positions.begin() + 64, q_positions.end());
  Ops::AttentionBlockShape shape = block_shape(d, 128, 64, d.width());
  const float* kv() const { return qkv.data() + 64 * d.width() + d.channels(); }
};

TEST(CpuAttentionBlock, RowsThatSeeNoKeyAreLeftAlone) {
  const MaskedRowsCase c;
  auto ops = make_cpu_ops(1);
  const size_t C = c.d.channels(), T = c.d.seq_len;
  // A running result for every row (from the whole sequence), then the block
  // folded in again: rows 0..63 see none of its keys and keep their bits.
  std::vector<float> out(T * C), lse(c.d.heads * T);
  const auto whole = block_shape(c.d, 128, 128, c.d.width());
  ops->attention_block_forward(out.data(), lse.data(), c.qkv.data(), c.qkv.data() + C,
                               c.q_positions.data(), c.q_positions.data(), nullptr, whole, true);
  std::vector<float> folded_out = out, folded_lse = lse;
  ops->attention_block_forward(folded_out.data(), folded_lse.data(), c.qkv.data(), c.kv(),
                               c.q_positions.data(), c.kv_positions.data(), nullptr, c.shape,
                               false);
  for (size_t t = 0; t < T; t++) {
    const bool sees = t >= 64;  // the block's keys were already in the result: lse grows
    for (int h = 0; h < c.d.heads; h++) {
      const size_t row = h * T + t;
      if (sees)
        EXPECT_GT(folded_lse[row], lse[row]) << "row " << t << " head " << h;
      else
        EXPECT_EQ(folded_lse[row], lse[row]) << "row " << t << " head " << h;
    }
    if (!sees) {
      EXPECT_TRUE(
          std::equal(out.begin() + t * C, out.begin() + (t + 1) * C, folded_out.begin() + t * C))
          << "row " << t;
    }
  }
}

TEST(CpuAttentionBlock, FirstBlockGivesZeroAndMinusInfinityToRowsThatSeeNoKey) {
  const MaskedRowsCase c;
  auto ops = make_cpu_ops(1);
  const size_t C = c.d.channels(), T = c.d.seq_len;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(T * C, nan), lse(c.d.heads * T, nan);
  ops->attention_block_forward(out.data(), lse.data(), c.qkv.data(), c.kv(), c.q_positions.data(),
                               c.kv_positions.data(), nullptr, c.shape, true);
  for (size_t t = 0; t < T; t++) {
    for (int h = 0; h < c.d.heads; h++) {
      const float value = lse[h * T + t];
      if (t < 64)
        EXPECT_EQ(value, -INFINITY) << "row " << t;
      else
        EXPECT_TRUE(std::isfinite(value)) << "row " << t;
    }
    for (size_t i = 0; i < C; i++) {
      ASSERT_FALSE(std::isnan(out[t * C + i])) << "row " << t;
      if (t < 64) {
        ASSERT_EQ(out[t * C + i], 0.0f) << "row " << t;
      }
    }
  }
  // The backward with those -inf rows: no NaN, and nothing for rows 0..63.
  const auto dout = pseudo_random(T * C, 8);
  std::vector<float> dq(T * C, 0.0f), dkv(64 * c.d.kv_width(), 0.0f);
  ops->attention_block_backward(dq.data(), dkv.data(), dout.data(), out.data(), lse.data(),
                                c.qkv.data(), c.kv(), c.q_positions.data(), c.kv_positions.data(),
                                nullptr, c.shape);
  for (size_t i = 0; i < dq.size(); i++) {
    ASSERT_FALSE(std::isnan(dq[i])) << i;
    if (i < 64 * C) {
      ASSERT_EQ(dq[i], 0.0f) << i;
    }
  }
  for (float value : dkv) ASSERT_TRUE(std::isfinite(value));
  // An empty first block: every row 0 and -inf.
  std::vector<float> empty_out(T * C, nan), empty_lse(c.d.heads * T, nan);
  ops->attention_block_forward(empty_out.data(), empty_lse.data(), c.qkv.data(), c.kv(),
                               c.q_positions.data(), c.kv_positions.data(), nullptr,
                               block_shape(c.d, 128, 0, c.d.width()), true);
  EXPECT_EQ(empty_out, std::vector<float>(T * C, 0.0f));
  EXPECT_EQ(empty_lse, std::vector<float>(c.d.heads * T, -INFINITY));
}

TEST(CpuAttentionBlock, CopyRowsRoundTripsKeyValueHeads) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    auto ops = make_cpu_ops(1, dtype);
    const Dims d{2, 37, 4, 2, 8};
    const size_t rows = static_cast<size_t>(d.batch) * d.seq_len, e = dtype_bytes(dtype);
    const auto values = pseudo_random(d.qkv_elements(), 9);
    std::vector<unsigned char> qkv(d.qkv_elements() * e), back(qkv.size(), 0);
    host_from_float(qkv.data(), values.data(), dtype, values.size());
    std::vector<unsigned char> packed(rows * d.kv_width() * e);
    ops->copy_rows(packed.data(), d.kv_width() * e, qkv.data() + d.channels() * e, d.width() * e,
                   rows, d.kv_width() * e);
    ops->copy_rows(back.data() + d.channels() * e, d.width() * e, packed.data(), d.kv_width() * e,
                   rows, d.kv_width() * e);
    for (size_t r = 0; r < rows; r++) {
      const unsigned char* row = qkv.data() + r * d.width() * e;
      ASSERT_EQ(std::memcmp(packed.data() + r * d.kv_width() * e, row + d.channels() * e,
                            d.kv_width() * e),
                0)
          << dtype_name(dtype) << " packed row " << r;
      for (size_t i = 0; i < d.width() * e; i++) {
        const bool key_value = i >= d.channels() * e;
        ASSERT_EQ(back[r * d.width() * e + i], key_value ? row[i] : 0)
            << dtype_name(dtype) << " row " << r << " byte " << i;
      }
    }
  }
}

TEST(CpuAttentionBlock, Bfloat16EqualsFloat32OnRoundedInputs) {
  const Dims d{2, 200, 4, 2, 8};
  auto fp32 = make_cpu_ops(1), bf16 = make_cpu_ops(1, DType::kBFloat16);
  const auto qkv = scaled_random(d.qkv_elements(), 10, 1.5f);
  const auto dout = pseudo_random(d.out_elements(), 11);
  std::vector<float> rounded_qkv = qkv, rounded_dout = dout;
  for (float& value : rounded_qkv) value = round_to_bfloat16(value);
  for (float& value : rounded_dout) value = round_to_bfloat16(value);
  const auto documents = separated_documents(d);
  for (int cp : {1, 2}) {
    // cp = 1: one rank holding the whole sequence in order.
    const auto ranks = load_balanced_ranks(d.seq_len, cp);
    const std::string what = "bf16 vs fp32 on rounded inputs cp=" + std::to_string(cp);
    const Result expected = ring_attention(*fp32, d, rounded_qkv, rounded_dout, documents, ranks,
                                           /*round_out=*/true);
    const Result actual = ring_attention(*bf16, d, qkv, dout, documents, ranks);
    expect_equal(actual.out, expected.out, "out " + what);
    expect_equal(actual.logsumexp, expected.logsumexp, "logsumexp " + what);
    expect_equal(actual.dqkv, expected.dqkv, "dqkv " + what);
  }
}

TEST(CpuAttentionBlock, DeterministicAndBatchEntriesIndependent) {
  const Dims d{2, 256, 4, 2, 8}, one{1, 256, 4, 2, 8};
  auto ops = make_cpu_ops(1);
  const auto qkv = scaled_random(d.qkv_elements(), 12, 1.5f);
  const auto dout = pseudo_random(d.out_elements(), 13);
  const auto documents = separated_documents(d);
  const auto ranks = load_balanced_ranks(d.seq_len, 2);
  const Result first = ring_attention(*ops, d, qkv, dout, documents, ranks);
  const Result again = ring_attention(*ops, d, qkv, dout, documents, ranks);
  expect_equal(again.out, first.out, "out run to run");
  expect_equal(again.logsumexp, first.logsumexp, "logsumexp run to run");
  expect_equal(again.dqkv, first.dqkv, "dqkv run to run");
  // Batch entry 1 alone gives bitwise its slice of the B = 2 run.
  auto second_half = [](const std::vector<float>& x) {
    return std::vector<float>(x.begin() + x.size() / 2, x.end());
  };
  const std::vector<int32_t> alone_documents(documents.begin() + d.seq_len, documents.end());
  const Result alone =
      ring_attention(*ops, one, second_half(qkv), second_half(dout), alone_documents, ranks);
  expect_equal(alone.out, second_half(first.out), "out of B=1 vs entry 1 of B=2");
  expect_equal(alone.logsumexp, second_half(first.logsumexp), "logsumexp of B=1 vs entry 1");
  expect_equal(alone.dqkv, second_half(first.dqkv), "dqkv of B=1 vs entry 1");
}

TEST(CpuAttentionBlock, RefusesBadShapesAndPositions) {
  auto ops = make_cpu_ops(1);
  const Dims d{1, 8, 3, 2, 4};
  std::vector<float> qkv(d.qkv_elements()), out(d.out_elements()), lse(d.lse_elements());
  const auto positions = all_positions(8);
  auto shape = block_shape(d, 8, 8, d.width());
  EXPECT_THROW(
      ops->attention_block_forward(out.data(), lse.data(), qkv.data(), qkv.data(), positions.data(),
                                   positions.data(), nullptr, shape, true),
      std::invalid_argument);
  shape.num_heads = 2;
  shape.num_kv_heads = 1;
  const std::vector<int32_t> documents(8, 0), beyond{0, 1, 2, 3, 4, 5, 6, 8};
  EXPECT_THROW(
      ops->attention_block_forward(out.data(), lse.data(), qkv.data(), qkv.data(), beyond.data(),
                                   positions.data(), documents.data(), shape, true),
      std::out_of_range);
}

}  // namespace
}  // namespace paraplan::kernels
