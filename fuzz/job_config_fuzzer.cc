// job_config_fuzzer.cc: job.toml (planner/job/job_config.h): TOML parsing, every
// field's type and range, the derived defaults and the cross-field checks,
// then the search space the planner derives from it (meshes, micro-batch
// sizes, recompute and pivots), where sizes meet the plan limits.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_support.h"
#include "planner/job/job_config.h"
#include "planner/search/search_space.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::refused_clearly("job.toml", [&] {
    JobConfig config = parse_job_config(text, "job.toml");
    (void)job_config_options(config);
    // The constraints file has its own target; this one reads no files.
    config.planner.partition_constraints_path.clear();
    const SearchSpace space = resolve_search_space(config);
    for (const ParallelShape& mesh : space.meshes)
      (void)micro_batch_sizes(space, config, mesh.data_parallel);
  });
  return 0;
}
