// sync_counting_ops_test.cc: SyncCountingOps counts the host synchronizations
// and the bytes zero_bytes() fills, and forwards every call.
#include "kernels/sync_counting_ops.h"

#include <gtest/gtest.h>

#include <vector>

namespace paraplan::kernels {
namespace {

TEST(SyncCountingOps, CountsBytesZeroedAndSynchronizations) {
  SyncCountingOps ops(make_cpu_ops(1));
  std::vector<float> x(10, 1.0f);
  ops.zero_bytes(x.data(), 3 * sizeof(float));
  ops.zero_bytes(x.data() + 5, 2 * sizeof(float));
  EXPECT_EQ(ops.bytes_zeroed(), 5 * sizeof(float));
  EXPECT_EQ(x, (std::vector<float>{0, 0, 0, 1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(ops.synchronizations(), 0u);  // zeroing is queued, not a wait
  ops.synchronize();
  std::vector<float> host(10);
  ops.copy_to_host(host.data(), x.data(), sizeof(float) * host.size());
  EXPECT_EQ(ops.synchronizations(), 2u);
  EXPECT_EQ(host, x);
  EXPECT_EQ(ops.bytes_zeroed(), 5 * sizeof(float));
}

}  // namespace
}  // namespace paraplan::kernels
