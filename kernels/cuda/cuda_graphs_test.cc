// cuda_graphs_test.cc: Ops::run_recorded on the CUDA backend with
// PARAPLAN_CUDA_GRAPHS=1 (cuda_graphs.cuh): a compute step of GEMMs,
// elementwise ops and weight gradients on the second stream, run five times
// under one key (plain, recorded, then replayed), leaves bitwise what five
// plain runs leave; a step that copies to the host inside breaks its
// recording and runs plainly from then on, with the same result; without
// the variable nothing is recorded. Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_support.h"
#include "kernels/ops.h"

namespace paraplan::kernels {
namespace {

using namespace cuda_test_support;

// A layer's forward and backward, accumulating into dweight: the same launches
// on the same buffers every run. host_read: also reads a value back inside
// (what no recorded step may do).
struct Step {
  void* inp;
  void* weight;
  void* out;
  void* dinp;
  void* dweight;
  int rows = 256, in = 128, out_features = 384;
  void operator()(Ops& ops, bool host_read) const {
    ops.linear_forward(out, inp, weight, nullptr, rows, in, out_features);
    ops.gelu_forward(out, out, static_cast<size_t>(rows) * out_features);
    ops.linear_weight_gradients(dweight, nullptr, out, inp, rows, in, out_features);
    ops.linear_backward(dinp, nullptr, nullptr, out, nullptr, weight, rows, in, out_features,
                        GradientWrite::kOverwrite);
    ops.join_weight_gradients();
    if (host_read) {
      unsigned char first[4];
      ops.copy_to_host(first, dinp, ops.storage_bytes(1));  // the call is the point
    }
  }
};

// Five runs of the step; calls: how often its launches ran (a replayed run
// does not call them).
Tensors run_steps(Ops& ops, bool recorded, bool host_read, int* calls = nullptr) {
  Buffers buffers(ops);
  Step step;
  step.inp = buffers.upload_storage(random_floats(size_t{256} * 128, 60));
  step.weight = buffers.upload_storage(random_floats(size_t{384} * 128, 61, 0.2f));
  step.out = buffers.allocate_storage(size_t{256} * 384);
  step.dinp = buffers.allocate_storage(size_t{256} * 128);
  step.dweight = buffers.upload_storage(std::vector<float>(size_t{384} * 128, 0.0f));
  for (int run = 0; run < 5; ++run) {
    if (recorded) {
      ops.run_recorded(7, [&] {
        if (calls != nullptr) ++*calls;
        step(ops, host_read);
      });
    } else {
      step(ops, host_read);
    }
  }
  ops.synchronize();
  return {buffers.download_storage(step.dweight, size_t{384} * 128),
          buffers.download_storage(step.dinp, size_t{256} * 128)};
}

class CudaGraphs : public StorageTest {};
INSTANTIATE_TEST_SUITE_P(Storage, CudaGraphs, kStorageDtypes, storage_test_name);

TEST_P(CudaGraphs, ReplayedStepsAreBitwiseThePlainOnes) {
  std::unique_ptr<Ops> graphs = make_cuda_switched("PARAPLAN_CUDA_GRAPHS", true, dtype());
  std::unique_ptr<Ops> plain = make_cuda_switched("PARAPLAN_CUDA_GRAPHS", false, dtype());
  EXPECT_TRUE(graphs->records_launches());
  EXPECT_FALSE(plain->records_launches());
  int calls = 0;
  expect_all_equal(run_steps(*graphs, true, false, &calls), run_steps(*plain, false, false),
                   "five steps, the last three from a graph");
  EXPECT_EQ(calls, 2);  // plain, captured; a broken capture would run all five
  // Forgotten (a new executor), the key is plain, then captured, again.
  graphs->forget_recorded();
  calls = 0;
  expect_all_equal(run_steps(*graphs, true, false, &calls), run_steps(*plain, false, false),
                   "five steps after forget_recorded");
  EXPECT_EQ(calls, 2);
}

TEST_P(CudaGraphs, AStepThatReadsTheHostRunsPlainly) {
  std::unique_ptr<Ops> graphs = make_cuda_switched("PARAPLAN_CUDA_GRAPHS", true, dtype());
  std::unique_ptr<Ops> plain = make_cuda_switched("PARAPLAN_CUDA_GRAPHS", false, dtype());
  int calls = 0;
  expect_all_equal(run_steps(*graphs, true, true, &calls), run_steps(*plain, false, true),
                   "five steps whose recording broke");
  // Plain; the broken capture and its plain rerun; three more plain runs.
  EXPECT_EQ(calls, 6);
}

}  // namespace
}  // namespace paraplan::kernels
