// cuda_attention_test.cc: the CUDA backend's fused attention and losses
// against the CPU backend in the same storage dtype, once for fp32 and once
// for bf16 storage (the same seeded inputs through both, compared within the
// tolerances of cuda_test_support.h and below): the FMA attention kernels'
// forward (out, logsumexp) and backward over head dims that take every padded
// kernel variant (16, 32, 64, 128), sequence lengths with partial tiles, large
// scores, unaligned and odd-width inputs (the scalar loads); the bf16
// tensor-core attention (head_dim 64 and 128, partial tiles) against the CPU
// in bf16, run to run, and against the FMA kernels (PARAPLAN_CUDA_ATTENTION);
// grouped KV heads (H / Hkv query heads per KV head) on both kernel families;
// dqkv overwritten (GradientWrite::kOverwrite) into NaN equal to dqkv
// accumulated into zeros, on both kernel families;
// determinism, batch independence and TF32 independence, bitwise; the
// softmax + cross-entropy, its vocab-parallel steps and out-of-range targets.
// Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

class CudaAttention : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaAttention, kStorageDtypes, storage_test_name);
class CudaLoss : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaLoss, kStorageDtypes, storage_test_name);

// ---- attention -----------------------------------------------------------------------------

// Both backends run attention in fp32 (the CUDA kernels use plain FMA, no
// tensor cores, so TF32 does not apply). They differ in summation order, exp
// (expf vs exp_approx) and where the online softmax rescales (CUDA every 64
// keys, the CPU every 64 or 128): a few ulp per score. The backward's
// P * (dP - D) cancels, and sums run over up to 300 keys, so the tolerance is
// five times kStrictTolerance; an indexing or masking error is O(1). Also
// the tolerance of logsumexp (fp32) with bf16 storage: both backends widen
// the same bf16 qkv. bf16's out is one rounding of the fp32 result
// (kBf16Tolerance), its dqkv a sum over keys or queries added into dqkv and
// rounded once (kBf16SumTolerance: the compared difference dqkv_after -
// dqkv_before carries up to an ulp of dqkv_after, which is kept close to the
// gradient's size by a small dqkv_before).
constexpr double kAttentionTolerance = 1e-4;

struct AttentionShape {
  int batch, seq_len, num_heads, head_dim;
  float qkv_scale = 1.5f;  // scaled scores have standard deviation qkv_scale^2 / 3
  bool unaligned = false;  // qkv and dout 4-byte aligned only: the scalar loads
  int num_kv_heads = 0;    // grouped-query attention; 0: num_heads (multi-head)
  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  size_t qkv_elements() const {
    return static_cast<size_t>(batch) * seq_len * (num_heads + 2 * kv_heads()) * head_dim;
  }
  size_t out_elements() const {
    return static_cast<size_t>(batch) * seq_len * num_heads * head_dim;
  }
  size_t rows() const { return static_cast<size_t>(batch) * num_heads * seq_len; }  // logsumexp's
};

std::string describe(const AttentionShape& s) {
  return "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.seq_len) +
         " H=" + std::to_string(s.num_heads) + " Hkv=" + std::to_string(s.kv_heads()) +
         " D=" + std::to_string(s.head_dim) + (s.unaligned ? " unaligned" : "");
}

// One shape's inputs on a backend, with the forward run: qkv (seed 50), out
// and logsumexp; and the backward's dout (seed 52) and garbage scratch (the
// backward must write it before reading it). Freed with `buffers`.
struct AttentionRun {
  const void* qkv;
  void* out;
  float* logsumexp;
  const void* dout;
  float* scratch;
};

AttentionRun run_forward(Ops& ops, Buffers& buffers, const AttentionShape& s) {
  AttentionRun run;
  run.qkv = buffers.upload_storage(random_floats(s.qkv_elements(), 50, s.qkv_scale), s.unaligned);
  run.out = buffers.allocate_storage(s.out_elements());
  run.logsumexp = buffers.allocate_floats(s.rows());
  ops.attention_forward(run.out, run.logsumexp, run.qkv, s.batch, s.seq_len, s.num_heads,
                        s.kv_heads(), s.head_dim);
  run.dout = buffers.upload_storage(random_floats(s.out_elements(), 52), s.unaligned);
  run.scratch = buffers.upload(std::vector<float>(s.rows(), 1e30f));
  return run;
}

