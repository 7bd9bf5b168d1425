// profiler_test.cc: what the profiler derives from the model by hand (its
// measurements are exercised end to end by tests/replay_test.cc).
#include "runtime/measure/profiler.h"

#include <gtest/gtest.h>

namespace paraplan {
namespace {

TEST(BytesBetweenCollectives, HalfABlocksWeightsAndActivations) {
  // The tiny job (d 128, ffn 512, s 128), micro-batch 8, tp 2: MLP weights
  // 2 x 128 x 256 and activations 1024 tokens x (128 + 256), fp32.
  const TransformerConfig model;
  const std::unique_ptr<kernels::Ops> fp32 = kernels::make_cpu_ops(1);
  EXPECT_EQ(bytes_between_collectives(*fp32, model, 8, 2), 4u * (65536 + 1024 * 384));
  // A wider group holds a smaller shard; bf16 storage halves the bytes.
  EXPECT_EQ(bytes_between_collectives(*fp32, model, 8, 4), 4u * (32768 + 1024 * 256));
  const std::unique_ptr<kernels::Ops> bf16 = kernels::make_cpu_ops(1, kernels::DType::kBFloat16);
  EXPECT_EQ(bytes_between_collectives(*bf16, model, 8, 2), 2u * (65536 + 1024 * 384));
}

}  // namespace
}  // namespace paraplan
