// sequence_parallel_calls_test.cc: a block's backward under sequence
// parallelism makes the tensor group's collectives the planner charges
// (planner/cost/stage_cost.cc): per branch (attention, MLP) one gather of the
// residual gradient, one gather of the norm's output for the column-parallel
// weight gradient, one reduce-scatter of the norm's input gradient and one
// all-reduce of the norm's weight gradients; the forward per branch one
// gather and one reduce-scatter. Under mpirun with 2 ranks (the tensor
// group), GPT-2 and Llama, a middle stage of 2 blocks without recomputation.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/forwarding_communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/model/architecture.h"
#include "runtime/model/backward_step_test_support.h"
#include "runtime/model/model_stage.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

// Counts each operation's calls.
class CountingCommunicator final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  std::map<std::string, int> calls;

 protected:
  void intercept(const CommunicatorCall& call, ForwardedCall forward) override {
    ++calls[call.operation];
    forward();
  }
};

class SequenceParallelCalls : public ::testing::TestWithParam<Architecture> {};

TEST_P(SequenceParallelCalls, BlocksMakeThePlannersCollectives) {
  if (testing::world_size() != 2) GTEST_SKIP() << "needs exactly 2 ranks";
  TransformerConfig config = testing::small_decoder_config(GetParam());
  config.tied_embeddings = false;
  const StageSpec middle{1, 2, false, false};
  MPI_Comm comm;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  CountingCommunicator group(std::make_unique<MpiCommunicator>(comm, "tensor"));
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  MemoryTracker memory(*ops);
  std::unique_ptr<ParameterLayout> layout =
      make_parameter_layout(config, middle, group.rank(), group.size());
  std::unique_ptr<ModelStage> stage =
      make_model_stage(*layout, *ops, memory,
                       ModelStageOptions{.micro_batch_size = 2,
                                         .num_slots = 1,
                                         .recompute = std::vector<RecomputeMode>(middle.num_layers),
                                         .tensor_group = &group,
                                         .sequence_parallel = true});
  std::vector<float> initial(layout->num_elements());
  layout->initialize(initial.data(), 7);
  stage->load_parameters(initial.data(), initial.size());
  const size_t activation = stage->activation_elements();
  const std::vector<float> input = testing::random_values<float>(1, activation, 1);
  ops->copy_from_host(stage->input(0), input.data(), activation * sizeof(float));

  stage->forward(0, 1.0f);
  const std::map<std::string, int> forward = group.calls;
  group.calls.clear();
  const std::vector<float> gradient = testing::random_values<float>(2, activation, 2);
  ops->copy_from_host(stage->output_gradient(0), gradient.data(), activation * sizeof(float));
  stage->backward(0);
  const std::map<std::string, int> backward = group.calls;

  const int blocks = middle.num_layers, branches = 2 * blocks;
  EXPECT_EQ(forward,
            (std::map<std::string, int>{{"all_gather", branches}, {"reduce_scatter", branches}}));
  EXPECT_EQ(backward, (std::map<std::string, int>{{"all_gather", 2 * branches},
                                                  {"all_reduce", branches},
                                                  {"reduce_scatter", branches}}));
}

INSTANTIATE_TEST_SUITE_P(Architectures, SequenceParallelCalls,
                         ::testing::Values(Architecture::kGpt2, Architecture::kLlama),
                         [](const ::testing::TestParamInfo<Architecture>& info) {
                           return std::string(architecture_name(info.param));
                         });

}  // namespace
}  // namespace paraplan