// out, logsumexp, and the gradient the backward added to dqkv (which starts at
// random values: backward accumulates). When `forward` is given (the CPU's out
// and logsumexp), the backward reads those, so both backends' backward passes
// see the same inputs.
Tensors attention_run(Ops& ops, const AttentionShape& s, const Tensors* forward = nullptr) {
  const size_t qkv_size = s.qkv_elements();
  Buffers buffers(ops);
  const AttentionRun run = run_forward(ops, buffers, s);
  Tensors result{buffers.download_storage(run.out, s.out_elements()),
                 buffers.download(run.logsumexp, s.rows())};

  const void* saved_out = forward != nullptr ? buffers.upload_storage((*forward)[0]) : run.out;
  const float* saved_logsumexp = forward != nullptr ? buffers.upload((*forward)[1]) : run.logsumexp;
  // Small, so that in bf16 an ulp of dqkv after the backward is about an ulp of the gradient.
  const std::vector<float> dqkv_before =
      round_to(ops.storage_dtype(), random_floats(qkv_size, 51, 0.125f));
  void* dqkv = buffers.upload_storage(dqkv_before, s.unaligned);
  ops.attention_backward(dqkv, run.scratch, run.dout, run.qkv, saved_out, saved_logsumexp, s.batch,
                         s.seq_len, s.num_heads, s.kv_heads(), s.head_dim,
                         GradientWrite::kAccumulate);
  std::vector<float> added = buffers.download_storage(dqkv, qkv_size);
  for (size_t i = 0; i < qkv_size; i++) added[i] -= dqkv_before[i];
  result.push_back(std::move(added));
  return result;
}

// The FMA kernels in both storage dtypes (forced: by default bf16 with
// head_dim 64 or 128 runs cuDNN's SDPA, cudnn_attention_test.cc, or the
// tensor-core kernels, tested below).
TEST_P(CudaAttention, MatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda_attention("fma", dtype());
  const AttentionShape shapes[] = {
      {2, 33, 3, 8},                // D padded to 16; one partial tile
      {2, 64, 2, 16},               // exactly one tile
      {1, 130, 4, 32},              // 64 + 64 + 2 rows: the last tile nearly empty
      {1, 200, 2, 64},              // GPT-2's head size, four tiles
      {1, 150, 2, 128},             // the largest head size
      {1, 300, 1, 40},              // D padded to 64; many backward sub-tiles
      {2, 50, 3, 6},                // D % 4 != 0: scalar loads
      {1, 70, 2, 12},               // D % 4 == 0, D % 8 != 0: packed fp32, scalar bf16
      {1, 100, 2, 32, 1.5f, true},  // unaligned: scalar loads
      {1, 1, 2, 8},                 // one token: out = v
      {1, 150, 2, 16, 6.0f},        // scores up to ~50: the online rescaling matters
      // Grouped KV heads: dK/dV blocks loop over their group's query heads.
      {2, 130, 4, 32, 1.5f, false, 2},
      {1, 100, 6, 64, 1.5f, false, 1},
      {1, 70, 8, 16, 1.5f, false, 2},
  };
  for (const AttentionShape& s : shapes) {
    const Tensors expected = attention_run(*cpu, s);
    const Tensors actual = attention_run(*cuda, s, &expected);
    expect_close(actual[0], expected[0], storage_tolerance(dtype(), kAttentionTolerance),
                 "out " + describe(s));
    expect_close(actual[1], expected[1], kAttentionTolerance, "logsumexp " + describe(s));
    expect_close(actual[2], expected[2],
                 storage_tolerance(dtype(), kAttentionTolerance, kBf16SumTolerance),
                 "dqkv " + describe(s));
  }
}

