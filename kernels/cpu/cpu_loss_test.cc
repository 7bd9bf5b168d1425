// cpu_loss_test.cc: the vocab-parallel cross-entropy of kernels/ops.h on the
// CPU backend (cross_entropy_shard_stats / _exp_sums / _finish). A vocabulary
// is split into shards, the per-row statistics are combined by hand as the
// runtime's all-reduces would (max, then sums in shard order), and the result
// is compared with the fused softmax_cross_entropy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

// Deterministic values in [-scale, scale) from a linear congruential generator.
std::vector<float> pseudo_random(size_t n, uint32_t seed, float scale) {
  std::vector<float> values(n);
  uint32_t state = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    state = state * 1664525u + 1013904223u;
    values[i] = (static_cast<float>(state >> 8) / 8388608.0f - 1.0f) * scale;
  }
  return values;
}

struct LossResult {
  std::vector<float> losses;
  std::vector<float> dlogits;  // [rows, vocab], gathered back from the shards
};

// The shard boundaries: num_shards contiguous, uneven slices of [0, vocab).
int shard_start(int shard, int num_shards, int vocab) {
  return static_cast<int>(static_cast<int64_t>(vocab) * shard / num_shards);
}

// Runs the three vocab-parallel steps over num_shards slices of logits,
// combining the statistics between the steps as the all-reduces would. With
// in_place, each shard's dlogits overwrite its logits.
LossResult sharded_cross_entropy(Ops& ops, const std::vector<float>& logits,
                                 const std::vector<int32_t>& targets, int vocab, int num_shards,
                                 float loss_scale, bool in_place = false) {
  const int rows = static_cast<int>(targets.size());
  std::vector<std::vector<float>> shard_logits(num_shards);
  std::vector<float> row_max(rows, -INFINITY), target_logit(rows, 0.0f), exp_sum(rows, 0.0f);
  for (int s = 0; s < num_shards; s++) {
    const int start = shard_start(s, num_shards, vocab);
    const int local = shard_start(s + 1, num_shards, vocab) - start;
    auto& slice = shard_logits[s];
    slice.resize(static_cast<size_t>(rows) * local);
    for (int r = 0; r < rows; r++) {
      std::copy_n(logits.begin() + static_cast<size_t>(r) * vocab + start, local,
                  slice.begin() + static_cast<size_t>(r) * local);
    }
    std::vector<float> shard_max(rows), shard_target(rows);
    ops.cross_entropy_shard_stats(shard_max.data(), shard_target.data(), slice.data(),
                                  targets.data(), rows, local, start);
    for (int r = 0; r < rows; r++) {
      row_max[r] = std::max(row_max[r], shard_max[r]);  // all-reduce (max)
      target_logit[r] += shard_target[r];               // all-reduce (sum)
    }
  }
  for (int s = 0; s < num_shards; s++) {
    const int local = shard_start(s + 1, num_shards, vocab) - shard_start(s, num_shards, vocab);
    std::vector<float> shard_sum(rows);
    ops.cross_entropy_shard_exp_sums(shard_sum.data(), shard_logits[s].data(), row_max.data(), rows,
                                     local);
    for (int r = 0; r < rows; r++) exp_sum[r] += shard_sum[r];  // all-reduce (sum)
  }
  LossResult result{std::vector<float>(rows), std::vector<float>(logits.size())};
  for (int s = 0; s < num_shards; s++) {
    const int start = shard_start(s, num_shards, vocab);
    const int local = shard_start(s + 1, num_shards, vocab) - start;
    std::vector<float> separate(shard_logits[s].size());
    float* dlogits = in_place ? shard_logits[s].data() : separate.data();
    // Every shard computes the same losses; keep shard 0's.
    std::vector<float> losses(rows);
    ops.cross_entropy_shard_finish(losses.data(), dlogits, shard_logits[s].data(), targets.data(),
                                   row_max.data(), exp_sum.data(), target_logit.data(), rows, local,
                                   start, loss_scale, nullptr);
    if (s == 0) result.losses = losses;
    for (int r = 0; r < rows; r++) {
      std::copy_n(dlogits + static_cast<size_t>(r) * local, local,
                  result.dlogits.begin() + static_cast<size_t>(r) * vocab + start);
    }
  }
  return result;
}

