// cuda_attention_block_test.cc: the CUDA backend's attention by blocks
// (cuda_attention_block*.cu; kernels/ops.h attention_block_forward/backward,
// copy_rows) against the CPU backend in the same storage dtype, once for fp32
// and once for bf16: the ring runs of kernels/testing/attention_block_runs.h
// (one causal block of the whole sequence; the load-balanced context-parallel
// layout over 2 and 4 ranks, so other ranks' blocks, packed by copy_rows,
// with rows that see none of a block's keys; documents from separators, alone
// and split) over head dims of every padded kernel variant, grouped KV heads
// and partial tiles; a first block whose rows see no key (0 and -inf, no
// NaN); bitwise determinism. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"
#include "kernels/testing/attention_block_runs.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;
using namespace attention_block_testing;

class CudaAttentionBlock : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaAttentionBlock, kStorageDtypes, storage_test_name);

// As the fused attention's test (cuda_attention_test.cc): both backends
// compute in fp32 on the same widened inputs, differing in summation order
// and exp, a few ulp per score; the accumulators (out, logsumexp, dq, dkv)
// are fp32 in both storage dtypes. With bf16 storage each backend's backward
// reads its own out rounded to bf16, which may differ by an ulp where the
// two fp32 results straddle a rounding boundary: the gradients' row terms
// move by up to 2^-8 of an element, so dqkv gets kBf16SumTolerance.
constexpr double kBlockTolerance = 1e-4;

std::string describe(const Dims& d, const std::string& layout) {
  return "B=" + std::to_string(d.batch) + " T=" + std::to_string(d.seq_len) +
         " H=" + std::to_string(d.heads) + " Hkv=" + std::to_string(d.kv_heads) +
         " D=" + std::to_string(d.head_dim) + " " + layout;
}

// Tokens in [0, 30) with separator 0, and a one-token document at position 0.
std::vector<int32_t> separated_documents(const Dims& d) {
  const std::vector<int32_t> tokens =
      random_ints(static_cast<size_t>(d.batch) * d.seq_len, 70, 0, 30);
  std::vector<int32_t> with_first = tokens;
  with_first[0] = 0;
  return documents_from_separators(with_first, d.batch, d.seq_len, 0);
}

void expect_block_results_close(const Result& actual, const Result& expected, DType dtype,
                                const std::string& what) {
  expect_close(actual.out, expected.out, kBlockTolerance, "out " + what);
  expect_close(actual.logsumexp, expected.logsumexp, kBlockTolerance, "logsumexp " + what);
  expect_close(actual.dqkv, expected.dqkv,
               storage_tolerance(dtype, kBlockTolerance, kBf16SumTolerance), "dqkv " + what);
}

TEST_P(CudaAttentionBlock, MatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  const Dims shapes[] = {
      {2, 200, 3, 3, 16},   // GPT-2-like heads, a partial last tile
      {1, 256, 4, 2, 64},   // grouped KV heads, GPT-2's head size
      {1, 136, 2, 2, 128},  // the largest head size
      {2, 120, 4, 1, 8},    // one KV head for four query heads, D padded to 16
      {1, 104, 2, 2, 12},   // D % 8 != 0: bf16's scalar loads
      {1, 96, 2, 2, 32},    // D padded to 32
      {2, 72, 2, 1, 6},     // D % 4 != 0: fp32's scalar loads too; partial tiles, GQA
  };
  for (const Dims& d : shapes) {
    const auto qkv = random_floats(d.qkv_elements(), 71, 1.5f);
    const auto dout = random_floats(d.out_elements(), 72);
    const auto documents = separated_documents(d);
    for (int cp : {1, 2, 4}) {
      const auto ranks = load_balanced_ranks(d.seq_len, cp);  // cp = 1: the whole sequence
      const std::string layout = "cp=" + std::to_string(cp);
      expect_block_results_close(ring_attention(*cuda, d, qkv, dout, {}, ranks),
                                 ring_attention(*cpu, d, qkv, dout, {}, ranks), dtype(),
                                 describe(d, layout));
      expect_block_results_close(ring_attention(*cuda, d, qkv, dout, documents, ranks),
                                 ring_attention(*cpu, d, qkv, dout, documents, ranks), dtype(),
                                 describe(d, layout + " documents"));
    }
  }
}

// In fp32, the CUDA ring also equals the fused attention (and, with
// documents, attention per document) on the CUDA backend itself.
TEST_P(CudaAttentionBlock, MatchesFusedAttention) {
  if (bf16()) GTEST_SKIP() << "fp32 only: bf16 rounds out differently in the two paths";
  std::unique_ptr<Ops> cuda = make_cuda_attention("fma", dtype());
  const Dims d{2, 192, 4, 2, 32};
  const auto qkv = random_floats(d.qkv_elements(), 73, 1.5f);
  const auto dout = random_floats(d.out_elements(), 74);
  const auto documents = separated_documents(d);
  const Result fused = full_attention(*cuda, d, qkv, dout);
  const Result per_document = per_document_attention(*cuda, d, qkv, dout, documents);
  for (int cp : {1, 2}) {
    const auto ranks = load_balanced_ranks(d.seq_len, cp);
    const std::string layout = "cp=" + std::to_string(cp);
    expect_block_results_close(ring_attention(*cuda, d, qkv, dout, {}, ranks), fused, dtype(),
                               describe(d, layout + " vs fused"));
    expect_block_results_close(ring_attention(*cuda, d, qkv, dout, documents, ranks), per_document,
                               dtype(), describe(d, layout + " documents vs per document"));
  }
}

