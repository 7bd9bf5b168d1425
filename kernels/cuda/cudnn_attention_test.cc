// cudnn_attention_test.cc: attention on cuDNN's SDPA (cudnn_attention.h,
// PARAPLAN_CUDA_ATTENTION=cudnn) against the CPU backend in bf16 and against
// paraplan's own tensor-core kernels (PARAPLAN_CUDA_ATTENTION=own), at
// GPT-2's head dim (64) and Llama's (128), with and without grouped KV heads:
// out, logsumexp and dqkv; a forward by one family and the backward by the
// other (the logsumexp conventions agree); bitwise run to run (the
// deterministic backward) and batch independence; dqkv overwritten equal to
// dqkv accumulated into zeros; cuDNN's workspace within the formula the
// planner counts (common/attention_workspace.h); and, in a fresh process
// where libcudnn cannot load, the default falling back to the own kernels
// with one line (and =cudnn refusing). Skips, visibly, without a GPU, and the
// cuDNN comparisons without cuDNN.
#include "kernels/cuda/cudnn_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/attention_workspace.h"
#include "kernels/cuda/cuda_test_support.h"
#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

// Tolerances against the CPU in bf16 (max error / max |cpu|), as the own
// tensor-core kernels' (cuda_attention_test.cc explains them): cuDNN's
// flash attention also rounds P and dS to bf16 as tensor-core operands, and
// rounds out and dq, dk, dv once; kAccumulate rounds the gradient, then the
// sum (cuda_attention_dispatch.cu), one more step inside the same budget.
// logsumexp is fp32 from exact bf16 products: the fp32 tolerance.
constexpr double kOutTolerance = 2e-2;
constexpr double kGradientTolerance = 3e-2;
constexpr double kLogsumexpTolerance = 1e-4;

struct Shape {
  int batch, seq_len, heads, kv_heads, head_dim;
  size_t qkv() const {
    return static_cast<size_t>(batch) * seq_len * (heads + 2 * kv_heads) * head_dim;
  }
  size_t out() const { return static_cast<size_t>(batch) * seq_len * heads * head_dim; }
  size_t rows() const { return static_cast<size_t>(batch) * heads * seq_len; }
};

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.seq_len) +
         " H=" + std::to_string(s.heads) + " Hkv=" + std::to_string(s.kv_heads) +
         " D=" + std::to_string(s.head_dim);
}

// GPT-2's head dim and Llama's, multi-head and grouped (H / Hkv = 4), T from
// one token (which cuDNN does not take: PARAPLAN_CUDA_ATTENTION=cudnn runs
// it on the own kernels) through partial tiles to GPT-2's 1024.
std::vector<Shape> shapes() {
  std::vector<Shape> list;
  for (const int d : {64, 128}) {
    list.push_back({2, 1, 3, 3, d});
    list.push_back({2, 17, 3, 3, d});
    list.push_back({2, 200, 4, 4, d});
    list.push_back({2, 130, 8, 2, d});
    list.push_back({1, 256, 4, 1, d});
  }
  list.push_back({1, 1024, 12, 12, 64});  // GPT-2 124M's layer, one sequence
  list.push_back({1, 512, 8, 2, 128});    // Llama's head dim, grouped
  return list;
}

// out, logsumexp and the gradient the backward added to dqkv (random start:
// kAccumulate), qkv seed 60, dout seed 62. With `forward` (another run's out
// and logsumexp) the backward reads those instead of this run's.
Tensors run(Ops& ops, const Shape& s, const Tensors* forward = nullptr,
            GradientWrite write = GradientWrite::kAccumulate, float start = 0.0f) {
  Buffers buffers(ops);
  const void* qkv = buffers.upload_storage(random_floats(s.qkv(), 60, 1.5f));
  void* out = buffers.allocate_storage(s.out());
  float* logsumexp = buffers.allocate_floats(s.rows());
  ops.attention_forward(out, logsumexp, qkv, s.batch, s.seq_len, s.heads, s.kv_heads, s.head_dim);
  Tensors result{buffers.download_storage(out, s.out()), buffers.download(logsumexp, s.rows())};
  const void* saved_out = forward != nullptr ? buffers.upload_storage((*forward)[0]) : out;
  const float* saved_logsumexp = forward != nullptr ? buffers.upload((*forward)[1]) : logsumexp;
  const void* dout = buffers.upload_storage(random_floats(s.out(), 62));
  float* scratch = buffers.upload(std::vector<float>(s.rows(), 1e30f));
  const std::vector<float> before =
      write == GradientWrite::kAccumulate
          ? round_to(ops.storage_dtype(), random_floats(s.qkv(), 61, 0.125f))
          : std::vector<float>(s.qkv(), start);
  void* dqkv = buffers.upload_storage(before);
  ops.attention_backward(dqkv, scratch, dout, qkv, saved_out, saved_logsumexp, s.batch, s.seq_len,
                         s.heads, s.kv_heads, s.head_dim, write);
  std::vector<float> gradient = buffers.download_storage(dqkv, s.qkv());
  if (write == GradientWrite::kAccumulate) {
    for (size_t i = 0; i < gradient.size(); ++i) gradient[i] -= before[i];
  }
  result.push_back(std::move(gradient));
  return result;
}

