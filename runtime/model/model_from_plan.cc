// model_from_plan.cc: from a validated plan to the stage this rank builds.
#include "runtime/model/model_from_plan.h"

#include <stdexcept>

namespace paraplan {

StageModelSpec stage_model_from_plan(const LoadedPlan& loaded, int stage_index) {
  const schema::Plan& plan = loaded.plan();
  const schema::Model& model = *plan.model();
  StageModelSpec result;
  switch (model.architecture()) {
    case schema::Architecture::Gpt2:
      result.config.architecture = Architecture::kGpt2;
      break;
    case schema::Architecture::Llama:
      result.config.architecture = Architecture::kLlama;
      break;
    default:
      throw std::runtime_error(loaded.path() + ": model.architecture '" +
                               schema::EnumNameArchitecture(model.architecture()) +
                               "' is not supported by this runtime; valid: gpt2, llama");
  }
  // Validated (plan_validate): Float32 or BFloat16. bf16 is mixed precision:
  // bf16 storage, fp32 master weights and moments (distributed_optimizer.h).
  result.dtype = model.dtype() == schema::DType::BFloat16 ? kernels::DType::kBFloat16
                                                          : kernels::DType::kFloat32;
  result.config.vocab_size = model.vocab_size();
  result.config.seq_len = model.seq_len();
  result.config.num_layers = model.num_layers();
  result.config.d_model = model.d_model();
  result.config.num_heads = model.num_heads();
  result.config.ffn_size = model.ffn_size();
  result.config.tied_embeddings = model.tied_embeddings();
  result.config.norm_epsilon = model.layernorm_epsilon();
  result.config.init_std = model.init_std();
  result.config.num_kv_heads = model.num_kv_heads();
  result.config.rope_theta = model.rope_theta();
  result.config.rope_scaling = {.factor = model.rope_scaling_factor(),
                                .low_freq_factor = model.rope_low_freq_factor(),
                                .high_freq_factor = model.rope_high_freq_factor(),
                                .original_max_positions = model.rope_original_max_positions()};

  const schema::Stage& stage = *plan.stages()->Get(stage_index);
  result.stage.first_layer = stage.first_layer();
  result.stage.num_layers = stage.num_layers();
  result.stage.has_embedding = stage.has_embedding();
  result.stage.has_head = stage.has_head();
  for (auto mode : *stage.recompute()) result.recompute.push_back(static_cast<RecomputeMode>(mode));
  return result;
}

StageModelSpec single_process_model_from_plan(const LoadedPlan& loaded) {
  const schema::Mesh& mesh = *loaded.plan().mesh();
  const int world = mesh.pipeline_parallel() * mesh.data_parallel() * mesh.tensor_parallel();
  if (world != 1)
    throw std::runtime_error(
        loaded.path() + ": mesh: the plan needs " + std::to_string(world) + " ranks (pp " +
        std::to_string(mesh.pipeline_parallel()) + " x dp " + std::to_string(mesh.data_parallel()) +
        " x tp " + std::to_string(mesh.tensor_parallel()) +
        ") but this run has 1; plan for world_size 1 or run the plan on that many ranks");
  return stage_model_from_plan(loaded, 0);
}

}  // namespace paraplan
