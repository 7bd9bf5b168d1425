// job_config.cc: job.toml parsing, dotted overrides and derived defaults of
// JobConfig. The options themselves are one table (job_config_fields.cc), which
// parsing TOML, parsing override strings and listing valid keys walk here; the
// range checks are in job_config_validate.cc.
#include "planner/job/job_config.h"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <variant>

#include "common/bounded_file.h"
#include "common/printable_text.h"
#include "planner/job/cluster_presets.h"
#include "planner/job/job_config_internal.h"
#include "planner/job/nccl_settings.h"
#include "schema/model_limits.h"

namespace paraplan {
namespace {

using job_fields::field_table;
using job_fields::FieldKind;
using job_fields::FieldSpec;
using job_fields::FieldValue;
using job_fields::section_names;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string valid_keys(const std::string& section) {
  std::vector<std::string> keys;
  for (const FieldSpec& spec : field_table())
    if (spec.section == section) keys.push_back(spec.key);
  return join(keys);
}

std::string valid_sections() {
  std::vector<std::string> quoted;
  for (const std::string& name : section_names()) quoted.push_back("[" + name + "]");
  return join(quoted);
}

// The spec for section.key, or an error naming what is valid.
const FieldSpec& find_field(const std::string& section, const std::string& key,
                            const std::string& where) {
  bool section_known = false;
  for (const std::string& name : section_names()) section_known |= name == section;
  if (!section_known)
    throw std::runtime_error(where + ": unknown section [" + printable_text(section) +
                             "]; valid sections: " + valid_sections());
  for (const FieldSpec& spec : field_table())
    if (spec.section == section && spec.key == key) return spec;
  throw std::runtime_error(where + ": [" + section + "] unknown key '" + printable_text(key) +
                           "'; valid keys: " + valid_keys(section));
}

const FieldSpec& find_dotted_field(const std::string& dotted_key, const std::string& where) {
  const size_t dot = dotted_key.find('.');
  if (dot == std::string::npos || dotted_key.find('.', dot + 1) != std::string::npos)
    throw std::runtime_error(where + ": option '" + printable_text(dotted_key) +
                             "' must have the form section.key (e.g. planner.memory_constraint)"
                             "; valid sections: " +
                             valid_sections());
  return find_field(dotted_key.substr(0, dot), dotted_key.substr(dot + 1), where);
}

const char* kind_name(FieldKind kind) {
  switch (kind) {
    case FieldKind::Integer:
      return "an integer";
    case FieldKind::Float:
      return "a number";
    case FieldKind::Boolean:
      return "a boolean (true or false)";
    case FieldKind::String:
      return "a string";
    case FieldKind::Choice:
      return "a string";
    case FieldKind::IntegerOrAuto:
      return "an integer or 'auto'";
    case FieldKind::BooleanOrAuto:
      return "true, false or 'auto'";
    case FieldKind::DataSources:
      return "a path or an array of {path, weight} tables";
  }
  return "?";
}

const char* toml_type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a floating-point number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    default:
      return "nothing";
  }
}

std::string field_name(const FieldSpec& spec) {
  return "[" + spec.section + "] " + spec.key;
}

