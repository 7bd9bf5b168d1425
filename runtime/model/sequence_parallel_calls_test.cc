// sequence_parallel_calls_test.cc: a block's backward under sequence
// parallelism makes the tensor group's collectives the planner charges
// (planner/cost/stage_cost.cc): per branch (attention, MLP) one gather of the
// residual gradient, one gather of the norm's output for the column-parallel
// weight gradient, one reduce-scatter of the norm's input gradient and one
// all-reduce of the norm's weight gradients; the forward per branch one
// gather and one reduce-scatter; and the embedding's and the head's. Under
// mpirun with 2 ranks (the tensor group), GPT-2 and Llama, a middle stage
// of 2 blocks and a whole model of 3, without recomputation.
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

struct StageCalls {
  std::map<std::string, int> forward, backward;
};

// One forward and one backward of a stage over the world's 2 ranks as the
// tensor group, with sequence parallelism: the group's calls in each.
StageCalls calls_of(Architecture architecture, const StageSpec& spec) {
  TransformerConfig config = testing::small_decoder_config(architecture);
  config.tied_embeddings = false;
  MPI_Comm comm;
  EXPECT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &comm), MPI_SUCCESS);
  CountingCommunicator group(std::make_unique<MpiCommunicator>(comm, "tensor"));
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  MemoryTracker memory(*ops);
  std::unique_ptr<ParameterLayout> layout =
      make_parameter_layout(config, spec, group.rank(), group.size());
  std::unique_ptr<ModelStage> stage =
      make_model_stage(*layout, *ops, memory,
                       ModelStageOptions{.micro_batch_size = 2,
                                         .num_slots = 1,
                                         .recompute = std::vector<RecomputeMode>(spec.num_layers),
                                         .tensor_group = &group,
                                         .sequence_parallel = true});
  std::vector<float> initial(layout->num_elements());
  layout->initialize(initial.data(), 7);
  stage->load_parameters(initial.data(), initial.size());
  const size_t activation = stage->activation_elements();
  const int rows = 2 * config.seq_len;
  for (int i = 0; i < rows; ++i) {
    stage->tokens(0)[i] = (i * 5 + 1) % config.vocab_size;
    stage->targets(0)[i] = (i * 7 + 2) % config.vocab_size;
  }
  if (!spec.has_embedding) {
    const std::vector<float> input = testing::random_values<float>(1, activation, 1);
    ops->copy_from_host(stage->input(0), input.data(), activation * sizeof(float));
  }
  StageCalls calls;
  stage->forward(0, 1.0f);
  calls.forward = group.calls;
  group.calls.clear();
  if (!spec.has_head) {
    const std::vector<float> gradient = testing::random_values<float>(2, activation, 2);
    ops->copy_from_host(stage->output_gradient(0), gradient.data(), activation * sizeof(float));
  }
  stage->backward(0);
  calls.backward = group.calls;
  return calls;
}

class SequenceParallelCalls : public ::testing::TestWithParam<Architecture> {
 protected:
  void SetUp() override {
    if (testing::world_size() != 2) GTEST_SKIP() << "needs exactly 2 ranks";
  }
};

TEST_P(SequenceParallelCalls, BlocksMakeThePlannersCollectives) {
  const StageSpec middle{1, 2, false, false};
  const StageCalls calls = calls_of(GetParam(), middle);
  const int branches = 2 * middle.num_layers;
  EXPECT_EQ(calls.forward,
            (std::map<std::string, int>{{"all_gather", branches}, {"reduce_scatter", branches}}));
  EXPECT_EQ(calls.backward, (std::map<std::string, int>{{"all_gather", 2 * branches},
                                                        {"all_reduce", branches},
                                                        {"reduce_scatter", branches}}));
}

// The ends as stage_cost.cc charges them: the embedding's sum
// reduce-scatters (its backward gathers); the head gathers the final
// norm's shards, sums the loss twice, and in backward gathers them again,
// reduce-scatters the norm's input gradient and sums its weights.
TEST_P(SequenceParallelCalls, TheEndsMakeThePlannersCollectives) {
  const StageSpec whole{0, 3, true, true};
  const StageCalls calls = calls_of(GetParam(), whole);
  const int branches = 2 * whole.num_layers;
  EXPECT_EQ(calls.forward, (std::map<std::string, int>{{"all_gather", branches + 1},
                                                       {"all_reduce", 2},
                                                       {"reduce_scatter", branches + 1}}));
  EXPECT_EQ(calls.backward, (std::map<std::string, int>{{"all_gather", 2 * branches + 2},
                                                        {"all_reduce", branches + 1},
                                                        {"reduce_scatter", branches + 1}}));
}

INSTANTIATE_TEST_SUITE_P(Architectures, SequenceParallelCalls,
                         ::testing::Values(Architecture::kGpt2, Architecture::kLlama),
                         [](const ::testing::TestParamInfo<Architecture>& info) {
                           return std::string(architecture_name(info.param));
                         });

}  // namespace
}  // namespace paraplan