TEST_P(CudaAttention, DeterministicBatchIndependentAndTf32Independent) {
  // Paraplan's kernels (by default bf16 at D = 64 runs on cuDNN: cudnn_attention_test.cc).
  const ScopedEnvironment own("PARAPLAN_CUDA_ATTENTION", "own");
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype()), strict = make_cuda(false, dtype());
  for (const AttentionShape& s : {AttentionShape{4, 128, 4, 32}, AttentionShape{3, 130, 2, 64}}) {
    const Tensors first = attention_run(*cuda, s);
    expect_all_equal(attention_run(*cuda, s), first, "run to run " + describe(s));
    // The GEMM mode changes nothing: the FMA kernels use no tensor cores and
    // the bf16 tensor-core kernels (D = 64 here) are bf16 whatever TF32 says.
    expect_all_equal(attention_run(*strict, s), first, "strict fp32 vs tf32 " + describe(s));
  }
  // Batch entry 1 of a B = 3 call gives bitwise the B = 1 result on its slice.
  const int T = 130, H = 2, D = 64, C = H * D;
  const std::vector<float> qkv = random_floats(static_cast<size_t>(3) * T * 3 * C, 54);
  auto forward = [&](int batch, const float* host_qkv) {
    Buffers buffers(*cuda);
    const size_t out_size = static_cast<size_t>(batch) * T * C;
    void* out = buffers.allocate_storage(out_size);
    float* logsumexp = buffers.allocate_floats(static_cast<size_t>(batch) * H * T);
    const std::vector<float> input(host_qkv, host_qkv + static_cast<size_t>(batch) * T * 3 * C);
    cuda->attention_forward(out, logsumexp, buffers.upload_storage(input), batch, T, H, H, D);
    return Tensors{buffers.download_storage(out, out_size),
                   buffers.download(logsumexp, static_cast<size_t>(batch) * H * T)};
  };
  const Tensors whole = forward(3, qkv.data());
  const Tensors one = forward(1, qkv.data() + static_cast<size_t>(T) * 3 * C);
  expect_equal(one[0], std::span<const float>(whole[0]).subspan(T * C, one[0].size()),
               "out of B=1 vs batch entry 1 of B=3");
  expect_equal(one[1], std::span<const float>(whole[1]).subspan(H * T, one[1].size()),
               "logsumexp of B=1 vs batch entry 1 of B=3");
}

TEST_P(CudaAttention, RejectsHeadDimAbove128) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  Buffers buffers(*cuda);
  const int T = 4, D = 136;
  void* qkv = buffers.upload_storage(random_floats(static_cast<size_t>(T) * 3 * D, 55));
  void* out = buffers.allocate_storage(static_cast<size_t>(T) * D);
  float* logsumexp = buffers.allocate_floats(T);
  EXPECT_THROW(cuda->attention_forward(out, logsumexp, qkv, 1, T, 1, 1, D), std::invalid_argument);
  // KV heads must divide the heads.
  EXPECT_THROW(cuda->attention_forward(out, logsumexp, qkv, 1, T, 3, 2, 8), std::invalid_argument);
}

// ---- bf16 tensor-core attention --------------------------------------------------------------

// Tolerances of the tensor-core kernels against the CPU backend in bf16 (max
// error over a tensor / its max |cpu|). Beyond what the FMA kernels differ by
// (fp32 summation order, a bf16 ulp where a value straddles a rounding
// boundary: kBf16Tolerance, kBf16SumTolerance), they round, as
// FlashAttention-2 does, the probabilities P (forward's P V, backward's
// P^T dOut) and dS (dS^T Q, dS K) to bf16 as mma operands: up to 2^-9 = 2e-3
// relative error per term. Over a sum of n terms of random sign these errors
// mostly average out (~1e-3 of the sum's size), but a sum can be dominated by
// a few large terms (peaked softmax rows, early rows with few keys) where they
// do not, and the result is then rounded to bf16 (one ulp, up to 7.8e-3 of
// the largest value; for dqkv, the compared difference after - before carries
// one more). So out gets 2e-2 (one rounding step plus 2^-9 per probability)
// and dqkv 3e-2 (its products chain two rounded operands, P or dS, and the
// accumulation's ulp). logsumexp is fp32 from fp32 probabilities: S = Q K^T is
// exact products of the same bf16 inputs summed in another order, so it keeps
// kAttentionTolerance. An indexing, fragment-layout or masking error moves
// values by O(1) of the tensor's scale, far beyond these. (A lane-level
// emulation of the kernels, scripts/emulate_tensor_core_attention.py, gives
// ~5e-3 for out and dqkv against the fp32 result rounded as the CPU rounds
// it, for these shapes.)
constexpr double kTensorCoreOutTolerance = 2e-2;
constexpr double kTensorCoreGradientTolerance = 3e-2;

class CudaAttentionTensorCore : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  }
};