void expect_close_to(const Tensors& actual, const Tensors& expected, const std::string& what) {
  expect_close(actual[0], expected[0], kOutTolerance, "out " + what);
  expect_close(actual[1], expected[1], kLogsumexpTolerance, "logsumexp " + what);
  expect_close(actual[2], expected[2], kGradientTolerance, "dqkv " + what);
}

class CudaCudnnAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
    std::string why;
    if (!cuda_cudnn_available(&why)) GTEST_SKIP() << "cuDNN's SDPA is not available: " << why;
    std::printf("[ cudnn   ] %s\n", why.c_str());
  }
  static std::unique_ptr<Ops> make(const char* attention) {
    return make_cuda_attention(attention, DType::kBFloat16);
  }
};

TEST_F(CudaCudnnAttention, MatchesCpuAndOwnKernels) {
  std::unique_ptr<Ops> cpu = make_cpu(DType::kBFloat16), cudnn = make("cudnn"), own = make("own");
  for (const Shape& s : shapes()) {
    // Both GPU backwards read the CPU's out and logsumexp (the same inputs).
    const Tensors expected = run(*cpu, s);
    const Tensors actual = run(*cudnn, s, &expected);
    expect_close_to(actual, expected, "cudnn vs cpu " + describe(s));
    expect_close_to(actual, run(*own, s, &expected), "cudnn vs own " + describe(s));
  }
}

// A forward by one family and the backward by the other: the logsumexp (and
// out) one writes is what the other's backward needs.
TEST_F(CudaCudnnAttention, EitherFamilysBackwardReadsTheOthersForward) {
  std::unique_ptr<Ops> cpu = make_cpu(DType::kBFloat16), cudnn = make("cudnn"), own = make("own");
  for (const Shape& s : shapes()) {
    const Tensors expected = run(*cpu, s);
    const Tensors cudnn_forward = run(*cudnn, s), own_forward = run(*own, s);
    const Tensors own_backward = run(*own, s, &cudnn_forward);
    expect_close(own_backward[2], expected[2], kGradientTolerance,
                 "dqkv, cudnn forward + own backward " + describe(s));
    const Tensors cudnn_backward = run(*cudnn, s, &own_forward);
    expect_close(cudnn_backward[2], expected[2], kGradientTolerance,
                 "dqkv, own forward + cudnn backward " + describe(s));
  }
}

TEST_F(CudaCudnnAttention, BitwiseRunToRun) {
  std::unique_ptr<Ops> cudnn = make("cudnn"), again = make("cudnn");
  for (const Shape& s : shapes()) {
    const Tensors first = run(*cudnn, s);
    expect_all_equal(run(*cudnn, s), first, "cudnn run to run " + describe(s));
    expect_all_equal(run(*again, s), first, "cudnn, a second Ops object " + describe(s));
  }
}