// Queries [0, 128) against the keys [64, 128) as a first block: rows 0..63
// see no key (out 0, logsumexp -inf, no NaN), as on the CPU; then the
// backward with those rows adds nothing for them.
TEST_P(CudaAttentionBlock, FirstBlockWithRowsThatSeeNoKey) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  const Dims d{1, 128, 2, 1, 16};
  const auto qkv = random_floats(d.qkv_elements(), 75, 1.5f);
  const auto dout = random_floats(d.out_elements(), 76);
  std::vector<int32_t> q_positions(128), kv_positions(64);
  std::iota(q_positions.begin(), q_positions.end(), 0);
  std::iota(kv_positions.begin(), kv_positions.end(), 64);
  auto run = [&](Ops& ops) {
    Memory m(ops);
    const void* device_qkv = m.upload_storage(qkv);
    const void* kv = element_at(device_qkv, static_cast<size_t>(64) * d.width() + d.channels(),
                                ops.storage_dtype());
    const int32_t* q_pos = m.upload(q_positions);
    const int32_t* kv_pos = m.upload(kv_positions);
    float* out = m.upload(std::vector<float>(d.out_elements(), std::nanf("")));
    float* lse = m.upload(std::vector<float>(d.lse_elements(), std::nanf("")));
    const auto shape = block_shape(d, 128, 64, d.width());
    ops.attention_block_forward(out, lse, device_qkv, kv, q_pos, kv_pos, nullptr, shape, true);
    std::vector<float> host_out = m.download(out, d.out_elements());
    const void* stored_out = m.upload_storage(host_out);
    float* dq = m.upload(std::vector<float>(d.out_elements(), 0.0f));
    float* dkv = m.upload(std::vector<float>(64 * d.kv_width(), 0.0f));
    ops.attention_block_backward(dq, dkv, m.upload_storage(dout), stored_out, lse, device_qkv, kv,
                                 q_pos, kv_pos, nullptr, shape);
    return Tensors{host_out, m.download(lse, d.lse_elements()), m.download(dq, d.out_elements()),
                   m.download(dkv, 64 * d.kv_width())};
  };
  const Tensors expected = run(*cpu), actual = run(*cuda);
  for (size_t i = 0; i < 64 * static_cast<size_t>(d.channels()); i++) {
    ASSERT_EQ(actual[0][i], 0.0f) << "out " << i;
    ASSERT_EQ(actual[2][i], 0.0f) << "dq " << i;
  }
  for (int h = 0; h < d.heads; h++)
    for (int t = 0; t < 64; t++) ASSERT_EQ(actual[1][h * 128 + t], -INFINITY) << t;
  expect_all_close(actual, expected,
                   {kBlockTolerance, kBlockTolerance,
                    storage_tolerance(dtype(), kBlockTolerance, kBf16SumTolerance)},
                   "first block with unseeing rows");
}

TEST_P(CudaAttentionBlock, DeterministicRunToRun) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  const Dims d{2, 256, 4, 2, 64};
  const auto qkv = random_floats(d.qkv_elements(), 77, 1.5f);
  const auto dout = random_floats(d.out_elements(), 78);
  const auto documents = separated_documents(d);
  const auto ranks = load_balanced_ranks(d.seq_len, 2);
  const Result first = ring_attention(*cuda, d, qkv, dout, documents, ranks);
  const Result again = ring_attention(*cuda, d, qkv, dout, documents, ranks);
  expect_equal(again.out, first.out, "out run to run");
  expect_equal(again.logsumexp, first.logsumexp, "logsumexp run to run");
  expect_equal(again.dqkv, first.dqkv, "dqkv run to run");
}

TEST_P(CudaAttentionBlock, RejectsHeadDimAbove128) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  Memory m(*cuda);
  const Dims d{1, 4, 1, 1, 136};
  const void* qkv = m.upload_storage(std::vector<float>(d.qkv_elements(), 0.0f));
  float* out = m.upload(std::vector<float>(d.out_elements()));
  float* lse = m.upload(std::vector<float>(d.lse_elements()));
  const int32_t* positions = m.upload(std::vector<int32_t>{0, 1, 2, 3});
  EXPECT_THROW(cuda->attention_block_forward(out, lse, qkv, qkv, positions, positions, nullptr,
                                             block_shape(d, 4, 4, d.width()), true),
               std::invalid_argument);
}

}  // namespace
}  // namespace paraplan::kernels