// Range and choice checks every value passes before it is stored.
void check_value(const FieldSpec& spec, const FieldValue& value, const std::string& where) {
  if (const auto* integer = std::get_if<int64_t>(&value)) {
    if (*integer < spec.min_integer || *integer > spec.max_integer)
      throw std::runtime_error(where + ": " + field_name(spec) + " = " + std::to_string(*integer) +
                               " is out of range; valid: " + std::to_string(spec.min_integer) +
                               " .. " + std::to_string(spec.max_integer));
  }
  if (spec.kind == FieldKind::Float && !std::isfinite(std::get<double>(value)))
    throw std::runtime_error(where + ": " + field_name(spec) + " must be a finite number");
  if (spec.kind == FieldKind::Choice) {
    const std::string& text = std::get<std::string>(value);
    for (const std::string& choice : spec.choices)
      if (choice == text) return;
    throw std::runtime_error(where + ": " + field_name(spec) + " = '" + printable_text(text) +
                             "' is not valid; valid values: " + join(spec.choices));
  }
  if (spec.kind == FieldKind::IntegerOrAuto && std::holds_alternative<std::string>(value) &&
      std::get<std::string>(value) != "auto")
    throw std::runtime_error(where + ": " + field_name(spec) + " = '" +
                             printable_text(std::get<std::string>(value)) +
                             "' is not valid; valid values: 'auto' or an integer >= 1");
  if (spec.kind == FieldKind::BooleanOrAuto && std::holds_alternative<std::string>(value) &&
      std::get<std::string>(value) != "auto")
    throw std::runtime_error(where + ": " + field_name(spec) + " = '" +
                             printable_text(std::get<std::string>(value)) +
                             "' is not valid; valid values: true, false or 'auto'");
}

FieldValue value_from_toml(const FieldSpec& spec, const toml::node& node,
                           const std::string& where) {
  auto wrong_type = [&]() {
    return std::runtime_error(where + ": " + field_name(spec) + " must be " + kind_name(spec.kind) +
                              ", got " + toml_type_name(node.type()));
  };
  switch (spec.kind) {
    case FieldKind::Integer:
      if (const auto* v = node.as_integer()) return v->get();
      throw wrong_type();
    case FieldKind::Float:
      if (const auto* v = node.as_floating_point()) return v->get();
      if (const auto* v = node.as_integer()) return static_cast<double>(v->get());
      throw wrong_type();
    case FieldKind::Boolean:
      if (const auto* v = node.as_boolean()) return v->get();
      throw wrong_type();
    case FieldKind::String:
    case FieldKind::Choice:
      if (const auto* v = node.as_string()) return v->get();
      throw wrong_type();
    case FieldKind::IntegerOrAuto:
      if (const auto* v = node.as_integer()) return v->get();
      if (const auto* v = node.as_string()) return v->get();
      throw wrong_type();
    case FieldKind::BooleanOrAuto:
      if (const auto* v = node.as_boolean()) return v->get();
      if (const auto* v = node.as_string()) return v->get();
      throw wrong_type();
    case FieldKind::DataSources:
      return job_fields::data_sources_text(job_fields::data_sources_from_toml(node, where));
  }
  throw wrong_type();
}

bool parse_integer(const std::string& text, int64_t* out) {
  const char* end = text.data() + text.size();
  auto result = std::from_chars(text.data(), end, *out);
  return result.ec == std::errc() && result.ptr == end && !text.empty();
}

FieldValue value_from_string(const FieldSpec& spec, const std::string& text,
                             const std::string& where) {
  auto bad = [&]() {
    return std::runtime_error(where + ": " + field_name(spec) + " must be " + kind_name(spec.kind) +
                              ", got '" + printable_text(text) + "'");
  };
  int64_t integer = 0;
  switch (spec.kind) {
    case FieldKind::Integer:
      if (parse_integer(text, &integer)) return integer;
      throw bad();
    case FieldKind::Float: {
      double number = 0;
      const char* end = text.data() + text.size();
      auto result = std::from_chars(text.data(), end, number);
      if (result.ec == std::errc() && result.ptr == end && !text.empty()) return number;
      throw bad();
    }
    case FieldKind::Boolean:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      throw bad();
    case FieldKind::String:
    case FieldKind::Choice:
      // Strings end up in the plan, which holds UTF-8 only (TOML files are
      // UTF-8 already; a command line may be anything).
      if (const std::string problem = utf8_problem(text); !problem.empty())
        throw std::runtime_error(where + ": " + field_name(spec) + ": " + problem +
                                 "; give UTF-8 text");
      return text;
    case FieldKind::IntegerOrAuto:
      if (parse_integer(text, &integer)) return integer;
      return text;
    case FieldKind::BooleanOrAuto:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      return text;
    case FieldKind::DataSources:
      return job_fields::data_sources_text(job_fields::data_sources_from_text(text, where));
  }
  throw bad();
}

