// plan_reuse.h: [planner] load_plan_path, reusing a saved plan instead of
// searching.
//
// The plan is loaded through load_plan (verified and validated), then checked
// against the current job: every model, training, cluster and option value that
// differs from what the plan was made with is named ("model.d_model: plan 768,
// now 1024"). Differences that make the plan inapplicable are an error naming
// them: another block count or world size, a tensor-parallel degree that no
// longer divides the model, a batch the mesh no longer splits, a stage that no
// longer fits memory_constraint. Otherwise the plan's decisions (mesh, stages,
// recompute, micro-batching, ZeRO, schedule kind) are kept and re-estimated under
// the current model and cluster; when nothing changed the loaded bytes are
// returned unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/job/job_config.h"
#include "planner/plan_writer.h"

namespace paraplan {

class MeasuredProfile;

struct ReusedPlan {
  std::vector<uint8_t> plan;             // what plan_job returns
  std::vector<std::string> differences;  // "field: plan X, now Y"
  PlanCandidate candidate;               // the plan's decisions, re-estimated
  double loaded_step_seconds = 0;        // the loaded plan's own prediction
  bool unchanged = false;                // the loaded bytes are returned as they were
};

ReusedPlan reuse_plan(const JobConfig& config, const MeasuredProfile* profile = nullptr);

// The text plan_job reports for a reused plan.
std::string format_reuse_report(const JobConfig& config, const ReusedPlan& reused);

}  // namespace paraplan