// head_dim 64 and 128 (the two specialisations), T from one token through
// partial, whole and several 64-row tiles (17: one partial tile; 200: three
// whole and a partial one), B = 2, H = 3.
std::vector<AttentionShape> tensor_core_shapes() {
  std::vector<AttentionShape> shapes;
  for (int head_dim : {64, 128}) {
    for (int seq_len : {1, 17, 64, 200, 256}) shapes.push_back({2, seq_len, 3, head_dim});
    // Grouped KV heads: 4 query heads over 2 and over 1 (the dK/dV kernel's
    // steps run through the group's heads, prefetching across them).
    shapes.push_back({2, 130, 4, head_dim, 1.5f, false, 2});
    shapes.push_back({1, 200, 4, head_dim, 1.5f, false, 1});
  }
  return shapes;
}

void expect_tensor_core_close(const Tensors& actual, const Tensors& expected,
                              const std::string& what) {
  expect_close(actual[0], expected[0], kTensorCoreOutTolerance, "out " + what);
  expect_close(actual[1], expected[1], kAttentionTolerance, "logsumexp " + what);
  expect_close(actual[2], expected[2], kTensorCoreGradientTolerance, "dqkv " + what);
}

TEST_F(CudaAttentionTensorCore, MatchesCpuInBfloat16) {
  std::unique_ptr<Ops> cpu = make_cpu(DType::kBFloat16),
                       cuda = make_cuda_attention("own", DType::kBFloat16);
  std::vector<AttentionShape> shapes = tensor_core_shapes();
  // Scores up to ~25: the online rescaling across key tiles matters.
  shapes.push_back({2, 200, 3, 64, 4.0f});
  shapes.push_back({1, 150, 2, 128, 4.0f});
  // Unaligned tensors: the dispatch falls back to the FMA kernels.
  shapes.push_back({1, 130, 2, 64, 1.5f, true});
  for (const AttentionShape& s : shapes) {
    // The backward reads the CPU's out and logsumexp (the same inputs on both).
    const Tensors expected = attention_run(*cpu, s);
    expect_tensor_core_close(attention_run(*cuda, s, &expected), expected, describe(s));
  }
}

TEST_F(CudaAttentionTensorCore, BitwiseRunToRun) {
  std::unique_ptr<Ops> cuda = make_cuda_attention("own", DType::kBFloat16);
  for (const AttentionShape& s : tensor_core_shapes()) {
    const Tensors first = attention_run(*cuda, s);
    expect_all_equal(attention_run(*cuda, s), first, "tensor-core run to run " + describe(s));
  }
}

// PARAPLAN_CUDA_ATTENTION=fma (the FMA kernels) and own (tensor
// cores) agree within the tensor-core tolerances (the FMA kernels are the
// fp32 computation rounded once, as the CPU's), and the switch takes effect.
TEST_F(CudaAttentionTensorCore, FmaSwitchAgreesWithTensorCores) {
  std::unique_ptr<Ops> tensor_cores = make_cuda_attention("own", DType::kBFloat16),
                       fma = make_cuda_attention("fma", DType::kBFloat16);
  for (const AttentionShape& s : tensor_core_shapes()) {
    const Tensors default_result = attention_run(*tensor_cores, s);
    // The FMA backward reads the tensor-core forward's out and logsumexp.
    const Tensors fma_result = attention_run(*fma, s, &default_result);
    expect_tensor_core_close(default_result, fma_result, describe(s) + " (default vs fma)");
    // Rounding P to bf16 moves some of 2 * 200 * 3 * D outputs across a
    // rounding boundary: different bits show that the tensor cores ran.
    if (s.seq_len == 200) {
      EXPECT_FALSE(tensor_compare::compare_equal(default_result[0], fma_result[0], "out").passed())
          << describe(s) << ": the default and the FMA kernels gave the same bits";
    }
  }
}

// ---- overwriting dqkv (GradientWrite::kOverwrite) --------------------------------------------

