// module_names.cc: suffix matching of AutoDist module names, recompute_modules
// and pipeline_pivots (see module_names.h).
#include "planner/job/module_names.h"

#include <stdexcept>

namespace paraplan {

using schema::RecomputeMode;

namespace {

std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

// The names one architecture's modules carry (Hugging Face's).
struct ModuleNames {
  std::string root, blocks, block_class, attention, final_norm;
};

ModuleNames module_names(schema::Architecture architecture) {
  if (architecture == schema::Architecture::Llama)
    return {"model", "model.layers", "LlamaDecoderLayer", "self_attn", "model.norm"};
  return {"transformer", "transformer.h", "GPT2Block", "attn", "transformer.ln_f"};
}

std::string block_names_help(const ModuleNames& names, int num_layers) {
  return names.blocks + ".<i> for i in 0.." + std::to_string(num_layers - 1);
}

}  // namespace

bool module_name_matches(const std::string& entry, const std::string& module_name) {
  if (entry == module_name) return true;
  return module_name.size() > entry.size() &&
         module_name.compare(module_name.size() - entry.size(), entry.size(), entry) == 0 &&
         module_name[module_name.size() - entry.size() - 1] == '.';
}

std::vector<std::string> split_module_list(const std::string& text) {
  std::vector<std::string> entries;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string entry = trim(text.substr(start, comma - start));
    if (!entry.empty()) entries.push_back(entry);
    start = comma + 1;
  }
  return entries;
}

std::vector<RecomputeMode> recompute_modes_from_modules(const std::string& recompute_modules,
                                                        int num_layers, const std::string& source,
                                                        schema::Architecture architecture) {
  const ModuleNames names = module_names(architecture);
  std::vector<RecomputeMode> modes(static_cast<size_t>(num_layers), RecomputeMode::None);
  for (const std::string& entry : split_module_list(recompute_modules)) {
    bool matched = false;
    if (entry == "ROOT" || entry == names.block_class || module_name_matches(entry, names.root) ||
        module_name_matches(entry, names.blocks)) {
      modes.assign(modes.size(), RecomputeMode::Full);
      matched = true;
    }
    for (int i = 0; i < num_layers; ++i) {
      const std::string block = names.blocks + "." + std::to_string(i);
      if (module_name_matches(entry, block)) {
        modes[i] = RecomputeMode::Full;
        matched = true;
      } else if (module_name_matches(entry, block + "." + names.attention + ".core_attention")) {
        if (modes[i] == RecomputeMode::None) modes[i] = RecomputeMode::Selective;
        matched = true;
      }
    }
    if (!matched)
      throw std::runtime_error(
          source + ": [planner] recompute_modules entry '" + entry +
          "' names no module; valid module names (or any dotted suffix of them): ROOT, " +
          names.root + ", " + names.blocks + " (every block, full recompute), " +
          block_names_help(names, num_layers) + " (block i, full recompute), " + names.blocks +
          ".<i>." + names.attention + ".core_attention (selective: the attention core)");
  }
  return modes;
}

std::vector<char> pipeline_boundaries_from_pivots(const std::string& pipeline_pivots,
                                                  int num_layers, const std::string& source,
                                                  schema::Architecture architecture) {
  const ModuleNames names = module_names(architecture);
  const std::vector<std::string> entries = split_module_list(pipeline_pivots);
  std::vector<char> allowed(static_cast<size_t>(num_layers) + 1, entries.empty() ? 1 : 0);
  for (const std::string& entry : entries) {
    bool matched = false;
    if (entry == names.block_class || module_name_matches(entry, names.blocks)) {
      for (int i = 0; i < num_layers; ++i) allowed[i] = 1;
      matched = true;
    }
    for (int i = 0; i < num_layers; ++i)
      if (module_name_matches(entry, names.blocks + "." + std::to_string(i)))
        allowed[i] = 1, matched = true;
    if (module_name_matches(entry, names.final_norm) || module_name_matches(entry, "lm_head"))
      allowed[num_layers] = 1, matched = true;
    if (!matched)
      throw std::runtime_error(
          source + ": [planner] pipeline_pivots entry '" + entry +
          "' names no module a pipeline stage can begin with; valid (or any dotted suffix): " +
          block_names_help(names, num_layers) + " (a stage begins at block i), " + names.blocks +
          " or " + names.block_class + " (any block), " + names.final_norm +
          " or lm_head (a last stage holding only the head)");
  }
  return allowed;
}

}  // namespace paraplan
