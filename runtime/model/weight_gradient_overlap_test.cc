// weight_gradient_overlap_test.cc: the stages queue their linear layers'
// weight gradients beside the backward (kernels/ops.h
// linear_weight_gradients) and join them wherever an op is about to write
// what they read or read what they write. Held as late as that contract
// allows (testing/delayed_weight_gradient_ops.h), a step is bitwise the one
// that runs them at once: the gradients, every input gradient sent on, and
// the gradients as the data-parallel reduction would read them when told
// they are final. Under mpirun with 2 ranks: tensor parallelism 1 and 2,
// with and without sequence parallelism (whose gathers reuse one buffer),
// GPT-2 and Llama, every recompute mode (recomputation rewrites the shared
// scratch), a whole-model stage with a tied head (whose weight gradient is
// the embedding's) and a middle stage.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/model/backward_step_test_support.h"

namespace paraplan {
namespace {

using testing::BackwardMode;
using testing::StepResult;

class WeightGradientOverlap : public ::testing::TestWithParam<Architecture> {};

TEST_P(WeightGradientOverlap, HeldAsLateAsAllowedIsBitwiseBackward) {
  const TransformerConfig config = testing::small_decoder_config(GetParam());
  const std::vector<StageSpec> specs = {{0, config.num_layers, true, true}, {1, 2, false, false}};
  const std::vector<std::vector<RecomputeMode>> recomputes = {
      {RecomputeMode::None, RecomputeMode::None, RecomputeMode::None},
      {RecomputeMode::Selective, RecomputeMode::Full, RecomputeMode::None},
      {RecomputeMode::Full, RecomputeMode::Full, RecomputeMode::Full}};
  for (int tensor_size : {1, 2}) {
    MPI_Comm comm;
    ASSERT_EQ(
        MPI_Comm_split(MPI_COMM_WORLD, tensor_size == 2 ? 0 : testing::world_rank(), 0, &comm),
        MPI_SUCCESS);
    MpiCommunicator group(comm, "tensor");
    for (bool sequence_parallel : {false, true}) {
      if (sequence_parallel && tensor_size == 1) continue;
      for (const StageSpec& spec : specs) {
        for (const std::vector<RecomputeMode>& recompute : recomputes) {
          std::vector<RecomputeMode> modes(recompute.begin(), recompute.begin() + spec.num_layers);
          const StepResult now = testing::run_step(config, spec, modes, &group,
                                                   BackwardMode::kWhole, sequence_parallel);
          const StepResult late =
              testing::run_step(config, spec, modes, &group, BackwardMode::kDelayedWeightGradients,
                                sequence_parallel);
          const std::string where = "tensor " + std::to_string(tensor_size) +
                                    (sequence_parallel ? " sequence-parallel" : "") +
                                    " layers from " + std::to_string(spec.first_layer) +
                                    " recompute " + std::to_string(static_cast<int>(modes[0]));
          // Every linear layer's weight gradients went beside the backward:
          // 4 per block and the head, per micro-batch.
          const int per_backward = 4 * spec.num_layers + (spec.has_head ? 1 : 0);
          EXPECT_EQ(late.weight_gradients_queued, testing::kMicroBatches * per_backward) << where;
          EXPECT_TRUE(testing::bitwise_equal(now.gradients, late.gradients)) << where;
          ASSERT_EQ(now.input_gradients.size(), late.input_gradients.size()) << where;
          for (size_t mb = 0; mb < now.input_gradients.size(); ++mb)
            EXPECT_TRUE(testing::bitwise_equal(now.input_gradients[mb], late.input_gradients[mb]))
                << where << " micro-batch " << mb;
          EXPECT_EQ(now.final_from, late.final_from) << where;
          ASSERT_EQ(now.gradients_when_final.size(), late.gradients_when_final.size()) << where;
          for (size_t i = 0; i < now.gradients_when_final.size(); ++i)
            EXPECT_TRUE(
                testing::bitwise_equal(now.gradients_when_final[i], late.gradients_when_final[i]))
                << where << " when offset " << now.final_from[i] << " was final";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, WeightGradientOverlap,
                         ::testing::Values(Architecture::kGpt2, Architecture::kLlama),
                         [](const ::testing::TestParamInfo<Architecture>& info) {
                           return std::string(architecture_name(info.param));
                         });

}  // namespace
}  // namespace paraplan
