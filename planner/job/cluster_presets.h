// cluster_presets.h: [cluster] preset = "cpu" | "a100-80g" | "h100-sxm" |
// "h200": each preset's figures (job_config.h's ClusterConfig; the member
// defaults are the cpu preset), which explicitly set fields then override.
#pragma once

#include <string>

#include "planner/job/job_config.h"

namespace paraplan {

// The preset's figures; an unknown name gives the cpu preset's (the job
// config's validation refuses unknown names first).
ClusterConfig cluster_preset(const std::string& name);

}  // namespace paraplan
