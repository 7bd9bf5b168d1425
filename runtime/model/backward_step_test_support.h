// backward_step_test_support.h: one training step's backward of a small
// GPT-2 or Llama stage, three micro-batches in flight, run as backward(),
// as backward_input then backward_weight (ZB-H1's order) or with the weight
// gradients held as late as the overlap contract allows
// (testing/delayed_weight_gradient_ops.h), and what each leaves: the
// gradients, the input gradient after each backward, the offsets
// gradients_final_from was told and the gradients it would have read then.
// For the tests that compare the three (split_backward_test.cc,
// weight_gradient_overlap_test.cc), under mpirun.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/model/architecture.h"
#include "runtime/model/model_stage.h"
#include "runtime/testing/delayed_weight_gradient_ops.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan::testing {

constexpr int kMicroBatches = 3;

inline TransformerConfig small_decoder_config(Architecture architecture) {
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
  // The whole gradient buffer when each offset was reported final.
  std::vector<std::vector<float>> gradients_when_final;
  int weight_gradients_queued = 0;  // kDelayedWeightGradients: the overlapped calls
};

enum class BackwardMode { kWhole, kSplit, kDelayedWeightGradients };

inline StepResult run_step(const TransformerConfig& config, const StageSpec& spec,
                           std::vector<RecomputeMode> recompute, Communicator* tensor_group,
                           BackwardMode mode, bool sequence_parallel = false) {
  const int tensor_size = tensor_group ? tensor_group->size() : 1;
  const int tensor_rank = tensor_group ? tensor_group->rank() : 0;
  const bool split = mode == BackwardMode::kSplit;
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  DelayedWeightGradientOps* delayed = nullptr;
  if (mode == BackwardMode::kDelayedWeightGradients) {
    auto wrapped = std::make_unique<DelayedWeightGradientOps>(std::move(ops));
    delayed = wrapped.get();
    ops = std::move(wrapped);
  }
  MemoryTracker memory(*ops);
  std::unique_ptr<ParameterLayout> layout =
      make_parameter_layout(config, spec, tensor_rank, tensor_size);
  ModelStageOptions options{.micro_batch_size = 2,
                            .num_slots = kMicroBatches,
                            .recompute = std::move(recompute),
                            .tensor_group = tensor_size > 1 ? tensor_group : nullptr,
                            .sequence_parallel = sequence_parallel && tensor_size > 1};
  std::unique_ptr<ModelStage> stage = make_model_stage(*layout, *ops, memory, options);
  std::vector<float> initial(layout->num_elements());
  layout->initialize(initial.data(), 7);
  stage->load_parameters(initial.data(), initial.size());

  const int BT = 2 * config.seq_len;
  const size_t activation = stage->activation_elements();
  // Micro-batch `sample` of the step into slot mb.
  const auto forward = [&](int mb, int sample) {
    for (int i = 0; i < BT; ++i) {
      stage->tokens(mb)[i] = (sample * 5 + i * 7) % config.vocab_size;
      stage->targets(mb)[i] = (sample * 3 + i * 2 + 1) % config.vocab_size;
    }
    if (!spec.has_embedding) {
      const std::vector<float> input = random_values<float>(sample, activation, 1);
      ops->copy_from_host(stage->input(mb), input.data(), activation * sizeof(float));
    }
    stage->forward(mb, 0.05f);
  };
  for (int mb = 0; mb < kMicroBatches; ++mb) forward(mb, mb);
  StepResult result;
  const auto record = [&](size_t offset) {
    result.final_from.push_back(offset);
    // What the data-parallel reduction would read now.
    std::vector<float> now(layout->num_elements());
    ops->copy_to_host(now.data(), stage->gradients(), now.size() * sizeof(float));
    result.gradients_when_final.push_back(std::move(now));
  };
  const auto backward = [&](int mb) {
    if (!spec.has_head) {
      const std::vector<float> gradient = random_values<float>(mb, activation, 2);
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
    // As 1F1B does: the freed slot takes the next micro-batch's forward at
    // once (its activations, and a full recompute's shared scratch, rewritten).
    if (!split && mb < kMicroBatches - 1) forward(mb, kMicroBatches + mb);
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
  if (delayed != nullptr) result.weight_gradients_queued = delayed->queued();
  return result;
}

// One case of the grid the backward tests walk.
struct BackwardCase {
  Communicator* tensor_group;  // 1 rank (each its own) or the world's 2
  StageSpec spec;
  std::vector<RecomputeMode> recompute;
  bool sequence_parallel;
  std::string where;  // for failure messages
};

// Under mpirun with 2 ranks: tensor parallelism 1 (each rank alone) and 2
// (both), with and without sequence parallelism where with_sequence_parallel
// (tensor 2 only), a whole-model stage and a middle one of 2 blocks, and
// three recompute patterns (none; selective, full, none; all full).
inline void for_each_backward_case(const TransformerConfig& config, bool with_sequence_parallel,
                                   const std::function<void(const BackwardCase&)>& check) {
  const std::vector<StageSpec> specs = {{0, config.num_layers, true, true}, {1, 2, false, false}};
  const std::vector<std::vector<RecomputeMode>> recomputes = {
      {RecomputeMode::None, RecomputeMode::None, RecomputeMode::None},
      {RecomputeMode::Selective, RecomputeMode::Full, RecomputeMode::None},
      {RecomputeMode::Full, RecomputeMode::Full, RecomputeMode::Full}};
  for (int tensor_size : {1, 2}) {
    MPI_Comm comm;
    if (MPI_Comm_split(MPI_COMM_WORLD, tensor_size == 2 ? 0 : world_rank(), 0, &comm) !=
        MPI_SUCCESS) {
      ADD_FAILURE() << "MPI_Comm_split failed";
      return;
    }
    MpiCommunicator group(comm, "tensor");
    for (bool sequence_parallel : {false, true}) {
      if (sequence_parallel && (tensor_size == 1 || !with_sequence_parallel)) continue;
      for (const StageSpec& spec : specs) {
        for (const std::vector<RecomputeMode>& recompute : recomputes) {
          const std::vector<RecomputeMode> modes(recompute.begin(),
                                                 recompute.begin() + spec.num_layers);
          check({&group, spec, modes, sequence_parallel,
                 "tensor " + std::to_string(tensor_size) +
                     (sequence_parallel ? " sequence-parallel" : "") + " layers from " +
                     std::to_string(spec.first_layer) + " recompute " +
                     std::to_string(static_cast<int>(modes[0]))});
        }
      }
    }
  }
}

}  // namespace paraplan::testing
