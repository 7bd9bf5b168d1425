// profile_report.h: what the plan report says about the measured profile: its
// provenance, how many of the settings considered had measured compute (and
// which tensor-parallel x micro-batch shapes were missing), which collectives
// were measured and which analytic, the optimizer and GEMM entries, process
// counts that differ from the job's, and why a profile file that exists was not
// used (another device, a foreign backend, other model shapes, re_profile).
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "planner/cost/profile.h"
#include "planner/cost/stage_cost.h"

namespace paraplan {

// The report's profile lines for the settings the search considered (or the
// one setting of a reused plan). Computed once per plan_job, single-threaded.
std::vector<std::string> describe_profile_use(const JobConfig& config, const ProfileLoad& load,
                                              const std::vector<PlanSetting>& settings);

// (tensor parallel, micro-batch size) pairs, compactly: "tp 1, 2 x micro-batch
// 1, 2, 4; tp 4 x micro-batch 1" (degrees with the same sizes share a group).
std::string format_shapes(const std::set<std::pair<int, int>>& shapes);

}  // namespace paraplan