LossResult fused_cross_entropy(Ops& ops, const std::vector<float>& logits,
                               const std::vector<int32_t>& targets, int vocab, float loss_scale) {
  const int rows = static_cast<int>(targets.size());
  LossResult result{std::vector<float>(rows), std::vector<float>(logits.size())};
  ops.softmax_cross_entropy(result.losses.data(), result.dlogits.data(), logits.data(),
                            targets.data(), rows, vocab, loss_scale, nullptr);
  return result;
}

void expect_relative_near(const std::vector<float>& actual, const std::vector<float>& expected,
                          double relative, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); i++) {
    const double bound = relative * std::max(std::fabs(actual[i]), std::fabs(expected[i]));
    EXPECT_LE(std::fabs(double{actual[i]} - expected[i]), bound)
        << what << "[" << i << "]: " << actual[i] << " vs " << expected[i];
  }
}

class CpuVocabParallelCrossEntropy : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
  // 37 columns do not split evenly, so the shards have different widths.
  static constexpr int kRows = 5, kVocab = 37;
  const std::vector<float> logits = pseudo_random(kRows * kVocab, 7, 4.0f);
  const std::vector<int32_t> targets = {0, 36, 9, 18, 27};  // spread over the shards
  static constexpr float kLossScale = 1.0f / kRows;
};

TEST_F(CpuVocabParallelCrossEntropy, ShardsReproduceTheFusedOp) {
  const LossResult fused = fused_cross_entropy(*ops, logits, targets, kVocab, kLossScale);
  for (int num_shards : {1, 2, 4}) {
    SCOPED_TRACE(num_shards);
    const LossResult sharded =
        sharded_cross_entropy(*ops, logits, targets, kVocab, num_shards, kLossScale);
    expect_relative_near(sharded.losses, fused.losses, 1e-6, "losses");
    expect_relative_near(sharded.dlogits, fused.dlogits, 1e-6, "dlogits");
  }
}

TEST_F(CpuVocabParallelCrossEntropy, OneShardIsBitwiseTheFusedOp) {
  // Same exp, same fixed-order sums, same rounding of the loss: bitwise equal,
  // beyond the 1e-6 the contract needs.
  const LossResult fused = fused_cross_entropy(*ops, logits, targets, kVocab, kLossScale);
  const LossResult sharded = sharded_cross_entropy(*ops, logits, targets, kVocab, 1, kLossScale);
  EXPECT_EQ(sharded.losses, fused.losses);
  EXPECT_EQ(sharded.dlogits, fused.dlogits);
}

TEST_F(CpuVocabParallelCrossEntropy, TargetInAnotherShardHasNoOnehotLocally) {
  // Two shards, [0, 18) and [18, 37); row 0's target (0) lies in the first.
  const int rows = 1, start = 18, local = kVocab - start;
  const std::vector<int32_t> target = {0};
  const std::vector<float> slice(logits.begin() + start, logits.begin() + kVocab);
  float shard_max = 0.0f, target_logit = 99.0f;
  ops->cross_entropy_shard_stats(&shard_max, &target_logit, slice.data(), target.data(), rows,
                                 local, start);
  EXPECT_EQ(target_logit, 0.0f);  // zero, so the all-reduced sum is the target's logit
  EXPECT_EQ(shard_max, *std::max_element(slice.begin(), slice.end()));

  // With the global statistics, the second shard's dlogits are the bare
  // probabilities times loss_scale: no -1 anywhere, and they equal the fused
  // op's dlogits on those columns.
  const LossResult fused = fused_cross_entropy(*ops, logits, targets, kVocab, kLossScale);
  const LossResult sharded = sharded_cross_entropy(*ops, logits, targets, kVocab, 2, kLossScale);
  for (int v = start; v < kVocab; v++) {
    EXPECT_GT(sharded.dlogits[v], 0.0f) << v;
    EXPECT_NEAR(sharded.dlogits[v], fused.dlogits[v], 1e-6f * std::fabs(fused.dlogits[v])) << v;
  }
  EXPECT_LT(sharded.dlogits[0], 0.0f);  // the target column, in the first shard
}

