// cuda_loss_sum_test.cc: the losses' sum the CUDA loss kernels fold in
// (Ops::softmax_cross_entropy's and cross_entropy_shard_finish's loss_sum:
// each block's rows in double, the last block to finish adding the block
// totals). Against the sum of the losses the same call wrote, counted here;
// bitwise run to run; launch after launch on one accumulator (the last
// block's ticket is left ready for the next); the vocab-parallel step over
// more rows than its grid's 1024 blocks. fp32 and bf16 storage. Skips,
// visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

class CudaLossSum : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaLossSum, kStorageDtypes, storage_test_name);

double host_sum(const std::vector<float>& losses) {
  double sum = 0.0;
  for (float loss : losses) sum += loss;
  return sum;
}

// Sums of about a thousand losses of a few units: the orders differ, so
// the sums agree to double rounding, far inside this.
constexpr double kSumTolerance = 1e-12;

TEST_P(CudaLossSum, FusedLossAddsItsLossesOnceLaunchAfterLaunch) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  const std::vector<std::pair<int, int>> shapes = {{5, 37}, {600, 50304}, {3000, 64}};
  for (const auto& [rows, vocab] : shapes) {
    SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(vocab));
    Buffers buffers(*cuda);
    const std::vector<float> logits = random_floats(static_cast<size_t>(rows) * vocab, 71, 4.0f);
    const void* device_logits = buffers.upload_storage(logits);
    const int32_t* targets = buffers.upload(random_ints(rows, 72, 0, vocab));
    float* losses = buffers.allocate_floats(rows);
    double* sum = buffers.upload(std::vector<double>{1.25});
    cuda->softmax_cross_entropy(losses, nullptr, device_logits, targets, rows, vocab, 1.0f, sum);
    const double once = buffers.download(sum, 1)[0];
    const double expected = 1.25 + host_sum(buffers.download(losses, rows));
    EXPECT_NEAR(once, expected, kSumTolerance * std::fabs(expected));
    // Again on the same accumulator, with the gradient this time: the same
    // losses added once more, in the same order.
    void* dlogits = buffers.allocate_storage(logits.size());
    cuda->softmax_cross_entropy(losses, dlogits, device_logits, targets, rows, vocab, 1.0f, sum);
    const double twice = buffers.download(sum, 1)[0];
    EXPECT_NEAR(twice - once, once - 1.25, kSumTolerance * std::fabs(expected));
    // Bitwise run to run from the same start.
    double* again = buffers.upload(std::vector<double>{1.25});
    cuda->softmax_cross_entropy(losses, nullptr, device_logits, targets, rows, vocab, 1.0f, again);
    EXPECT_EQ(buffers.download(again, 1)[0], once);
  }
}

TEST_P(CudaLossSum, VocabParallelStepAddsItsLossesOverMoreRowsThanBlocks) {
  std::unique_ptr<Ops> cuda = make_cuda(true, dtype());
  Buffers buffers(*cuda);
  const int rows = 2500, vocab = 96;  // one shard: the whole vocabulary
  const void* logits = buffers.upload_storage(random_floats(rows * vocab, 73, 4.0f));
  const int32_t* targets = buffers.upload(random_ints(rows, 74, 0, vocab));
  float* stats = buffers.allocate_floats(3 * rows);
  float *row_max = stats, *target_logit = stats + rows, *exp_sum = stats + 2 * rows;
  cuda->cross_entropy_shard_stats(row_max, target_logit, logits, targets, rows, vocab, 0);
  cuda->cross_entropy_shard_exp_sums(exp_sum, logits, row_max, rows, vocab);
  float* losses = buffers.upload(std::vector<float>(rows, -1.0f));
  double* sum = buffers.upload(std::vector<double>{0.0});
  cuda->cross_entropy_shard_finish(losses, nullptr, logits, targets, row_max, exp_sum, target_logit,
                                   rows, vocab, 0, 1.0f, sum);
  const std::vector<float> written = buffers.download(losses, rows);
  const double expected = host_sum(written);
  const double folded = buffers.download(sum, 1)[0];
  EXPECT_NEAR(folded, expected, kSumTolerance * std::fabs(expected));
  // Every row written: the grid-stride loop reached the rows past 1024.
  for (int r = 0; r < rows; r++) ASSERT_GT(written[r], 0.0f) << r;
  // The fused op's losses for the same rows, and its sum, agree.
  double* fused = buffers.upload(std::vector<double>{0.0});
  cuda->softmax_cross_entropy(losses, nullptr, logits, targets, rows, vocab, 1.0f, fused);
  EXPECT_NEAR(buffers.download(fused, 1)[0], folded, 1e-9 * std::fabs(folded));
}

}  // namespace
}  // namespace paraplan::kernels
