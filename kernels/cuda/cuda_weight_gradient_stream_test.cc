// cuda_weight_gradient_stream_test.cc: Ops::linear_weight_gradients on the
// CUDA backend's second stream (cuda_gemm_lane.cuh) against the same
// gradients computed in line (PARAPLAN_CUDA_OVERLAP=0) and against
// linear_backward with no input gradient: bitwise, with and without a bias
// (the BGRADB epilogue), at an odd 13-column shape with an unaligned bias
// (cuBLASLt's epilogue or the column-sum kernel: the epilogue writes aligned
// scratch, so which one runs is cuBLASLt's choice, the same on both lanes),
// accumulated over two micro-batches. And the ordering
// the contract promises: the side stream reads what the ops' stream wrote
// before the call; after join_weight_gradients the ops' stream may rewrite
// the operands and reads the finished gradients; synchronize and
// copy_to_host see them done. The second stream's workspace is counted in
// internal_bytes. Skips, visibly, without a GPU. And the streams have
// hardware queues of their own (CUDA_DEVICE_MAX_CONNECTIONS, set before main).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

struct WeightCase {
  int rows, in_features, out_features;
  bool bias;
  bool unaligned_bias;  // dbias off its allocation's alignment
};

const WeightCase kCases[] = {
    {64, 32, 96, true, false},
    {37, 24, 40, false, false},
    {1024, 256, 768, true, false},  // several waves of tiles
    {50, 16, 13, true, true},
};

std::string name_of(const WeightCase& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.in_features) + "->" +
         std::to_string(c.out_features) + (c.bias ? " bias" : "") +
         (c.unaligned_bias ? " unaligned" : "");
}

enum class Path { kSecondStream, kLinearBackward };

// dweight and dbias after two micro-batches' weight gradients added to
// random starting values.
Tensors weight_gradients_run(Ops& ops, const WeightCase& c, Path path) {
  Buffers buffers(ops);
  const size_t rows = c.rows, in = c.in_features, out = c.out_features;
  void* dweight = buffers.upload_storage(random_floats(out * in, 40, 0.1f));
  void* dbias =
      c.bias ? buffers.upload_storage(random_floats(out, 41, 0.1f), c.unaligned_bias) : nullptr;
  for (uint32_t micro_batch = 0; micro_batch < 2; ++micro_batch) {
    const void* dout = buffers.upload_storage(random_floats(rows * out, 42 + micro_batch));
    const void* inp = buffers.upload_storage(random_floats(rows * in, 44 + micro_batch));
    if (path == Path::kSecondStream) {
      ops.linear_weight_gradients(dweight, dbias, dout, inp, c.rows, c.in_features, c.out_features);
    } else {
      ops.linear_backward(nullptr, dweight, dbias, dout, inp, nullptr, c.rows, c.in_features,
                          c.out_features, GradientWrite::kAccumulate);
    }
  }
  ops.join_weight_gradients();
  Tensors result{buffers.download_storage(dweight, out * in)};
  if (c.bias) result.push_back(buffers.download_storage(dbias, out));
  return result;
}

class CudaWeightGradientStream : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaWeightGradientStream, kStorageDtypes, storage_test_name);

TEST_P(CudaWeightGradientStream, IsBitwiseTheGradientsComputedInLine) {
  std::unique_ptr<Ops> overlapped = make_cuda_switched("PARAPLAN_CUDA_OVERLAP", true, dtype());
  std::unique_ptr<Ops> in_line = make_cuda_switched("PARAPLAN_CUDA_OVERLAP", false, dtype());
  for (const WeightCase& c : kCases) {
    const Tensors side = weight_gradients_run(*overlapped, c, Path::kSecondStream);
    expect_all_equal(side, weight_gradients_run(*in_line, c, Path::kSecondStream),
                     name_of(c) + " second stream vs PARAPLAN_CUDA_OVERLAP=0");
    expect_all_equal(side, weight_gradients_run(*overlapped, c, Path::kLinearBackward),
                     name_of(c) + " second stream vs linear_backward");
  }
}