// Batch entry 0 of a B = 3 call against the same sequence alone (B = 1):
// the own kernels' bits do not depend on the batch (kernels/README.md);
// cuDNN promises nothing (its heuristics may pick another engine per
// batch), so this holds it to the tolerances and says on stdout whether its
// bits differ: plans of other micro-batch sizes then agree within the loss
// tolerance, not bitwise.
TEST_F(CudaCudnnAttention, BatchEntriesAgreeWithTheSequenceAlone) {
  std::unique_ptr<Ops> cudnn = make("cudnn");
  for (const int head_dim : {64, 128}) {
    const Shape three{3, 200, 4, 2, head_dim}, one{1, 200, 4, 2, head_dim};
    const Tensors whole = run(*cudnn, three);
    // run() draws the same seeds, so B = 1's sequence is B = 3's first: compare entry 0.
    const Tensors alone = run(*cudnn, one);
    const std::span<const float> out(whole[0].data(), one.out()),
        logsumexp(whole[1].data(), one.rows());
    const std::string what = "of B=1 vs batch entry 0 of B=3, D=" + std::to_string(head_dim);
    expect_close(alone[0], out, kOutTolerance, "out " + what);
    expect_close(alone[1], logsumexp, kLogsumexpTolerance, "logsumexp " + what);
    const bool bitwise = std::equal(out.begin(), out.end(), alone[0].begin()) &&
                         std::equal(logsumexp.begin(), logsumexp.end(), alone[1].begin());
    std::cout << "cuDNN SDPA, D=" << head_dim << ": batch entry 0 of B=3 "
              << (bitwise ? "is bitwise" : "differs in bits from") << " the sequence alone\n";
  }
}

TEST_F(CudaCudnnAttention, OverwriteEqualsAccumulateIntoZeros) {
  std::unique_ptr<Ops> cudnn = make("cudnn");
  for (const Shape& s : shapes()) {
    expect_equal(run(*cudnn, s, nullptr, GradientWrite::kOverwrite, std::nanf(""))[2],
                 run(*cudnn, s, nullptr, GradientWrite::kOverwrite, 0.0f)[2],
                 "cudnn dqkv overwritten NaN vs zeros " + describe(s));
  }
}

// The graphs' workspaces are within what the planner counts for the shape.
TEST_F(CudaCudnnAttention, WorkspaceWithinThePlannersFormula) {
  std::unique_ptr<Ops> ops = make("cudnn");
  std::unique_ptr<cuda::CudnnAttention> attention =
      cuda::make_cudnn_attention(static_cast<cudaStream_t>(ops->stream()));
  for (const Shape& s :
       {Shape{8, 1024, 12, 12, 64}, Shape{1, 2048, 32, 8, 128}, Shape{2, 200, 4, 4, 64}}) {
    const cuda::AttentionShapeKey key{s.batch,    s.seq_len,  s.heads,
                                      s.kv_heads, s.head_dim, DType::kBFloat16};
    ASSERT_EQ(attention->prepare(key), "") << describe(s);
    const int64_t forward = static_cast<int64_t>(attention->forward_workspace_bytes(key));
    const int64_t backward = static_cast<int64_t>(attention->backward_workspace_bytes(key));
    const int64_t formula =
        cudnn_sdpa_workspace_bytes(s.batch, s.seq_len, s.heads, s.head_dim, true);
    std::printf("[ cudnn   ] %s: workspace forward %lld, backward %lld bytes; formula %lld\n",
                describe(s).c_str(), static_cast<long long>(forward),
                static_cast<long long>(backward), static_cast<long long>(formula));
    RecordProperty("workspace_backward." + describe(s), std::to_string(backward));
    EXPECT_LE(forward, cudnn_sdpa_workspace_bytes(s.batch, s.seq_len, s.heads, s.head_dim, false));
    EXPECT_LE(backward, formula) << describe(s);
  }
}

// ---- the library (no GPU needed: these run wherever the CUDA build does) ------------------

// Loaded, with its version and file, or why not: one line either way.
TEST(CudaCudnnLibrary, LoadsOrSaysWhyInOneLine) {
  std::string description;
  const bool available = cuda_cudnn_available(&description);
  std::printf("[ cudnn   ] available=%d: %s\n", available, description.c_str());
  EXPECT_FALSE(description.empty());
  EXPECT_EQ(description.find('\n'), std::string::npos) << description;
  if (available) {
    EXPECT_EQ(description.rfind("cuDNN 9.", 0), 0u) << description;
  }
  // Asked again: the same answer, nothing loaded twice.
  std::string again;
  EXPECT_EQ(cuda_cudnn_available(&again), available);
  EXPECT_EQ(again, description);
}

