// collective_profiler_test.cc: the message sizes `paraplan profile` times.
#include "runtime/measure/collective_profiler.h"

#include <gtest/gtest.h>

namespace paraplan {
namespace {

constexpr double kKiB = 1024, kMiB = 1024 * 1024;

TEST(CollectiveMessageBytes, TheCpuStopsAtFourMegabytes) {
  EXPECT_EQ(collective_message_bytes(kernels::Backend::kCpu, uint64_t{160} << 20),
            (std::vector<double>{16 * kKiB, 32 * kKiB, 64 * kKiB, 128 * kKiB, 256 * kKiB,
                                 512 * kKiB, kMiB, 2 * kMiB, 4 * kMiB}));
}

// A GPU reaches the gradient bucket (Megatron's 40M elements: 160 MB in fp32),
// the size a step's data-parallel reduction sends at once.
TEST(CollectiveMessageBytes, ADeviceReachesTheGradientBucket) {
  const uint64_t bucket = uint64_t{40000000} * 4;
  EXPECT_EQ(collective_message_bytes(kernels::Backend::kCuda, bucket),
            (std::vector<double>{16 * kKiB, 32 * kKiB, 64 * kKiB, 128 * kKiB, 256 * kKiB,
                                 512 * kKiB, kMiB, 2 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB,
                                 static_cast<double>(bucket)}));
  // A bucket at a power of four is not measured twice.
  EXPECT_EQ(collective_message_bytes(kernels::Backend::kCuda, uint64_t{64} << 20).back(),
            64 * kMiB);
  EXPECT_EQ(collective_message_bytes(kernels::Backend::kCuda, uint64_t{64} << 20).size(), 11u);
  // A bucket below 4 MB still measures the small sizes.
  EXPECT_EQ(collective_message_bytes(kernels::Backend::kCuda, 1 << 20).size(), 9u);
}

}  // namespace
}  // namespace paraplan
