// job_config_test_support.h: the minimal job and helpers job/'s tests share.
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

}  // namespace paraplan::job_config_test
