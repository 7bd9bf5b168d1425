// architecture.cc: the switch over architectures.
#include "runtime/model/architecture.h"

#include <stdexcept>

#include "common/printable_text.h"
#include "runtime/model/gpt/gpt_hf_config.h"
#include "runtime/model/gpt/gpt_layout.h"
#include "runtime/model/gpt/gpt_stage.h"
#include "runtime/model/llama/llama_hf_config.h"
#include "runtime/model/llama/llama_layout.h"
#include "runtime/model/llama/llama_stage.h"

namespace paraplan {

std::unique_ptr<ParameterLayout> make_parameter_layout(const TransformerConfig& config,
                                                       const StageSpec& stage, int tensor_rank,
                                                       int tensor_size) {
  switch (config.architecture) {
    case Architecture::kGpt2:
      return std::make_unique<GptLayout>(config, stage, tensor_rank, tensor_size);
    case Architecture::kLlama:
      return std::make_unique<LlamaLayout>(config, stage, tensor_rank, tensor_size);
  }
  throw std::logic_error("make_parameter_layout: unknown architecture");
}

std::unique_ptr<ParameterLayout> make_whole_model_layout(const TransformerConfig& config) {
  return make_parameter_layout(config, StageSpec{0, config.num_layers, true, true});
}

std::unique_ptr<ModelStage> make_model_stage(const ParameterLayout& layout, kernels::Ops& ops,
                                             MemoryTracker& memory,
                                             const ModelStageOptions& options) {
  switch (layout.config().architecture) {
    case Architecture::kGpt2:
      return std::make_unique<GptStage>(dynamic_cast<const GptLayout&>(layout), ops, memory,
                                        options);
    case Architecture::kLlama:
      return std::make_unique<LlamaStage>(dynamic_cast<const LlamaLayout&>(layout), ops, memory,
                                          options);
  }
  throw std::logic_error("make_model_stage: unknown architecture");
}

int64_t parameter_count(const TransformerConfig& config) {
  switch (config.architecture) {
    case Architecture::kGpt2:
      return gpt::parameter_count(config);
    case Architecture::kLlama:
      return llama::parameter_count(config);
  }
  throw std::logic_error("parameter_count: unknown architecture");
}

double training_flops_per_token(const TransformerConfig& config) {
  switch (config.architecture) {
    case Architecture::kGpt2:
      return gpt::training_flops_per_token(config);
    case Architecture::kLlama:
      return llama::training_flops_per_token(config);
  }
  throw std::logic_error("training_flops_per_token: unknown architecture");
}

nlohmann::ordered_json hugging_face_config(const TransformerConfig& config) {
  switch (config.architecture) {
    case Architecture::kGpt2:
      return gpt::hugging_face_config(config);
    case Architecture::kLlama:
      return llama::hugging_face_config(config);
  }
  throw std::logic_error("hugging_face_config: unknown architecture");
}

TransformerConfig config_from_hugging_face(const nlohmann::json& json, const std::string& path) {
  const auto model_type = json.find("model_type");
  const std::string type =
      model_type != json.end() && model_type->is_string() ? model_type->get<std::string>() : "gpt2";
  if (type == "gpt2") return gpt::config_from_hugging_face(json, path);
  if (llama::is_model_type(type)) return llama::config_from_hugging_face(json, path);
  throw std::runtime_error(path + ": model_type is '" + printable_text(type) +
                           "' but paraplan loads 'gpt2', 'llama', 'mistral' and 'qwen2' "
                           "checkpoints");
}

std::vector<std::string> config_differences(const TransformerConfig& saved,
                                            const TransformerConfig& plan) {
  if (saved.architecture != plan.architecture)
    return {std::string("model_type is '") + architecture_name(saved.architecture) +
            "' but the plan's model is '" + architecture_name(plan.architecture) + "'"};
  switch (plan.architecture) {
    case Architecture::kGpt2:
      return gpt::config_differences(saved, plan);
    case Architecture::kLlama:
      return llama::config_differences(saved, plan);
  }
  throw std::logic_error("config_differences: unknown architecture");
}

}  // namespace paraplan
