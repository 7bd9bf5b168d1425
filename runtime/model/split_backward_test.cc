// split_backward_test.cc: ModelStage::backward_input then backward_weight is
// bitwise ModelStage::backward, under mpirun with 2 ranks (tensor
// parallelism 1: each rank alone; 2: both ranks one tensor group), for GPT-2
// and Llama, every recompute mode, a whole-model stage (embedding, tied or
// untied head) and a middle stage, with three micro-batches in flight whose
// weight gradients are deferred past later input gradients (as ZB-H1 runs
// them): the same parameter gradients, the same input gradients after each
// backward, and gradients_final_from told the same offsets.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/model/architecture.h"
#include "runtime/model/backward_step_test_support.h"
#include "runtime/model/model_stage.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

class SplitBackward : public ::testing::TestWithParam<Architecture> {};

TEST_P(SplitBackward, InputThenWeightIsBitwiseBackward) {
  const TransformerConfig config = testing::small_decoder_config(GetParam());
  testing::for_each_backward_case(config, false, [&](const testing::BackwardCase& c) {
    const testing::StepResult whole = testing::run_step(config, c.spec, c.recompute, c.tensor_group,
                                                        testing::BackwardMode::kWhole);
    const testing::StepResult split = testing::run_step(config, c.spec, c.recompute, c.tensor_group,
                                                        testing::BackwardMode::kSplit);
    EXPECT_TRUE(testing::bitwise_equal(whole.gradients, split.gradients)) << c.where;
    ASSERT_EQ(whole.input_gradients.size(), split.input_gradients.size()) << c.where;
    for (size_t mb = 0; mb < whole.input_gradients.size(); ++mb)
      EXPECT_TRUE(testing::bitwise_equal(whole.input_gradients[mb], split.input_gradients[mb]))
          << c.where << " micro-batch " << mb;
    EXPECT_EQ(whole.final_from, split.final_from) << c.where;
    EXPECT_FALSE(whole.final_from.empty());
    // Something was computed: the gradients are not all zero.
    double norm = 0;
    for (float g : whole.gradients) norm += double{g} * g;
    EXPECT_GT(norm, 0.0) << c.where;
  });
}

TEST_P(SplitBackward, RefusesAWeightGradientWithoutItsInputGradient) {
  const TransformerConfig config = testing::small_decoder_config(GetParam());
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  MemoryTracker memory(*ops);
  std::unique_ptr<ParameterLayout> layout =
      make_parameter_layout(config, {0, config.num_layers, true, true});
  std::unique_ptr<ModelStage> stage = make_model_stage(
      *layout, *ops, memory,
      ModelStageOptions{
          .micro_batch_size = 1,
          .num_slots = 1,
          .recompute = std::vector<RecomputeMode>(config.num_layers, RecomputeMode::None)});
  EXPECT_THROW(stage->backward_weight(0), std::logic_error);
  for (int i = 0; i < config.seq_len; ++i) stage->tokens(0)[i] = stage->targets(0)[i] = i;
  stage->forward(0, 1.0f);
  stage->backward_input(0);
  EXPECT_THROW(stage->backward_input(0), std::logic_error);  // its W is still pending
}

INSTANTIATE_TEST_SUITE_P(Architectures, SplitBackward,
                         ::testing::Values(Architecture::kGpt2, Architecture::kLlama),
                         [](const ::testing::TestParamInfo<Architecture>& info) {
                           return std::string(architecture_name(info.param));
                         });

}  // namespace
}  // namespace paraplan
