// job_config_test_support.h: the minimal job and helpers job/'s tests share,
// and the GPT-3 175B job the cost and search tests plan.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "planner/job/job_config.h"

namespace paraplan::job_config_test {

inline constexpr const char* kMinimal = R"(
[model]
seq_len = 64
num_layers = 2
d_model = 64
num_heads = 4

[training]
global_batch_size = 8
total_steps = 100
)";

// The message of the runtime_error that parsing text throws ("" if none).
inline std::string parse_error(const std::string& text,
                               const std::vector<ConfigOverride>& overrides = {}) {
  try {
    parse_job_config(text, "job.toml", overrides);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "";
}

// kMinimal plus extra: lines for [model] or [training] go into those tables (TOML
// forbids reopening them), anything else is appended.
inline std::string with(const std::string& extra) {
  std::string text = kMinimal;
  for (const char* section : {"[model]\n", "[training]\n"}) {
    if (extra.rfind(section, 0) != 0) continue;
    const size_t at = text.find(section) + std::string(section).size();
    const std::string rest = extra.substr(std::string(section).size());
    const size_t next = rest.find('[');
    text.insert(at, rest.substr(0, next));
    if (next != std::string::npos) text += rest.substr(next);
    return text;
  }
  return text + extra;
}

// GPT-3 175B in bf16 on 128 nodes of 8 A100s (the cost and search tests'
// large job), plus `extra` overrides.
inline JobConfig gpt3_175b(const std::vector<ConfigOverride>& extra = {}) {
  std::vector<ConfigOverride> overrides = {{"model.num_layers", "96"},
                                           {"model.d_model", "12288"},
                                           {"model.num_heads", "96"},
                                           {"model.seq_len", "2048"},
                                           {"model.vocab_size", "51200"},
                                           {"model.dtype", "bfloat16"},
                                           {"training.global_batch_size", "1536"},
                                           {"training.total_steps", "10"},
                                           {"cluster.preset", "a100-80g"},
                                           {"cluster.num_nodes", "128"},
                                           {"planner.opt_resident_coef", "6"}};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return parse_job_config("", "gpt3.toml", overrides);
}

}  // namespace paraplan::job_config_test
