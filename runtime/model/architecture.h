// architecture.h: everything that depends on which architecture a model is,
// behind one switch on TransformerConfig::architecture: the layout and the
// stage it builds, its parameter and FLOP counts, its Hugging Face
// config.json. Code outside model/ calls these and never names an
// architecture; adding one is a folder beside gpt/ and a case in each
// function of architecture.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/model/model_config.h"
#include "runtime/model/model_stage.h"
#include "runtime/model/parameter_layout.h"

namespace paraplan {

// The parameters of `stage` on tensor rank tensor_rank of tensor_size.
std::unique_ptr<ParameterLayout> make_parameter_layout(const TransformerConfig& config,
                                                       const StageSpec& stage, int tensor_rank = 0,
                                                       int tensor_size = 1);
// The whole model on one rank (every layer, embedding and head, no tensor
// parallelism): checkpoints hold tensors in it by name.
std::unique_ptr<ParameterLayout> make_whole_model_layout(const TransformerConfig& config);

// The stage for `layout` (made by make_parameter_layout).
std::unique_ptr<ModelStage> make_model_stage(const ParameterLayout& layout, kernels::Ops& ops,
                                             MemoryTracker& memory,
                                             const ModelStageOptions& options);

// Parameters of the whole model, a tied head counted once.
int64_t parameter_count(const TransformerConfig& config);
// Training FLOPs per token (forward and backward, no recomputation), the
// figure MFU divides by.
double training_flops_per_token(const TransformerConfig& config);

// config.json as transformers writes it for this architecture, so a
// checkpoint directory loads with from_pretrained.
nlohmann::ordered_json hugging_face_config(const TransformerConfig& config);
// The model a Hugging Face config.json describes, by its model_type; `path`
// names the file in errors.
TransformerConfig config_from_hugging_face(const nlohmann::json& json, const std::string& path);
// One line per field where a checkpoint's model (saved) differs from the
// plan's, in config.json's names: "n_layer is 6 but the plan's model has 4
// layers". Empty when they match.
std::vector<std::string> config_differences(const TransformerConfig& saved,
                                            const TransformerConfig& plan);

}  // namespace paraplan
