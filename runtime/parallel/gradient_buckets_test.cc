// gradient_buckets_test.cc: the bucket plan, and ZeRO-1 shards that start on
// 16-byte boundaries whatever the group size (a group of 3 once put them off).
#include "runtime/parallel/gradient_buckets.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "runtime/parallel/distributed_optimizer.h"

namespace paraplan {
namespace {

TEST(GradientBuckets, ZeroShardsStartOnSixteenByteBoundaries) {
  for (int z : {2, 3, 5, 8}) {
    // A parameter count that is a multiple of none of them, padded as the stage pads it.
    const size_t padded = DistributedOptimizer::buffer_elements(124'439'808 + 7, 1, z);
    EXPECT_EQ(padded % (8 * static_cast<size_t>(z)), 0u) << "z " << z;
    EXPECT_LT(padded - (124'439'808 + 7), 8u * z) << "z " << z;
    size_t shard = 0;
    for (const GradientBucket& bucket : plan_gradient_buckets(padded, 10'000'000, z)) {
      EXPECT_EQ(bucket.chunk * z, bucket.end - bucket.begin);
      for (int rank = 0; rank < z; ++rank)
        EXPECT_EQ((bucket.begin + rank * bucket.chunk) % kShardAlignmentElements, 0u)
            << "z " << z << ", bucket at " << bucket.begin << ", rank " << rank;
      EXPECT_EQ(bucket.shard_offset, shard);
      EXPECT_EQ(bucket.shard_offset % kShardAlignmentElements, 0u);
      shard += bucket.chunk;
    }
    EXPECT_EQ(shard * z, padded);
  }
}

TEST(GradientBuckets, WithoutZeroNothingIsPaddedOrRounded) {
  EXPECT_EQ(DistributedOptimizer::buffer_elements(1001, 0, 4), 1001u);
  EXPECT_EQ(DistributedOptimizer::buffer_elements(1001, 1, 1), 1001u);
  const auto buckets = plan_gradient_buckets(1001, 300, 1);
  ASSERT_EQ(buckets.size(), 4u);
  EXPECT_EQ(buckets[0].begin, 0u);
  EXPECT_EQ(buckets[0].end, 101u);  // the short remainder first, then 300 each
  EXPECT_EQ(buckets[3].end, 1001u);
}

TEST(GradientBuckets, AnUnpaddedBufferIsRefusedNamingTheUnit) {
  try {
    plan_gradient_buckets(1000, 0, 3);  // not a multiple of 24
    FAIL() << "no error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("not a multiple of 24 (the ZeRO group size 3 x 8)"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace paraplan
