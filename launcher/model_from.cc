// model_from.cc: with_model_from (model_from.h).
#include "launcher/model_from.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "common/bounded_file.h"
#include "common/json_fields.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/model/architecture.h"

namespace paraplan {
namespace {

namespace fs = std::filesystem;

std::string boolean(bool value) {
  return value ? "true" : "false";
}

// The [model] keys that say what config says.
std::vector<ConfigOverride> model_keys(const TransformerConfig& config) {
  std::vector<ConfigOverride> keys = {
      {"model.architecture", architecture_name(config.architecture)},
      {"model.vocab_size", std::to_string(config.vocab_size)},
      {"model.num_layers", std::to_string(config.num_layers)},
      {"model.d_model", std::to_string(config.d_model)},
      {"model.num_heads", std::to_string(config.num_heads)},
      {"model.ffn_size", std::to_string(config.ffn_size)},
      {"model.tied_embeddings", boolean(config.tied_embeddings)},
      {"model.init_std", short_decimal_text(config.init_std)}};
  switch (config.architecture) {
    case Architecture::kGpt2:
      keys.push_back({"model.layernorm_epsilon", short_decimal_text(config.norm_epsilon)});
      break;
    case Architecture::kLlama: {
      const RopeScaling& scaling = config.rope_scaling;
      keys.insert(keys.end(), {{"model.num_kv_heads", std::to_string(config.kv_heads())},
                               {"model.rms_norm_eps", short_decimal_text(config.norm_epsilon)},
                               {"model.rope_theta", short_decimal_text(config.rope_theta)},
                               {"model.qkv_bias", boolean(config.qkv_bias)}});
      if (scaling.factor > 0)
        keys.insert(keys.end(),
                    {{"model.rope_scaling_factor", short_decimal_text(scaling.factor)},
                     {"model.rope_low_freq_factor", short_decimal_text(scaling.low_freq_factor)},
                     {"model.rope_high_freq_factor", short_decimal_text(scaling.high_freq_factor)},
                     {"model.rope_original_max_positions",
                      std::to_string(scaling.original_max_positions)}});
      break;
    }
  }
  return keys;
}

// The job's seq_len and where it comes from: the job file, or the command
// line that overrides it.
struct JobSeqLen {
  std::optional<int64_t> value;
  std::string where;
};

// The job file's [model] table (empty without one), or nullopt when the file
// does not read or parse: the planner's reader then says why, as it does
// without --model-from.
std::optional<toml::table> job_model_table(const std::string& job_path) {
  try {
    toml::table job = toml::parse(read_bounded_file(job_path, kJobConfigFile), job_path);
    const toml::table* model = job["model"].as_table();
    return model != nullptr ? *model : toml::table{};
  } catch (const toml::parse_error&) {
  } catch (const std::runtime_error&) {
  }
  return std::nullopt;
}

// Refuses a [model] key beside the model's own, from the job file or the
// command line; returns the job's seq_len (its value, if it gives one), or
// nullopt where the job's own reader must speak first (a file that does not
// parse, a seq_len that is no integer).
std::optional<JobSeqLen> job_seq_len(const std::string& job_path, const std::string& source,
                                     const std::vector<ConfigOverride>& overrides) {
  const std::optional<toml::table> model = job_model_table(job_path);
  if (!model) return std::nullopt;
  const auto refuse = [&](const std::string& where, const std::string& key) {
    throw std::runtime_error(where + ": [model] " + key + " is set, but with --model-from the " +
                             "model is " + source + "'s: remove it (the job keeps seq_len and " +
                             "dtype)");
  };
  JobSeqLen seq_len{std::nullopt, job_path};
  for (const auto& [key, value] : *model)
    if (key.str() != "seq_len" && key.str() != "dtype") refuse(job_path, std::string(key.str()));
  if (const toml::node* node = model->get("seq_len")) {
    if (!node->is_integer()) return std::nullopt;
    seq_len.value = node->value<int64_t>();
  }
  for (const ConfigOverride& override_value : overrides) {
    if (override_value.key.rfind("model.", 0) != 0) continue;
    const std::string key = override_value.key.substr(6);
    const std::string where = "command line (--" + override_value.key + ")";
    if (key != "seq_len" && key != "dtype") refuse(where, key);
    if (key != "seq_len") continue;
    int64_t value = 0;
    const std::string& text = override_value.value;
    const auto parsed = std::from_chars(text.data(), text.data() + text.size(), value);
    if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size()) return std::nullopt;
    seq_len = {value, where};
  }
  return seq_len;
}

// The seq_len key the plan takes, if the job does not give it, after
// checking the job's against the model's positions.
std::optional<ConfigOverride> seq_len_key(const TransformerConfig& config, const JobSeqLen& job,
                                          const std::string& source) {
  const std::optional<int64_t>& seq_len = job.value;
  const std::string positions = std::to_string(config.seq_len);
  switch (config.architecture) {
    case Architecture::kGpt2:
      // Learned positions: the table is n_positions rows.
      if (!seq_len) return ConfigOverride{"model.seq_len", positions};
      if (*seq_len != config.seq_len)
        throw std::runtime_error(job.where + ": [model] seq_len is " + std::to_string(*seq_len) +
                                 " but " + source + " is GPT-2 with n_positions " + positions +
                                 ", its learned positions: remove seq_len or set " + positions);
      return std::nullopt;
    case Architecture::kLlama: {
      int64_t most = config.seq_len;
      std::string why = "max_position_embeddings " + positions;
      if (config.attention_window > 0 && config.attention_window < most) {
        most = config.attention_window;
        why += " and sliding_window " + std::to_string(most) +
               " (paraplan attends over the whole sequence)";
      }
      if (!seq_len)
        throw std::runtime_error(job.where + ": [model] seq_len is required with --model-from: " +
                                 "the training context, at most " + std::to_string(most) + " (" +
                                 source + ": " + why + ")");
      if (*seq_len > most)
        throw std::runtime_error(job.where + ": [model] seq_len " + std::to_string(*seq_len) +
                                 " is longer than " + source + " allows: at most " +
                                 std::to_string(most) + " (" + why + ")");
      return std::nullopt;
    }
  }
  throw std::logic_error("seq_len_key: unknown architecture");
}

}  // namespace

std::vector<ConfigOverride> with_model_from(const std::string& model_dir,
                                            const std::string& job_path,
                                            const std::vector<ConfigOverride>& overrides) {
  if (model_dir.empty()) return overrides;
  // A model directory (config.json is all it needs to hold yet), its
  // config.json, or a paraplan checkpoint directory (its `latest` step).
  fs::path directory = model_dir;
  if (fs::is_regular_file(directory / "latest")) directory = resolve_checkpoint(model_dir);
  const fs::path file = fs::is_directory(directory) ? directory / "config.json" : directory;
  const std::string source = file.string();
  const TransformerConfig config = parse_checkpoint_config(
      read_bounded_file(source, kCheckpointJsonFile), "--model-from " + source);
  std::vector<ConfigOverride> result = model_keys(config);
  if (const std::optional<JobSeqLen> seq_len = job_seq_len(job_path, source, overrides))
    if (const auto key = seq_len_key(config, *seq_len, source)) result.push_back(*key);
  result.insert(result.end(), overrides.begin(), overrides.end());
  return result;
}

}  // namespace paraplan
