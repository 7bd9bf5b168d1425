// partition_constraints.h: [planner] partition_constraints_path, a TOML file of
// per-module constraints on the plan (format in planner/README.md):
//
//   [[constraint]]
//   module = "transformer.h.0"          # required; suffix-matched (module_names.h)
//   recompute = ["none", "selective"]   # recompute modes its blocks may use
//   stage = 0                           # pipeline stage its blocks sit on (-1 = last)
//   tensor_parallel = [1, 2, 4]         # tensor-parallel degrees allowed for the job
//
// A module names blocks (transformer, transformer.h: every block;
// transformer.h.<i> or any submodule of it: block i), the embedding
// (transformer.wte, transformer.wpe: stage 0 only) or the head (transformer.ln_f,
// lm_head: last stage only). recompute must be a contiguous run of
// none < selective < full. Errors name the file, the constraint's index and
// field, and contradictions with the fixed options (tensor_parallel_degree,
// pipeline_nstages, recompute_modules) name both sides.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/job/job_config.h"

namespace paraplan {

struct PartitionConstraint {
  int index = 0;  // 1-based position in the file, for messages
  std::string module;
  std::vector<int> blocks;  // the blocks the module names
  bool embedding = false, head = false;
  std::optional<std::pair<schema::RecomputeMode, schema::RecomputeMode>> recompute;
  std::optional<int> stage;          // -1 = last
  std::vector<int> tensor_parallel;  // empty = any
};

struct PartitionConstraints {
  std::string path;
  std::vector<PartitionConstraint> constraints;
};

// Reads [planner] partition_constraints_path (relative paths are taken from the
// working directory).
PartitionConstraints load_partition_constraints(const JobConfig& config);
PartitionConstraints parse_partition_constraints(const std::string& text, const std::string& path,
                                                 const JobConfig& config);

}  // namespace paraplan