std::string location(const std::string& source, const toml::source_region& region) {
  const toml::source_position begin = region.begin;
  if (begin.line == 0) return source;
  return source + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column);
}

// Fills every derived default from what was not set explicitly.
void resolve_defaults(JobConfig& config) {
  ModelConfig& model = config.model;
  const bool llama = model.architecture == schema::Architecture::Llama;
  if (!config.was_set("model.ffn_size")) {
    // 4 d_model (GPT-2) or SwiGLU's 2/3 of it rounded up to a multiple of 256
    // (Llama, Meta's multiple_of), taken only while d_model is within limits:
    // a d_model too large for it is refused by name (validate_job_config),
    // not blamed on the unset ffn_size.
    const bool in_range = model.d_model > 0 && model.d_model <= kMaxModelDimension;
    const int64_t swiglu = (int64_t{8} * model.d_model / 3 + 255) / 256 * 256;
    model.ffn_size = !in_range ? 0 : llama ? static_cast<int>(swiglu) : 4 * model.d_model;
  }
  if (!config.was_set("model.tied_embeddings")) model.tied_embeddings = !llama;
  if (!config.was_set("model.num_kv_heads")) model.num_kv_heads = model.num_heads;
  if (!config.was_set("training.min_learning_rate"))
    config.training.min_learning_rate = config.training.learning_rate / 10;
  if (!config.was_set("training.wsd_decay_steps") &&
      config.training.decay_style == schema::LrDecayStyle::WarmupStableDecay)
    config.training.wsd_decay_steps =
        std::max(1, (config.training.total_steps - config.training.warmup_steps) / 10);
  if (!config.was_set("data.seed")) config.data.seed = config.training.seed;
  if (!config.was_set("data.document_separator"))
    config.data.document_separator =
        config.data.document_mask ? default_document_separator(model.vocab_size) : -1;
  JobConfig explicit_values;
  explicit_values.cluster = config.cluster;
  config.cluster = cluster_preset(config.cluster.preset);
  config.cluster.nccl = explicit_values.cluster.nccl;  // the environment's, not a preset's
  // Re-apply the explicitly set cluster fields on top of the preset.
  for (const FieldSpec& spec : field_table())
    if (spec.section == "cluster" && spec.key != "preset" && config.was_set(spec.dotted()))
      spec.copy(config, explicit_values);
}

}  // namespace

bool option_default_is_derived(const std::string& dotted_key) {
  // What resolve_defaults fills in from other options when a job leaves it unset.
  return dotted_key.rfind("cluster.", 0) == 0 || dotted_key == "model.ffn_size" ||
         dotted_key == "model.tied_embeddings" || dotted_key == "model.num_kv_heads" ||
         dotted_key == "training.min_learning_rate" || dotted_key == "training.wsd_decay_steps" ||
         dotted_key == "data.seed" || dotted_key == "data.document_separator";
}

int default_document_separator(int vocab_size) {
  if (vocab_size >= 50257 && vocab_size <= 50304) return 50256;  // GPT-2's <|endoftext|>
  // <|begin_of_text|>, which llm.c's Llama 3 shards and `paraplan tokenize` put
  // between documents.
  if (vocab_size == 128256) return 128000;
  return -1;
}

std::string JobConfig::task_name() const {
  return was_set("planner.task_name") ? planner.task_name : job.name;
}

