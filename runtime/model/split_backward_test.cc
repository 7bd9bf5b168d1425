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
#include "runtime/model/model_stage.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

constexpr int kMicroBatches = 3;

TransformerConfig split_config(Architecture architecture) {
  TransformerConfig config;
  config.architecture = architecture;
  config.tied_embeddings = architecture == Architecture::kGpt2;
  config.vocab_size = 12;
  config.seq_len = 6;
  config.num_layers = 3;
  config.d_model = 8;
  config.num_heads = 2;
  config.num_kv_heads = architecture == Architecture::kLlama ? 2 : 0;
  config.ffn_size = 12;
  config.init_std = 0.3f;
  return config;
}

// What one step of the three micro-batches leaves: the gradient buffer, the
// stage input's gradient after each micro-batch's backward (a stage without
// the embedding) and the offsets gradients_final_from was told.
struct StepResult {
  std::vector<float> gradients;
  std::vector<std::vector<float>> input_gradients;
  std::vector<size_t> final_from;
};

StepResult run_step(const TransformerConfig& config, const StageSpec& spec,
                    std::vector<RecomputeMode> recompute, Communicator* tensor_group, bool split) {
  const int tensor_size = tensor_group ? tensor_group->size() : 1;
  const int tensor_rank = tensor_group ? tensor_group->rank() : 0;
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  MemoryTracker memory(*ops);
  std::unique_ptr<ParameterLayout> layout =
      make_parameter_layout(config, spec, tensor_rank, tensor_size);
  ModelStageOptions options{.micro_batch_size = 2,
                            .num_slots = kMicroBatches,
                            .recompute = std::move(recompute),
                            .tensor_group = tensor_size > 1 ? tensor_group : nullptr};
  std::unique_ptr<ModelStage> stage = make_model_stage(*layout, *ops, memory, options);
  std::vector<float> initial(layout->num_elements());
  layout->initialize(initial.data(), 7);
  stage->load_parameters(initial.data(), initial.size());

  const int BT = 2 * config.seq_len;
  const size_t activation = stage->activation_elements();
  for (int mb = 0; mb < kMicroBatches; ++mb) {
    for (int i = 0; i < BT; ++i) {
      stage->tokens(mb)[i] = (mb * 5 + i * 7) % config.vocab_size;
      stage->targets(mb)[i] = (mb * 3 + i * 2 + 1) % config.vocab_size;
    }
    if (!spec.has_embedding) {
      const std::vector<float> input = testing::random_values<float>(mb, activation, 1);
      ops->copy_from_host(stage->input(mb), input.data(), activation * sizeof(float));
    }
    stage->forward(mb, 0.05f);
  }
  StepResult result;
  const auto record = [&result](size_t offset) { result.final_from.push_back(offset); };
  const auto backward = [&](int mb) {
    if (!spec.has_head) {
      const std::vector<float> gradient = testing::random_values<float>(mb, activation, 2);
      ops->copy_from_host(stage->output_gradient(mb), gradient.data(), activation * sizeof(float));
    }
    const bool last = mb == kMicroBatches - 1;
    if (split) {
      stage->backward_input(mb);
    } else if (last) {
      stage->backward(mb, record);
    } else {
      stage->backward(mb);
    }
    if (!spec.has_embedding) {
      std::vector<float> gradient(activation);
      ops->copy_to_host(gradient.data(), stage->input_gradient(), activation * sizeof(float));
      result.input_gradients.push_back(gradient);
    }
  };
  if (split) {
    // Bi0 Bi1 W0 Bi2 W1 W2: each W after a later micro-batch's B.
    backward(0);
    backward(1);
    stage->backward_weight(0);
    backward(2);
    stage->backward_weight(1);
    stage->backward_weight(2, record);
  } else {
    for (int mb = 0; mb < kMicroBatches; ++mb) backward(mb);
  }
  result.gradients.resize(layout->num_elements());
  stage->read_gradients(result.gradients.data(), result.gradients.size());
  return result;
}

class SplitBackward : public ::testing::TestWithParam<Architecture> {};

TEST_P(SplitBackward, InputThenWeightIsBitwiseBackward) {
  const TransformerConfig config = split_config(GetParam());
  const std::vector<StageSpec> specs = {{0, config.num_layers, true, true}, {1, 2, false, false}};
  const std::vector<std::vector<RecomputeMode>> recomputes = {
      {RecomputeMode::None, RecomputeMode::None, RecomputeMode::None},
      {RecomputeMode::Selective, RecomputeMode::Full, RecomputeMode::None},
      {RecomputeMode::Full, RecomputeMode::Full, RecomputeMode::Full}};
  for (int tensor_size : {1, 2}) {
    // Tensor parallelism 1: each rank its own group; 2: the two ranks.
    MPI_Comm comm;
    ASSERT_EQ(
        MPI_Comm_split(MPI_COMM_WORLD, tensor_size == 2 ? 0 : testing::world_rank(), 0, &comm),
        MPI_SUCCESS);
    MpiCommunicator group(comm, "tensor");
    for (const StageSpec& spec : specs) {
      for (const std::vector<RecomputeMode>& recompute : recomputes) {
        std::vector<RecomputeMode> modes(recompute.begin(), recompute.begin() + spec.num_layers);
        const StepResult whole = run_step(config, spec, modes, &group, false);
        const StepResult split = run_step(config, spec, modes, &group, true);
        const std::string where = "tensor " + std::to_string(tensor_size) + " layers from " +
                                  std::to_string(spec.first_layer) + " recompute " +
                                  std::to_string(static_cast<int>(modes[0]));
        EXPECT_TRUE(testing::bitwise_equal(whole.gradients, split.gradients)) << where;
        ASSERT_EQ(whole.input_gradients.size(), split.input_gradients.size()) << where;
        for (size_t mb = 0; mb < whole.input_gradients.size(); ++mb)
          EXPECT_TRUE(testing::bitwise_equal(whole.input_gradients[mb], split.input_gradients[mb]))
              << where << " micro-batch " << mb;
        EXPECT_EQ(whole.final_from, split.final_from) << where;
        EXPECT_FALSE(whole.final_from.empty());
        // Something was computed: the gradients are not all zero.
        double norm = 0;
        for (float g : whole.gradients) norm += double{g} * g;
        EXPECT_GT(norm, 0.0) << where;
      }
    }
  }
}

TEST_P(SplitBackward, RefusesAWeightGradientWithoutItsInputGradient) {
  const TransformerConfig config = split_config(GetParam());
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
