// tensor_parallel_test.cc: the sequence-parallel mappings of tensor_parallel.h
// forward and backward against values worked out by hand, over the world as
// the tensor group (ctest: 2 and 4 ranks), in fp32 and bf16 storage. Every
// value is a small integer, exact in both dtypes, so the sums are exact and
// the expectations are equalities. Collective calls come before the checks,
// so a failed expectation on one rank cannot leave the others waiting.
#include "runtime/model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

using testing::world_rank;
using testing::world_size;

// Rows of a shard and the width of a row: a shard is kRows x kWidth elements.
constexpr size_t kRows = 3, kWidth = 2, kShard = kRows * kWidth;

// The value rank r holds at element i of its shard (forward) or of its full
// buffer (a partial sum, backward): distinct per rank and element.
float shard_value(int rank, size_t i) {
  return static_cast<float>(10 * rank + static_cast<int>(i));
}
float partial_value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * (static_cast<int>(i) + 1));
}

class SequenceParallelMappings : public ::testing::TestWithParam<kernels::DType> {
 protected:
  void SetUp() override {
    if (world_size() < 2) GTEST_SKIP() << "needs a group of 2 or more";
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    group_ = std::make_unique<MpiCommunicator>(comm, "tensor");
    ops_ = kernels::make_cpu_ops(1, GetParam());
    memory_ = std::make_unique<MemoryTracker>(*ops_);
    tensor_parallel_ = std::make_unique<TensorParallel>(group_.get(), *ops_, *memory_, 0,
                                                        /*sequence_parallel=*/true);
  }

  // Host fp32 values <-> storage of the dtype under test.
  std::vector<char> storage(const std::vector<float>& values) const {
    std::vector<char> bytes(ops_->storage_bytes(values.size()));
    kernels::host_from_float(bytes.data(), values.data(), GetParam(), values.size());
    return bytes;
  }
  std::vector<float> values(const std::vector<char>& bytes, size_t count) const {
    std::vector<float> out(count);
    kernels::host_to_float(out.data(), bytes.data(), GetParam(), count);
    return out;
  }

  std::unique_ptr<MpiCommunicator> group_;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<MemoryTracker> memory_;
  std::unique_ptr<TensorParallel> tensor_parallel_;
};

// Forward: every rank's shard, in rank order. Backward: this rank's shard of
// the sum of everyone's partial gradients.
TEST_P(SequenceParallelMappings, GatherFromSequenceParallelRegion) {
  const int t = world_size(), rank = world_rank();
  ASSERT_TRUE(tensor_parallel_->sequence_parallel());
  std::vector<float> shard(kShard), partial(t * kShard);
  for (size_t i = 0; i < kShard; ++i) shard[i] = shard_value(rank, i);
  for (size_t i = 0; i < partial.size(); ++i) partial[i] = partial_value(rank, i);
  const std::vector<char> shard_bytes = storage(shard), partial_bytes = storage(partial);
  std::vector<char> full(ops_->storage_bytes(t * kShard)), gradient(ops_->storage_bytes(kShard));
  tensor_parallel_->gather_from_sequence_parallel_region(shard_bytes.data(), full.data(), kShard);
  tensor_parallel_->gather_from_sequence_parallel_region_backward(partial_bytes.data(),
                                                                  gradient.data(), kShard);
  const std::vector<float> gathered = values(full, t * kShard);
  for (int r = 0; r < t; ++r)
    for (size_t i = 0; i < kShard; ++i)
      EXPECT_EQ(gathered[r * kShard + i], shard_value(r, i)) << "rank " << r << " element " << i;
  // sum over q of (q + 1) (j + 1) at j = rank * kShard + i: (j + 1) t (t + 1) / 2.
  const std::vector<float> summed = values(gradient, kShard);
  for (size_t i = 0; i < kShard; ++i)
    EXPECT_EQ(summed[i], static_cast<float>((rank * kShard + i + 1) * t * (t + 1) / 2)) << i;
}

// Forward: this rank's shard of the sum of the partial outputs. Backward:
// every rank's shard of the output gradient, in rank order.
TEST_P(SequenceParallelMappings, ReduceScatterToSequenceParallelRegion) {
  const int t = world_size(), rank = world_rank();
  std::vector<float> partial(t * kShard), shard_gradient(kShard);
  for (size_t i = 0; i < partial.size(); ++i) partial[i] = partial_value(rank, i);
  for (size_t i = 0; i < kShard; ++i) shard_gradient[i] = -shard_value(rank, i);
  const std::vector<char> partial_bytes = storage(partial),
                          shard_gradient_bytes = storage(shard_gradient);
  std::vector<char> shard(ops_->storage_bytes(kShard)), full(ops_->storage_bytes(t * kShard));
  tensor_parallel_->reduce_scatter_to_sequence_parallel_region(partial_bytes.data(), shard.data(),
                                                               kShard);
  tensor_parallel_->reduce_scatter_to_sequence_parallel_region_backward(shard_gradient_bytes.data(),
                                                                        full.data(), kShard);
  const std::vector<float> summed = values(shard, kShard);
  for (size_t i = 0; i < kShard; ++i)
    EXPECT_EQ(summed[i], static_cast<float>((rank * kShard + i + 1) * t * (t + 1) / 2)) << i;
  const std::vector<float> gathered = values(full, t * kShard);
  for (int r = 0; r < t; ++r)
    for (size_t i = 0; i < kShard; ++i)
      EXPECT_EQ(gathered[r * kShard + i], -shard_value(r, i)) << "rank " << r << " element " << i;
}

// A norm's weight gradient, each rank's over its tokens, summed over the group.
TEST_P(SequenceParallelMappings, SequenceParallelGradientsAreSummedOverTheGroup) {
  const int t = world_size(), rank = world_rank();
  std::vector<float> gradients(kWidth);
  for (size_t i = 0; i < kWidth; ++i) gradients[i] = partial_value(rank, i);
  std::vector<char> bytes = storage(gradients);
  tensor_parallel_->all_reduce_sequence_parallel_gradients(bytes.data(), kWidth);
  const std::vector<float> summed = values(bytes, kWidth);
  for (size_t i = 0; i < kWidth; ++i)
    EXPECT_EQ(summed[i], static_cast<float>((i + 1) * t * (t + 1) / 2)) << i;
}

// Without sequence parallelism the mappings are a programming error, named.
TEST_P(SequenceParallelMappings, RefusedWithoutSequenceParallelism) {
  TensorParallel plain(group_.get(), *ops_, *memory_, 0, /*sequence_parallel=*/false);
  EXPECT_FALSE(plain.sequence_parallel());
  std::vector<char> buffer(ops_->storage_bytes(world_size() * kShard));
  try {
    plain.gather_from_sequence_parallel_region(buffer.data(), buffer.data(), kShard);
    ADD_FAILURE() << "expected std::logic_error";
  } catch (const std::logic_error& error) {
    EXPECT_STREQ(error.what(),
                 "tensor parallel: gather_from_sequence_parallel_region without sequence "
                 "parallelism over a group of more than one");
  }
  // A group of one never shards, whatever the plan asks.
  EXPECT_FALSE(TensorParallel(nullptr, *ops_, *memory_, 0, true).sequence_parallel());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SequenceParallelMappings,
                         ::testing::Values(kernels::DType::kFloat32, kernels::DType::kBFloat16),
                         [](const ::testing::TestParamInfo<kernels::DType>& info) {
                           return info.param == kernels::DType::kFloat32 ? "fp32" : "bf16";
                         });

}  // namespace
}  // namespace paraplan
