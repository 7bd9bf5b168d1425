// distributed_checkpoint_save_test.cc: when a background save's writer holds
// its share in memory, and when it writes in line instead. (The saves
// themselves run under mpirun: tests/parallel_training_test.cc.)
#include <gtest/gtest.h>

#include "runtime/checkpoint/distributed_checkpoint.h"

namespace paraplan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(BackgroundWrite, HoldsTheShareOnlyWhereTheNodesSharesFit) {
  // 70B on 64 GPUs, tp 8 x pp 8: 13 GB a writer, 8 writers a node.
  EXPECT_EQ(background_write_refusal(13 * kGiB, 8, 1024 * kGiB, 5), "");
  EXPECT_EQ(background_write_refusal(13 * kGiB, 8, 128 * kGiB, 5),
            "rank 5 writes its share of this checkpoint in line: 8 rank(s) on this node would "
            "hold 104 GiB for the background, more than 80% of the 128 GiB of memory available");
  EXPECT_EQ(background_write_refusal(13 * kGiB, 8, 131 * kGiB, 5), "") << "104 of 131: 79%";
  EXPECT_EQ(background_write_refusal(13 * kGiB, 0, 17 * kGiB, 0), "") << "a rank at least: 76%";
  EXPECT_NE(background_write_refusal(13 * kGiB, 0, 16 * kGiB, 0), "") << "13 of 16: 81%";
  EXPECT_EQ(background_write_refusal(13 * kGiB, 8, 0, 5), "") << "unknown: held";
}

}  // namespace
}  // namespace paraplan
