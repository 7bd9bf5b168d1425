// model_from_plan.cc: from a validated plan to the stage this rank builds.
#include "runtime/model/model_from_plan.h"

#include <stdexcept>
#include <string>

#include "runtime/model/architecture.h"
#include "runtime/model/chunked_stage.h"
#include "schema/pipeline_layout.h"

namespace paraplan {

StageModelSpec stage_model_from_plan(const LoadedPlan& loaded, int stage_index) {
  const schema::Plan& plan = loaded.plan();
  const schema::Model& model = *plan.model();
  StageModelSpec result;
  Architecture architecture = Architecture::kGpt2;
  switch (model.architecture()) {
    case schema::Architecture::Gpt2:
      architecture = Architecture::kGpt2;
      break;
    case schema::Architecture::Llama:
      architecture = Architecture::kLlama;
      break;
  }
  // A value from a newer plan format than this runtime knows.
  if (model.architecture() != schema::Architecture::Gpt2 &&
      model.architecture() != schema::Architecture::Llama)
    throw std::runtime_error(loaded.path() + ": model.architecture " +
                             std::to_string(static_cast<int>(model.architecture())) +
                             " is not supported by this runtime; valid: gpt2, llama");
  result.config = validated_transformer_config(
      TransformerConfigValues{
          .architecture = architecture,
          .shape = {.vocab_size = model.vocab_size(),
                    .seq_len = model.seq_len(),
                    .num_layers = model.num_layers(),
                    .d_model = model.d_model(),
                    .num_heads = model.num_heads(),
                    .ffn_size = model.ffn_size()},
          .tied_embeddings = model.tied_embeddings(),
          .norm_epsilon = model.layernorm_epsilon(),
          .init_std = model.init_std(),
          .num_kv_heads = model.num_kv_heads(),
          .rope_theta = model.rope_theta(),
          .rope_scaling = {.factor = model.rope_scaling_factor(),
                           .low_freq_factor = model.rope_low_freq_factor(),
                           .high_freq_factor = model.rope_high_freq_factor(),
                           .original_max_positions = model.rope_original_max_positions()},
          .qkv_bias = model.qkv_bias()},
      kPlanConfigFields, loaded.path());
  // Validated (plan_validate): Float32 or BFloat16. bf16 is mixed precision:
  // bf16 storage, fp32 master weights and moments (distributed_optimizer.h).
  result.dtype = model.dtype() == schema::DType::BFloat16 ? kernels::DType::kBFloat16
                                                          : kernels::DType::kFloat32;

  const schema::Stage& stage = *plan.stages()->Get(stage_index);
  result.stage.first_layer = stage.first_layer();
  result.stage.num_layers = stage.num_layers();
  result.stage.has_embedding = stage.has_embedding();
  result.stage.has_head = stage.has_head();
  // A stage of no layers may omit its (empty) recompute list.
  if (stage.recompute() != nullptr)
    for (auto mode : *stage.recompute())
      result.recompute.push_back(static_cast<RecomputeMode>(mode));
  return result;
}

std::vector<StageModelSpec> chunk_models_from_plan(const LoadedPlan& loaded, int pipeline_rank) {
  const schema::Plan& plan = loaded.plan();
  const int chunks = plan.schedule() ? plan.schedule()->virtual_stages() : 1;
  const int p = plan.mesh()->pipeline_parallel();
  std::vector<StageModelSpec> models;
  const PipelineLayout layout = PipelineLayout::of(
      plan.schedule() ? plan.schedule()->kind() : schema::ScheduleKind::OneForwardOneBackward, p,
      chunks);
  for (int c = 0; c < chunks; ++c)
    models.push_back(stage_model_from_plan(loaded, layout.virtual_stage(pipeline_rank, c)));
  return models;
}

std::unique_ptr<ParameterLayout> rank_layout_from_plan(const LoadedPlan& loaded, int pipeline_rank,
                                                       int tensor_rank, int tensor_size,
                                                       int max_positions) {
  std::vector<StageModelSpec> chunks = chunk_models_from_plan(loaded, pipeline_rank);
  for (StageModelSpec& chunk : chunks) chunk.config.max_positions = max_positions;
  if (chunks.size() == 1)
    return make_parameter_layout(chunks[0].config, chunks[0].stage, tensor_rank, tensor_size);
  std::vector<std::unique_ptr<ParameterLayout>> layouts;
  for (const StageModelSpec& chunk : chunks)
    layouts.push_back(make_parameter_layout(chunk.config, chunk.stage, tensor_rank, tensor_size));
  return std::make_unique<ChunkedLayout>(std::move(layouts));
}

StageModelSpec single_process_model_from_plan(const LoadedPlan& loaded) {
  const schema::Mesh& mesh = *loaded.plan().mesh();
  const int world = mesh.pipeline_parallel() * mesh.data_parallel() * mesh.context_parallel() *
                    mesh.tensor_parallel();
  if (world != 1)
    throw std::runtime_error(
        loaded.path() + ": mesh: the plan needs " + std::to_string(world) + " ranks (pp " +
        std::to_string(mesh.pipeline_parallel()) + " x dp " + std::to_string(mesh.data_parallel()) +
        " x cp " + std::to_string(mesh.context_parallel()) + " x tp " +
        std::to_string(mesh.tensor_parallel()) +
        ") but this run has 1; plan for world_size 1 or run the plan on that many ranks");
  return stage_model_from_plan(loaded, 0);
}

}  // namespace paraplan