// dqkv after one forward and backward from a buffer of zeros, added to
// (kAccumulate), or of NaN, overwritten (kOverwrite: a stray read of the old
// value shows as NaN).
std::vector<float> attention_gradient(Ops& ops, const AttentionShape& s, GradientWrite write) {
  Buffers buffers(ops);
  const AttentionRun run = run_forward(ops, buffers, s);
  const float start = write == GradientWrite::kOverwrite ? std::nanf("") : 0.0f;
  void* dqkv = buffers.upload_storage(std::vector<float>(s.qkv_elements(), start), s.unaligned);
  ops.attention_backward(dqkv, run.scratch, run.dout, run.qkv, run.out, run.logsumexp, s.batch,
                         s.seq_len, s.num_heads, s.kv_heads(), s.head_dim, write);
  return buffers.download_storage(dqkv, s.qkv_elements());
}

// Overwriting gives what accumulating into zeros gives, as values (-0 == +0;
// a NaN never equals).
void expect_overwrite_equals_accumulate(Ops& ops, const AttentionShape& s,
                                        const std::string& kernels) {
  expect_equal(attention_gradient(ops, s, GradientWrite::kOverwrite),
               attention_gradient(ops, s, GradientWrite::kAccumulate),
               kernels + " dqkv overwritten vs accumulated into zeros " + describe(s));
}

// The FMA kernels (forced), fp32 and bf16 storage.
TEST_P(CudaAttention, OverwriteEqualsAccumulateIntoZeros) {
  std::unique_ptr<Ops> cuda = make_cuda_attention("fma", dtype());
  for (const AttentionShape& s :
       {AttentionShape{2, 33, 3, 8}, AttentionShape{1, 200, 2, 64},
        AttentionShape{1, 100, 2, 32, 1.5f, true}, AttentionShape{2, 130, 4, 32, 1.5f, false, 2},
        AttentionShape{1, 100, 6, 64, 1.5f, false, 1}}) {
    expect_overwrite_equals_accumulate(*cuda, s, "fma");
  }
}

// The tensor-core kernels (bf16, head_dim 64 and 128, grouped KV heads).
TEST_F(CudaAttentionTensorCore, OverwriteEqualsAccumulateIntoZeros) {
  std::unique_ptr<Ops> cuda = make_cuda_attention("own", DType::kBFloat16);
  for (const AttentionShape& s : tensor_core_shapes()) {
    expect_overwrite_equals_accumulate(*cuda, s, "tensor-core");
  }
}

TEST_F(CudaAttentionTensorCore, RejectsAnUnknownSwitchValue) {
  const ScopedEnvironment mode("PARAPLAN_CUDA_ATTENTION", "tensor");
  EXPECT_THROW(make_cuda_ops(0, DType::kBFloat16), std::runtime_error);
}

// ---- loss ------------------------------------------------------------------------------------

// losses, then dlogits (separate buffer), then dlogits computed in place, then
// the losses of an evaluation pass (no dlogits).
Tensors cross_entropy_run(Ops& ops, const std::vector<float>& logits,
                          const std::vector<int32_t>& targets, int vocab, bool unaligned) {
  const int rows = static_cast<int>(targets.size());
  Buffers buffers(ops);
  const void* device_logits = buffers.upload_storage(logits, unaligned);
  const int32_t* device_targets = buffers.upload(targets);
  float* losses = buffers.allocate_floats(rows);
  void* dlogits = buffers.allocate_storage(logits.size());
  ops.softmax_cross_entropy(losses, dlogits, device_logits, device_targets, rows, vocab, 0.25f,
                            nullptr);
  Tensors result{buffers.download(losses, rows), buffers.download_storage(dlogits, logits.size())};
  void* in_place = buffers.upload_storage(logits, unaligned);
  ops.softmax_cross_entropy(losses, in_place, in_place, device_targets, rows, vocab, 0.25f,
                            nullptr);
  result.push_back(buffers.download_storage(in_place, logits.size()));
  ops.softmax_cross_entropy(losses, nullptr, device_logits, device_targets, rows, vocab, 0.25f,
                            nullptr);
  result.push_back(buffers.download(losses, rows));  // evaluation: the same losses
  return result;
}

// Losses are fp32 (from the same widened logits on both backends); dlogits are storage.
std::vector<double> cross_entropy_tolerances(DType dtype) {
  const double storage = storage_tolerance(dtype, kStrictTolerance);
  return {kStrictTolerance, storage, storage, kStrictTolerance};
}