void apply_override(toml::table& table, const std::string& dotted_key, const std::string& value,
                    const std::string& source) {
  const std::string where = source + " (override --" + printable_text(dotted_key) + ")";
  const FieldSpec& spec = find_dotted_field(dotted_key, where);
  const FieldValue parsed = value_from_string(spec, value, where);
  check_value(spec, parsed, where);
  toml::node* section = table.get(spec.section);
  if (section == nullptr) section = &table.insert(spec.section, toml::table{}).first->second;
  toml::table* section_table = section->as_table();
  if (section_table == nullptr)
    throw std::runtime_error(where + ": [" + spec.section + "] in the file is not a table");
  if (spec.kind == FieldKind::DataSources)  // stored as the array, not its text
    section_table->insert_or_assign(
        spec.key, job_fields::data_sources_array(
                      job_fields::data_sources_from_text(std::get<std::string>(parsed), where)));
  else
    std::visit([&](const auto& typed) { section_table->insert_or_assign(spec.key, typed); },
               parsed);
}

void apply_override(JobConfig& config, const std::string& dotted_key, const std::string& value) {
  const std::string where = config.source + " (override --" + printable_text(dotted_key) + ")";
  const FieldSpec& spec = find_dotted_field(dotted_key, where);
  const FieldValue parsed = value_from_string(spec, value, where);
  check_value(spec, parsed, where);
  // Edit a copy so a rejected override leaves config as it was.
  JobConfig edited = config;
  spec.set(edited, parsed);
  edited.set_keys.insert(spec.dotted());
  resolve_defaults(edited);
  validate_job_config(edited);
  config = std::move(edited);
}

JobConfig parse_job_config(std::string_view toml_text, const std::string& source,
                           const std::vector<ConfigOverride>& overrides) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& error) {
    const toml::source_position begin = error.source().begin;
    throw std::runtime_error(source + ":" + std::to_string(begin.line) + ":" +
                             std::to_string(begin.column) +
                             ": TOML syntax error: " + printable_text(error.description(), 200));
  }
  for (const ConfigOverride& override_value : overrides)
    apply_override(root, override_value.key, override_value.value, source);

  JobConfig config;
  config.source = source;
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const std::string where = location(source, section_key.source());
    const toml::table* section_table = section_node.as_table();
    bool known = false;
    for (const std::string& name : section_names()) known |= name == section;
    if (!known)
      throw std::runtime_error(where + ": unknown section [" + printable_text(section) +
                               "]; valid sections: " + valid_sections());
    if (section_table == nullptr)
      throw std::runtime_error(where + ": '" + printable_text(section) + "' must be a table ([" +
                               printable_text(section) + "]), got " +
                               toml_type_name(section_node.type()));
    for (auto&& [key, node] : *section_table) {
      const FieldSpec& spec =
          find_field(section, std::string(key.str()), location(source, key.source()));
      const std::string value_where = location(source, node.source());
      const FieldValue value = value_from_toml(spec, node, value_where);
      check_value(spec, value, value_where);
      spec.set(config, value);
      config.set_keys.insert(spec.dotted());
    }
  }
  // NCCL's buffer sizes as this environment sets them, read once per job.
  config.cluster.nccl = nccl_settings_from_environment();
  resolve_defaults(config);
  validate_job_config(config);
  return config;
}

JobConfig load_job_config(const std::string& path, const std::vector<ConfigOverride>& overrides) {
  return parse_job_config(read_bounded_file(path, kJobConfigFile), path, overrides);
}

std::vector<ConfigOverride> parse_override_arguments(const std::vector<std::string>& args,
                                                     std::vector<std::string>* remaining) {
  std::vector<ConfigOverride> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t equals = arg.find('=');
    const std::string name = arg.substr(0, equals);
    if (arg.rfind("--", 0) != 0 || name.find('.') == std::string::npos) {
      if (remaining) remaining->push_back(arg);
      continue;
    }
    ConfigOverride override_value;
    override_value.key = name.substr(2);
    if (equals != std::string::npos) {
      override_value.value = arg.substr(equals + 1);
    } else if (i + 1 < args.size()) {
      override_value.value = args[++i];
    } else {
      throw std::runtime_error("command line: " + arg + " needs a value (" + arg + " VALUE or " +
                               arg + "=VALUE)");
    }
    overrides.push_back(override_value);
  }
  return overrides;
}

}  // namespace paraplan
