// cuda_optimizer_test.cc: the CUDA backend's AdamW over a run list in one
// launch (Ops::adamw_runs, cuda_optimizer.cu): bitwise the per-tensor CUDA
// adamw launches with the host's clip factor, for both storage dtypes and
// both gradient kinds, over the run list of kernels/testing/
// adamw_runs_case.h (runs of 1 element to several 8192-element chunks,
// aligned and not); the clip factor computed on the device from a device sum
// of squares; the master weights against the CPU backend's; and a pending
// deferred error (a bad loss target) leaves every tensor as it was until
// check_deferred_errors reports it. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/ops.h"
#include "kernels/testing/adamw_runs_case.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;
namespace cases = adamw_runs_testing;

class CudaOptimizer : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaOptimizer, kStorageDtypes, storage_test_name);

TEST_P(CudaOptimizer, AdamWRunsIsTheLaunchPerRunBitwise) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype()), cpu = make_cpu(dtype());
  for (bool float_gradients : {false, true}) {
    SCOPED_TRACE(float_gradients ? "fp32 gradients" : "storage gradients");
    const cases::Result fused = cases::run_case(*cuda, true, float_gradients);
    EXPECT_TRUE(cases::same_bits(fused, cases::run_case(*cuda, false, float_gradients)));
    // Run to run, with the run table already on the device: the same bits.
    EXPECT_TRUE(cases::same_bits(fused, cases::run_case(*cuda, true, float_gradients)));
    const cases::Changed changed = cases::changed_master_weights(fused);
    EXPECT_EQ(changed.in_runs, cases::run_elements());
    EXPECT_EQ(changed.in_gaps, 0u);
    // The backends differ by FMA contraction only (kStrictTolerance).
    const cases::Result reference = cases::run_case(*cpu, true, float_gradients);
    expect_close(fused.master, reference.master, kStrictTolerance, "master weights");
    expect_close(fused.second_moment, reference.second_moment, kStrictTolerance, "second moments");
  }
}

TEST_P(CudaOptimizer, APendingTargetErrorLeavesEveryTensorUntilItIsReported) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  // One row of 8 logits whose target 100 is outside the vocabulary: the
  // loss kernel records it on the device and returns.
  Buffers buffers(*cuda);
  void* logits = buffers.upload_storage(random_floats(8, 5));
  auto* targets = static_cast<int32_t*>(cuda->allocate(sizeof(int32_t)));
  const int32_t bad_target = 100;
  cuda->copy_from_host(targets, &bad_target, sizeof(bad_target));
  float* losses = buffers.upload(std::vector<float>(1, 0.0f));
  cuda->softmax_cross_entropy(losses, nullptr, logits, targets, 1, 8, 1.0f, nullptr);

  const size_t n = 4096;
  float* master = buffers.upload(random_floats(n, 6));
  void* params = buffers.upload_storage(random_floats(n, 6));
  const void* grads = buffers.upload_storage(random_floats(n, 7));
  float* first = buffers.upload(std::vector<float>(n, 0.0f));
  float* second = buffers.upload(std::vector<float>(n, 0.0f));
  const std::vector<AdamWRun> runs = {{master, params, grads, first, second, n, 0.1f}};
  const AdamWStep hyperparameters{.learning_rate = 1e-2f, .step = 1};
  const std::vector<float> master_before = buffers.download(master, n);
  cuda->adamw_runs(runs, false, hyperparameters, {});
  EXPECT_EQ(buffers.download(master, n), master_before);
  EXPECT_EQ(buffers.download(first, n), std::vector<float>(n, 0.0f));
  EXPECT_THROW(cuda->check_deferred_errors(), std::out_of_range);
  // Reported and cleared: the next step updates.
  cuda->adamw_runs(runs, false, hyperparameters, {});
  EXPECT_NE(buffers.download(master, n), master_before);
  cuda->deallocate(targets);
}

}  // namespace
}  // namespace paraplan::kernels
