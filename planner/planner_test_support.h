// planner_test_support.h: job fixtures shared by the planner's tests.
#pragma once

#include <vector>

#include "planner/job/job_config.h"

namespace paraplan::test_jobs {

// A GPT-2-small-like model on a node of 8 CPU "devices", small enough to search fast.
inline constexpr const char* kEightDeviceJob = R"(
[model]
seq_len = 128
num_layers = 8
d_model = 256
num_heads = 8
vocab_size = 512
[training]
global_batch_size = 16
total_steps = 100
[planner]
world_size = 8
)";

inline JobConfig eight_device_job(const std::vector<ConfigOverride>& overrides = {}) {
  return parse_job_config(kEightDeviceJob, "job.toml", overrides);
}

}  // namespace paraplan::test_jobs
