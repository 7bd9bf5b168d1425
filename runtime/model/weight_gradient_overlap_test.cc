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
  testing::for_each_backward_case(config, true, [&](const testing::BackwardCase& c) {
    const StepResult now = testing::run_step(config, c.spec, c.recompute, c.tensor_group,
                                             BackwardMode::kWhole, c.sequence_parallel);
    const StepResult late =
        testing::run_step(config, c.spec, c.recompute, c.tensor_group,
                          BackwardMode::kDelayedWeightGradients, c.sequence_parallel);
    // Every linear layer's weight gradients went beside the backward: 4 per
    // block and the head, per micro-batch.
    const int per_backward = 4 * c.spec.num_layers + (c.spec.has_head ? 1 : 0);
    EXPECT_EQ(late.weight_gradients_queued, testing::kMicroBatches * per_backward) << c.where;
    EXPECT_TRUE(testing::bitwise_equal(now.gradients, late.gradients)) << c.where;
    ASSERT_EQ(now.input_gradients.size(), late.input_gradients.size()) << c.where;
    for (size_t mb = 0; mb < now.input_gradients.size(); ++mb)
      EXPECT_TRUE(testing::bitwise_equal(now.input_gradients[mb], late.input_gradients[mb]))
          << c.where << " micro-batch " << mb;
    EXPECT_EQ(now.final_from, late.final_from) << c.where;
    ASSERT_EQ(now.gradients_when_final.size(), late.gradients_when_final.size()) << c.where;
    for (size_t i = 0; i < now.gradients_when_final.size(); ++i)
      EXPECT_TRUE(testing::bitwise_equal(now.gradients_when_final[i], late.gradients_when_final[i]))
          << c.where << " when offset " << now.final_from[i] << " was final";
  });
}

INSTANTIATE_TEST_SUITE_P(Architectures, WeightGradientOverlap,
                         ::testing::Values(Architecture::kGpt2, Architecture::kLlama),
                         [](const ::testing::TestParamInfo<Architecture>& info) {
                           return std::string(architecture_name(info.param));
                         });

}  // namespace
}  // namespace paraplan