TEST_P(CudaLoss, SoftmaxCrossEntropyMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  for (auto [vocab, unaligned] :
       {std::pair{96, false}, std::pair{101, false}, std::pair{96, true}, std::pair{5000, false}}) {
    const int rows = 13;
    const std::vector<float> logits = random_floats(static_cast<size_t>(rows) * vocab, 60, 4.0f);
    std::vector<int32_t> targets = random_ints(rows, 61, 0, vocab);
    targets[0] = 0;
    targets[1] = vocab - 1;
    const Tensors actual = cross_entropy_run(*cuda, logits, targets, vocab, unaligned);
    expect_all_close(actual, cross_entropy_run(*cpu, logits, targets, vocab, unaligned),
                     cross_entropy_tolerances(dtype()), "cross-entropy V=" + std::to_string(vocab));
    const std::string what = " V=" + std::to_string(vocab);
    expect_equal(actual[2], actual[1], "cross-entropy dlogits in place vs out of place" + what);
    expect_equal(actual[3], actual[0], "cross-entropy evaluation vs training losses" + what);
  }
}

// GPT-2's vocabulary over more rows than the grid has blocks (the fused op
// keeps half the L2's worth of rows in flight: ~250 bf16 rows of 50,304 on an
// H100, a block per SM in fp32), so every block takes several rows in turn.
TEST_P(CudaLoss, SoftmaxCrossEntropyOverMoreRowsThanBlocksMatchesCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  const int rows = 600, vocab = 50304;
  const std::vector<float> logits = random_floats(static_cast<size_t>(rows) * vocab, 62, 4.0f);
  const std::vector<int32_t> targets = random_ints(rows, 63, 0, vocab);
  const Tensors actual = cross_entropy_run(*cuda, logits, targets, vocab, false);
  expect_all_close(actual, cross_entropy_run(*cpu, logits, targets, vocab, false),
                   cross_entropy_tolerances(dtype()), "cross-entropy, 600 rows of 50,304");
  expect_equal(actual[2], actual[1], "cross-entropy dlogits in place vs out of place, 600 rows");
  expect_equal(actual[3], actual[0], "cross-entropy evaluation vs training losses, 600 rows");
}

TEST_P(CudaLoss, CrossEntropyRejectsTargetsOutOfRange) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  Buffers buffers(*cuda);
  const int rows = 4, vocab = 8;
  const void* logits = buffers.upload_storage(random_floats(rows * vocab, 62));
  float* losses = buffers.allocate_floats(rows);
  float* stats = buffers.allocate_floats(2 * rows);
  const int32_t* too_large = buffers.upload(std::vector<int32_t>{1, 2, 8, 9});
  const int32_t* negative = buffers.upload(std::vector<int32_t>{1, -1, 2, 3});
  const int32_t* valid = buffers.upload(std::vector<int32_t>{1, 2, 7, 3});
  // The kernels record bad targets without waiting; the step's one check
  // throws the first bad row's, as the CPU backend would have at once.
  auto deferred_error = [&] {
    try {
      cuda->check_deferred_errors();
    } catch (const std::out_of_range& error) {
      return std::string(error.what());
    }
    return std::string("none");
  };
  cuda->softmax_cross_entropy(losses, nullptr, logits, too_large, rows, vocab, 1.0f, nullptr);
  EXPECT_EQ(deferred_error(),
            "softmax_cross_entropy: target 8 in row 2 is outside the vocabulary [0, 8)");
  cuda->softmax_cross_entropy(losses, nullptr, logits, negative, rows, vocab, 1.0f, nullptr);
  EXPECT_EQ(deferred_error(),
            "softmax_cross_entropy: target -1 in row 1 is outside the vocabulary [0, 8)");
  cuda->cross_entropy_shard_stats(stats, stats + rows, logits, negative, rows, vocab, 0);
  EXPECT_EQ(deferred_error(), "cross_entropy_shard_stats: target -1 in row 1 is negative");
  // A shard's stats accept targets of other shards (above its range).
  cuda->cross_entropy_shard_stats(stats, stats + rows, logits, too_large, rows, vocab, 0);
  EXPECT_EQ(deferred_error(), "none");
  // The record was reset: valid targets pass again.
  cuda->softmax_cross_entropy(losses, nullptr, logits, valid, rows, vocab, 1.0f, nullptr);
  EXPECT_EQ(deferred_error(), "none");
}