// The graphs paraplan builds, validated by the frontend for an H100 (sm_90)
// without a GPU: layouts, strides, grouped heads and the deterministic
// backward's options are accepted, at GPT-2's and Llama's shapes.
TEST(CudaCudnnLibrary, GraphsValidateForHopperWithoutAGpu) {
  std::string why;
  if (!cuda_cudnn_available(&why)) GTEST_SKIP() << "cuDNN's SDPA is not available: " << why;
  for (const Shape& s : shapes()) {
    const cuda::AttentionShapeKey key{s.batch,    s.seq_len,  s.heads,
                                      s.kv_heads, s.head_dim, DType::kBFloat16};
    // T = 1 stays on the own kernels: cuDNN's backward refuses it.
    const std::string expected = s.seq_len > 1 ? "" : "the shape is not one paraplan runs on cuDNN";
    EXPECT_EQ(cuda::validate_cudnn_attention_graphs(key, 90), expected) << describe(s);
  }
  // fp32 is not taken to cuDNN.
  EXPECT_NE(cuda::validate_cudnn_attention_graphs({1, 64, 2, 2, 64, DType::kFloat32}, 90), "");
}

// The frontend's libcudart is named before main, while the process has one
// thread (cudnn_library.cc): this binary run again, with the variable taken
// out of its environment, finds it set before anything loads cuDNN.
TEST(CudaCudnnLibrary, CudartNamedBeforeTheFirstLoad) {
  if (std::getenv("PARAPLAN_TEST_CUDART_CHILD") != nullptr) {
    const char* cudart = std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME");
    ASSERT_NE(cudart, nullptr);
    EXPECT_EQ(std::string(cudart).rfind("libcudart.so.", 0), 0u) << cudart;
    return;
  }
  std::string why;
  if (!cuda_cudnn_available(&why)) GTEST_SKIP() << "cuDNN's SDPA is not available: " << why;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const int status =
      std::system(("env -u CUDNN_FRONTEND_CUDART_LIB_NAME PARAPLAN_TEST_CUDART_CHILD=1 '" + self +
                   "' --gtest_filter=CudaCudnnLibrary.CudartNamedBeforeTheFirstLoad "
                   ">/dev/null 2>&1")
                      .c_str());
  EXPECT_EQ(status, 0) << "the child run without CUDNN_FRONTEND_CUDART_LIB_NAME failed";
}

// PARAPLAN_CUDNN_LIBRARY naming a file that does not load: reported (with
// the path), never thrown; in a fresh process, as the load is once per process.
TEST(CudaCudnnLibrary, AnUnloadableLibraryIsReportedNotThrown) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("PARAPLAN_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
        std::string why;
        const bool available = cuda_cudnn_available(&why);
        std::fprintf(stderr, "available=%d why=%s\n", available, why.c_str());
        std::exit(available ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "available=0 why=.*/nonexistent/libcudnn.so.9");
}

// In a fresh process (gtest re-runs this binary) where libcudnn cannot load:
// the default runs the own kernels, bitwise, and says so in one line (spdlog,
// on stdout, captured); PARAPLAN_CUDA_ATTENTION=cudnn refuses to make the Ops.
int fallback_child() {
  setenv("PARAPLAN_CUDNN_LIBRARY", "/nonexistent/libcudnn.so.9", 1);
  ::testing::internal::CaptureStdout();
  std::unique_ptr<Ops> fallback = make_cuda_attention(nullptr, DType::kBFloat16);
  std::unique_ptr<Ops> own = make_cuda_attention("own", DType::kBFloat16);
  bool same = true;
  for (const Shape& s : {Shape{2, 130, 8, 2, 64}, Shape{1, 200, 4, 4, 128}}) {
    for (int call = 0; call < 2; ++call) same = same && run(*fallback, s) == run(*own, s);
  }
  const std::string printed = ::testing::internal::GetCapturedStdout();
  const std::string line = "attention: paraplan's own kernels (cuDNN's SDPA is not used: ";
  int lines = 0;
  for (size_t at = printed.find(line); at != std::string::npos; at = printed.find(line, at + 1))
    ++lines;
  bool refused = false;
  try {
    make_cuda_attention("cudnn", DType::kBFloat16);
  } catch (const std::runtime_error& error) {
    refused = std::string(error.what()).find("PARAPLAN_CUDA_ATTENTION=cudnn") != std::string::npos;
  }
  std::fprintf(stderr, "fallback: same=%d lines=%d refused=%d\n%s", same, lines, refused,
               printed.c_str());
  return same && lines == 1 && refused ? 0 : 1;
}

TEST(CudaCudnnAttentionFallback, OwnKernelsWithOneLineWhenLibcudnnDoesNotLoad) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: CUDA op tests skipped";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(fallback_child()), ::testing::ExitedWithCode(0),
              "fallback: same=1 lines=1 refused=1");
}

}  // namespace
}  // namespace paraplan::kernels