TEST_P(CudaWeightGradientStream, OrdersAgainstTheOpsStream) {
  std::unique_ptr<Ops> ops = make_cuda_switched("PARAPLAN_CUDA_OVERLAP", true, dtype());
  std::unique_ptr<Ops> reference = make_cuda_switched("PARAPLAN_CUDA_OVERLAP", false, dtype());
  // A few waves of tiles: long enough that a missing wait would likely show,
  // short under compute-sanitizer (the sanitizer phase runs this file).
  const int rows = 1024, in = 512, out = 1024;
  const std::vector<float> dout_host = random_floats(size_t{rows} * out, 50);
  const std::vector<float> inp_host = random_floats(size_t{rows} * in, 51);
  const std::vector<float> start = random_floats(size_t{out} * in, 52, 0.1f);

  // What the contract promises, in line: dout doubled before the call.
  std::vector<float> expected_weight;
  {
    Buffers buffers(*reference);
    void* dout = buffers.upload_storage(dout_host);
    void* dweight = buffers.upload_storage(start);
    reference->scale(dout, 2.0f, dout_host.size());
    reference->linear_weight_gradients(dweight, nullptr, dout, buffers.upload_storage(inp_host),
                                       rows, in, out);
    expected_weight = buffers.download_storage(dweight, start.size());
  }

  Buffers buffers(*ops);
  void* dout = buffers.upload_storage(dout_host);
  void* inp = buffers.upload_storage(inp_host);
  void* dweight = buffers.upload_storage(start);
  void* copied = buffers.allocate_storage(start.size());
  // Queued on the ops' stream just before: the side stream must see it.
  ops->scale(dout, 2.0f, dout_host.size());
  ops->linear_weight_gradients(dweight, nullptr, dout, inp, rows, in, out);
  ops->join_weight_gradients();
  // After the join: rewriting the operands cannot reach the gradients, and
  // an op reading the gradients sees them finished.
  ops->zero_bytes(dout, ops->storage_bytes(dout_host.size()));
  ops->zero_bytes(inp, ops->storage_bytes(inp_host.size()));
  ops->copy(copied, dweight, ops->storage_bytes(start.size()));
  expect_equal(buffers.download_storage(copied, start.size()), expected_weight,
               "read on the ops' stream after the join");
  expect_equal(buffers.download_storage(dweight, start.size()), expected_weight,
               "the gradients themselves");

  // Without a join, synchronize (and copy_to_host) wait for them too.
  void* again = buffers.upload_storage(start);
  void* dout_again = buffers.upload_storage(dout_host);
  ops->scale(dout_again, 2.0f, dout_host.size());
  ops->linear_weight_gradients(again, nullptr, dout_again, buffers.upload_storage(inp_host), rows,
                               in, out);
  ops->synchronize();
  expect_equal(buffers.download_storage(again, start.size()), expected_weight, "after synchronize");
}

TEST_P(CudaWeightGradientStream, ItsWorkspaceIsCounted) {
  std::unique_ptr<Ops> overlapped = make_cuda_switched("PARAPLAN_CUDA_OVERLAP", true, dtype());
  std::unique_ptr<Ops> in_line = make_cuda_switched("PARAPLAN_CUDA_OVERLAP", false, dtype());
  // cuBLASLt's 32 MiB workspace, once more.
  EXPECT_GE(overlapped->internal_bytes(), in_line->internal_bytes() + (size_t{32} << 20));
}

// cuda_device.cu sets CUDA_DEVICE_MAX_CONNECTIONS to 32 before main where
// the environment has none: this binary run again without it finds it set
// before any CUDA call (no GPU needed); run with a user's 4, finds 4.
TEST(CudaStreams, EachStreamHasAHardwareQueueOfItsOwn) {
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (const char* expected = std::getenv("PARAPLAN_TEST_CONNECTIONS_EXPECTED")) {
    ASSERT_NE(connections, nullptr);
    EXPECT_EQ(std::string(connections), expected);
    // (launch forwards the user's value, not the default.)
    EXPECT_EQ(cuda_connections_defaulted(), std::string(expected) == "32");
    return;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const auto child = [&self](const std::string& environment) {
    return std::system(("env " + environment + " '" + self +
                        "' --gtest_filter=CudaStreams.EachStreamHasAHardwareQueueOfItsOwn "
                        ">/dev/null 2>&1")
                           .c_str());
  };
  EXPECT_EQ(child("-u CUDA_DEVICE_MAX_CONNECTIONS PARAPLAN_TEST_CONNECTIONS_EXPECTED=32"), 0)
      << "a run without CUDA_DEVICE_MAX_CONNECTIONS did not find it set to 32";
  EXPECT_EQ(child("CUDA_DEVICE_MAX_CONNECTIONS=4 PARAPLAN_TEST_CONNECTIONS_EXPECTED=4"), 0)
      << "a run with CUDA_DEVICE_MAX_CONNECTIONS=4 did not keep it";
}

}  // namespace
}  // namespace paraplan::kernels
