// partition_constraints_fuzzer.cc: the partition-constraints TOML file
// (planner/job/partition_constraints.h) parsed against a fixed 8-device,
// 8-layer job, then applied to that job's search space.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "planner/job/job_config.h"
#include "planner/job/partition_constraints.h"
#include "planner/search/search_space.h"

namespace {

const paraplan::JobConfig& job() {
  static const paraplan::JobConfig config = paraplan::parse_job_config(R"([model]
seq_len = 64
num_layers = 8
d_model = 128
num_heads = 8
[training]
global_batch_size = 16
total_steps = 10
[planner]
world_size = 8
recompute_modules = "transformer.h.0"
)",
                                                                       "job.toml");
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::refused_clearly("constraints.toml", [&] {
    const PartitionConstraints constraints =
        parse_partition_constraints(text, "constraints.toml", job());
    SearchSpace space = resolve_search_space(job());
    std::vector<int> allowed_tensor_parallel;
    apply_partition_constraints(job(), constraints, space, allowed_tensor_parallel);
  });
  return 0;
}