TEST_F(CpuVocabParallelCrossEntropy, InPlaceAndForwardOnlyMatchSeparateBuffers) {
  for (int num_shards : {1, 2, 4}) {
    SCOPED_TRACE(num_shards);
    const LossResult separate =
        sharded_cross_entropy(*ops, logits, targets, kVocab, num_shards, kLossScale);
    const LossResult in_place =
        sharded_cross_entropy(*ops, logits, targets, kVocab, num_shards, kLossScale, true);
    EXPECT_EQ(in_place.losses, separate.losses);
    EXPECT_EQ(in_place.dlogits, separate.dlogits);
  }
  // dlogits = null: losses only.
  std::vector<float> row_max(kRows), target_logit(kRows), exp_sum(kRows), losses(kRows);
  ops->cross_entropy_shard_stats(row_max.data(), target_logit.data(), logits.data(), targets.data(),
                                 kRows, kVocab, 0);
  ops->cross_entropy_shard_exp_sums(exp_sum.data(), logits.data(), row_max.data(), kRows, kVocab);
  ops->cross_entropy_shard_finish(losses.data(), nullptr, logits.data(), targets.data(),
                                  row_max.data(), exp_sum.data(), target_logit.data(), kRows,
                                  kVocab, 0, kLossScale, nullptr);
  EXPECT_EQ(losses, sharded_cross_entropy(*ops, logits, targets, kVocab, 1, kLossScale).losses);
}

TEST_F(CpuVocabParallelCrossEntropy, StableWhenTheMaxIsInAnotherShard) {
  // The row [1000, 0, -1000, 5] split [1000, 0 | -1000, 5], target 1: the
  // second shard's exps use the global max 1000, and the loss is 1000.
  const std::vector<float> row = {1000.0f, 0.0f, -1000.0f, 5.0f};
  const std::vector<int32_t> target = {1};
  const LossResult sharded = sharded_cross_entropy(*ops, row, target, 4, 2, 1.0f);
  EXPECT_FLOAT_EQ(sharded.losses[0], 1000.0f);
  EXPECT_FLOAT_EQ(sharded.dlogits[0], 1.0f);
  EXPECT_FLOAT_EQ(sharded.dlogits[1], -1.0f);
  EXPECT_EQ(sharded.dlogits[2], 0.0f);
  EXPECT_EQ(sharded.dlogits[3], 0.0f);
  for (float value : sharded.dlogits) EXPECT_TRUE(std::isfinite(value));
}

TEST_F(CpuVocabParallelCrossEntropy, NegativeTargetThrows) {
  const std::vector<int32_t> target = {-1};
  float row_max = 0.0f, target_logit = 0.0f;
  EXPECT_THROW(ops->cross_entropy_shard_stats(&row_max, &target_logit, logits.data(), target.data(),
                                              1, kVocab, 0),
               std::out_of_range);
}

// The losses' sum folded into the loss ops (loss_sum, what the runtime's
// loss accumulator takes): bitwise accumulate_sum over the rows' losses,
// added to what the accumulator held, for the fused op and the last step of
// the vocab-parallel one, fp32 and bf16 storage; null adds nothing.
TEST_F(CpuVocabParallelCrossEntropy, LossSumIsAccumulateSumOfTheLosses) {
  for (const DType storage : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(storage == DType::kFloat32 ? "fp32" : "bf16");
    const std::unique_ptr<Ops> typed = make_cpu_ops(0, storage);
    std::vector<uint8_t> stored(typed->storage_bytes(logits.size()));
    typed->convert_from_float(stored.data(), logits.data(), logits.size());
    std::vector<float> losses(kRows);
    double folded = 1.25, expected = 1.25;  // sums add to what was there
    typed->softmax_cross_entropy(losses.data(), nullptr, stored.data(), targets.data(), kRows,
                                 kVocab, kLossScale, &folded);
    typed->accumulate_sum(&expected, losses.data(), kRows);
    EXPECT_EQ(folded, expected);
    EXPECT_NE(folded, 1.25);
    // The vocab-parallel step 3, over the whole vocabulary as one shard.
    std::vector<float> row_max(kRows), target_logit(kRows), exp_sum(kRows);
    typed->cross_entropy_shard_stats(row_max.data(), target_logit.data(), stored.data(),
                                     targets.data(), kRows, kVocab, 0);
    typed->cross_entropy_shard_exp_sums(exp_sum.data(), stored.data(), row_max.data(), kRows,
                                        kVocab);
    typed->cross_entropy_shard_finish(losses.data(), nullptr, stored.data(), targets.data(),
                                      row_max.data(), exp_sum.data(), target_logit.data(), kRows,
                                      kVocab, 0, kLossScale, &folded);
    typed->accumulate_sum(&expected, losses.data(), kRows);
    EXPECT_EQ(folded, expected);
    typed->softmax_cross_entropy(losses.data(), nullptr, stored.data(), targets.data(), kRows,
                                 kVocab, kLossScale, nullptr);
    EXPECT_EQ(folded, expected);
  }
}

}  // namespace
}  // namespace paraplan::kernels
