// module_names.h: the model's module names (Hugging Face naming) and the
// AutoDist options that name modules: recompute_modules and pipeline_pivots.
//
// GPT-2: transformer (the whole model; ROOT is its alias), transformer.wte,
// transformer.wpe, transformer.h (the block list), transformer.h.<i> (block i,
// class GPT2Block), transformer.h.<i>.attn, transformer.h.<i>.attn.core_attention,
// transformer.h.<i>.mlp, transformer.ln_f, lm_head.
// Llama: model (ROOT), model.embed_tokens, model.layers, model.layers.<i>
// (class LlamaDecoderLayer), model.layers.<i>.self_attn,
// model.layers.<i>.self_attn.core_attention, model.layers.<i>.mlp, model.norm,
// lm_head.
// An option entry names a module when it equals the name or a dotted suffix of
// it ("h.3", "core_attention"), as in AutoDist; the block class names every block.
#pragma once

#include <string>
#include <vector>

#include "plan_generated.h"

namespace paraplan {

// AutoDist suffix matching: entry names module_name or a dotted suffix of it.
bool module_name_matches(const std::string& entry, const std::string& module_name);

// The comma-separated entries of an option, trimmed, empty ones dropped.
std::vector<std::string> split_module_list(const std::string& text);

// recompute_modules -> the least recompute per block:
//   ROOT, transformer, transformer.h, GPT2Block  -> every block: full
//   transformer.h.<i>                            -> block i: full
//   transformer.h.<i>.attn.core_attention        -> block i: selective
// Full wins over selective. An entry matching no module is an error (source names
// the file) listing the valid names.
std::vector<schema::RecomputeMode> recompute_modes_from_modules(
    const std::string& recompute_modules, int num_layers, const std::string& source,
    schema::Architecture architecture = schema::Architecture::Gpt2);

// pipeline_pivots -> the positions 0..num_layers where a stage may begin:
// transformer.h.<i> allows a stage to begin at block i; transformer.ln_f or
// lm_head allow a last stage holding only the head (position num_layers);
// transformer.h or GPT2Block allow every block. Empty text allows every position.
// An entry matching no module is an error naming the field.
std::vector<char> pipeline_boundaries_from_pivots(
    const std::string& pipeline_pivots, int num_layers, const std::string& source,
    schema::Architecture architecture = schema::Architecture::Gpt2);

}  // namespace paraplan