// The three vocab-parallel steps over num_shards slices, the statistics
// combined on the host as the runtime's all-reduces would: losses, dlogits.
Tensors sharded_cross_entropy(Ops& ops, const std::vector<float>& logits,
                              const std::vector<int32_t>& targets, int vocab, int num_shards) {
  const int rows = static_cast<int>(targets.size());
  Buffers buffers(ops);
  const int32_t* device_targets = buffers.upload(targets);
  auto start_of = [&](int s) {
    return static_cast<int>(static_cast<int64_t>(vocab) * s / num_shards);
  };
  std::vector<void*> slices(num_shards);
  std::vector<float> row_max(rows, -INFINITY), target_logit(rows, 0.0f), exp_sum(rows, 0.0f);
  float* stats = buffers.allocate_floats(2 * rows);
  for (int s = 0; s < num_shards; s++) {
    const int start = start_of(s), local = start_of(s + 1) - start;
    std::vector<float> slice(static_cast<size_t>(rows) * local);
    for (int r = 0; r < rows; r++) {
      std::copy_n(logits.begin() + static_cast<size_t>(r) * vocab + start, local,
                  slice.begin() + static_cast<size_t>(r) * local);
    }
    slices[s] = buffers.upload_storage(slice);
    ops.cross_entropy_shard_stats(stats, stats + rows, slices[s], device_targets, rows, local,
                                  start);
    const std::vector<float> host = buffers.download(stats, 2 * rows);
    for (int r = 0; r < rows; r++) {
      row_max[r] = std::max(row_max[r], host[r]);
      target_logit[r] += host[rows + r];
    }
  }
  const float* device_max = buffers.upload(row_max);
  for (int s = 0; s < num_shards; s++) {
    ops.cross_entropy_shard_exp_sums(stats, slices[s], device_max, rows,
                                     start_of(s + 1) - start_of(s));
    const std::vector<float> host = buffers.download(stats, rows);
    for (int r = 0; r < rows; r++) exp_sum[r] += host[r];
  }
  const float* device_sum = buffers.upload(exp_sum);
  const float* device_target_logit = buffers.upload(target_logit);
  Tensors result{std::vector<float>(), std::vector<float>(logits.size())};
  for (int s = 0; s < num_shards; s++) {
    const int start = start_of(s), local = start_of(s + 1) - start;
    // In place, as the model runs it.
    ops.cross_entropy_shard_finish(stats, slices[s], slices[s], device_targets, device_max,
                                   device_sum, device_target_logit, rows, local, start, 0.25f,
                                   nullptr);
    if (s == 0) result[0] = buffers.download(stats, rows);
    const std::vector<float> slice =
        buffers.download_storage(slices[s], static_cast<size_t>(rows) * local);
    for (int r = 0; r < rows; r++) {
      std::copy_n(slice.begin() + static_cast<size_t>(r) * local, local,
                  result[1].begin() + static_cast<size_t>(r) * vocab + start);
    }
  }
  return result;
}

TEST_P(CudaLoss, ShardedCrossEntropyMatchesFusedAndCpu) {
  std::unique_ptr<Ops> cpu = make_cpu(dtype()), cuda = make_cuda(true, dtype());
  for (int vocab : {96, 101}) {
    const int rows = 11;
    const std::vector<float> logits = random_floats(static_cast<size_t>(rows) * vocab, 63, 4.0f);
    const std::vector<int32_t> targets = random_ints(rows, 64, 0, vocab);
    const Tensors fused = cross_entropy_run(*cuda, logits, targets, vocab, false);
    // One shard: the fused op's results, bitwise (same mapping, same rounding).
    const Tensors one = sharded_cross_entropy(*cuda, logits, targets, vocab, 1);
    const std::string what = " V=" + std::to_string(vocab);
    expect_equal(one[0], fused[0], "1-shard losses vs fused" + what);
    expect_equal(one[1], fused[1], "1-shard dlogits vs fused" + what);
    for (int shards : {2, 3}) {
      const Tensors expected = sharded_cross_entropy(*cpu, logits, targets, vocab, shards);
      expect_all_close(sharded_cross_entropy(*cuda, logits, targets, vocab, shards), expected,
                       cross_entropy_tolerances(dtype()),
                       std::to_string(shards) + " shards V=" + std::to_string(vocab));
    }
  }
}

}  // namespace
}  // namespace paraplan::kernels
