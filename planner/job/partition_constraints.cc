// partition_constraints.cc: reading the partition-constraints TOML file (format
// in partition_constraints.h); search_space.cc narrows the search space with it.
#include "planner/job/partition_constraints.h"

#include <toml++/toml.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "common/bounded_file.h"
#include "common/printable_text.h"
#include "planner/job/module_names.h"

namespace paraplan {

using schema::RecomputeMode;

namespace {

std::string where(const std::string& path, const toml::node& node) {
  const auto begin = node.source().begin;
  if (begin.line == 0) return path;
  return path + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column);
}

// Resolves a module name to blocks, embedding and head.
void resolve_module(PartitionConstraint& constraint, int num_layers, const std::string& field) {
  const std::string& name = constraint.module;
  bool matched = false;
  if (name == "ROOT" || name == "GPT2Block" || module_name_matches(name, "transformer") ||
      module_name_matches(name, "transformer.h")) {
    for (int i = 0; i < num_layers; ++i) constraint.blocks.push_back(i);
    matched = true;
  }
  for (int i = 0; i < num_layers && !matched; ++i) {
    const std::string block = "transformer.h." + std::to_string(i);
    for (const char* sub : {"", ".ln_1", ".attn", ".attn.c_attn", ".attn.c_proj",
                            ".attn.core_attention", ".ln_2", ".mlp", ".mlp.c_fc", ".mlp.c_proj"})
      if (module_name_matches(name, block + sub)) {
        constraint.blocks.push_back(i);
        break;
      }
  }
  if (!constraint.blocks.empty()) matched = true;
  if (module_name_matches(name, "transformer.wte") || module_name_matches(name, "transformer.wpe"))
    constraint.embedding = matched = true;
  if (module_name_matches(name, "transformer.ln_f") || module_name_matches(name, "lm_head"))
    constraint.head = matched = true;
  if (!matched)
    throw std::runtime_error(field + " = '" + printable_text(name) +
                             "' names no module; valid (or any dotted suffix): transformer, "
                             "transformer.h, transformer.h.<i> for i in 0.." +
                             std::to_string(num_layers - 1) +
                             " and their attn / mlp submodules, transformer.wte, "
                             "transformer.wpe, transformer.ln_f, lm_head");
}

}  // namespace

PartitionConstraints parse_partition_constraints(const std::string& text, const std::string& path,
                                                 const JobConfig& config) {
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& error) {
    const auto begin = error.source().begin;
    throw std::runtime_error(path + ":" + std::to_string(begin.line) + ":" +
                             std::to_string(begin.column) +
                             ": TOML syntax error: " + printable_text(error.description(), 200));
  }
  PartitionConstraints result;
  result.path = path;
  for (auto&& [key, node] : root)
    if (key.str() != "constraint")
      throw std::runtime_error(where(path, node) + ": unknown key '" + printable_text(key.str()) +
                               "'; the file holds [[constraint]] tables only");
  const toml::array* list = root["constraint"].as_array();
  if (list == nullptr) {
    if (root.contains("constraint"))
      throw std::runtime_error(path + ": 'constraint' must be an array of tables ([[constraint]])");
    return result;
  }
  int index = 0;
  for (const toml::node& entry : *list) {
    ++index;
    const std::string name = path + ": constraint " + std::to_string(index);
    const toml::table* table = entry.as_table();
    if (table == nullptr) throw std::runtime_error(name + " must be a table ([[constraint]])");
    PartitionConstraint constraint;
    constraint.index = index;
    for (auto&& [key, value] : *table) {
      const std::string k(key.str());
      const std::string field =
          where(path, value) + ": constraint " + std::to_string(index) + " " + printable_text(k);
      if (k == "module") {
        if (!value.is_string()) throw std::runtime_error(field + " must be a string");
        constraint.module = value.as_string()->get();
      } else if (k == "stage") {
        if (!value.is_integer())
          throw std::runtime_error(field + " must be an integer (-1 = last)");
        const int64_t stage = value.as_integer()->get();
        const int64_t last_stage = int64_t{config.model.num_layers} + 1;
        if (stage < -1 || stage > last_stage)
          throw std::runtime_error(field + " = " + std::to_string(stage) +
                                   " is out of range; valid: -1 .. " + std::to_string(last_stage));
        constraint.stage = static_cast<int>(stage);
      } else if (k == "tensor_parallel") {
        const toml::array* degrees = value.as_array();
        if (degrees == nullptr || degrees->empty())
          throw std::runtime_error(field + " must be a non-empty array of integers >= 1");
        for (const toml::node& degree : *degrees) {
          if (!degree.is_integer() || degree.as_integer()->get() < 1 ||
              degree.as_integer()->get() > std::numeric_limits<int>::max())
            throw std::runtime_error(field + " must be a non-empty array of integers in 1 .. " +
                                     std::to_string(std::numeric_limits<int>::max()));
          constraint.tensor_parallel.push_back(static_cast<int>(degree.as_integer()->get()));
        }
      } else if (k == "recompute") {
        const toml::array* modes = value.as_array();
        if (modes == nullptr || modes->empty())
          throw std::runtime_error(
              field + " must be a non-empty array of \"none\", \"selective\", \"full\"");
        std::vector<int> seen;
        for (const toml::node& mode : *modes) {
          const std::string text = mode.is_string() ? mode.as_string()->get() : "";
          int level = text == "none" ? 0 : text == "selective" ? 1 : text == "full" ? 2 : -1;
          if (level < 0)
            throw std::runtime_error(field + ": '" + printable_text(text) +
                                     "' is not a recompute mode; valid: none, selective, full");
          seen.push_back(level);
        }
        std::sort(seen.begin(), seen.end());
        seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        if (seen.back() - seen.front() + 1 != static_cast<int>(seen.size()))
          throw std::runtime_error(field +
                                   " must be a contiguous run of none < selective < full (\"none\" "
                                   "and \"full\" without \"selective\" is not)");
        constraint.recompute = {static_cast<RecomputeMode>(seen.front()),
                                static_cast<RecomputeMode>(seen.back())};
      } else {
        throw std::runtime_error(
            field + ": unknown key; valid keys: module, recompute, stage, tensor_parallel");
      }
    }
    if (constraint.module.empty()) throw std::runtime_error(name + ": 'module' is required");
    resolve_module(constraint, config.model.num_layers, name + " module");
    if (constraint.recompute && constraint.blocks.empty())
      throw std::runtime_error(name + ": recompute applies to blocks, but module '" +
                               constraint.module + "' names none");
    result.constraints.push_back(std::move(constraint));
  }
  return result;
}

PartitionConstraints load_partition_constraints(const JobConfig& config) {
  const std::string& path = config.planner.partition_constraints_path;
  std::string text;
  try {
    text = read_bounded_file(path, kPartitionConstraintsFile);
  } catch (const std::exception& error) {
    throw std::runtime_error(config.source +
                             ": [planner] partition_constraints_path: " + error.what());
  }
  return parse_partition_constraints(text, path, config);
}

}  // namespace paraplan
