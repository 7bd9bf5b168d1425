// planner.cc: plan_job(), the front door: load or search, write, report.
#include "planner/planner.h"

#include <sstream>
#include <stdexcept>

#include "planner/cost/profile.h"
#include "planner/plan_report.h"
#include "planner/plan_reuse.h"
#include "planner/plan_writer.h"
#include "planner/profile_report.h"
#include "planner/search/plan_search.h"
#include "schema/plan_io.h"

namespace paraplan {

std::string optimizer_state_note(const JobConfig& config) {
  const bool bf16 = config.model.dtype == schema::DType::BFloat16;
  const double runtime_coef = bf16 ? 6 : 2;
  if (config.planner.opt_resident_coef == runtime_coef) return "";
  std::ostringstream note;
  note << "note: planner.opt_resident_coef is " << config.planner.opt_resident_coef
       << ", but for model.dtype " << (bf16 ? "bfloat16" : "float32") << " paraplan's AdamW keeps "
       << (bf16 ? "fp32 master weights and two fp32 moments (6 x the bf16 weights)"
                : "two fp32 moments (2 x the fp32 weights)")
       << "; set planner.opt_resident_coef = " << runtime_coef
       << " for memory predictions that match the run\n";
  return note.str();
}

std::string memory_limit_note(const JobConfig& config) {
  const double device_gb = config.cluster.device_memory_gb - config.cluster.reserved_memory_gb;
  if (config.was_set("planner.memory_constraint") ||
      config.planner.memory_constraint >= 0.5 * device_gb)
    return "";
  std::ostringstream note;
  note << "note: planner.memory_constraint is AutoDist's default "
       << config.planner.memory_constraint << " GB, less than half of the " << device_gb << " GB a "
       << config.cluster.preset << " device offers (device_memory_gb "
       << config.cluster.device_memory_gb << " less reserved_memory_gb "
       << config.cluster.reserved_memory_gb << "): plans keep to "
       << config.planner.memory_constraint
       << " GB per device, with more recompute and smaller micro-batches than the device needs; "
          "set planner.memory_constraint = "
       << device_gb << " to plan for the whole device\n";
  return note.str();
}

SearchResult search_job(const JobConfig& job) {
  validate_job_config(job);
  const ProfileLoad profile = load_profile(job);
  const MeasuredProfile* profile_pointer = profile.profile ? &*profile.profile : nullptr;
  return search_plans(with_measured_hardware(job, profile_pointer), profile_pointer);
}

PlanOutcome plan_job(const JobConfig& job) {
  validate_job_config(job);
  const ProfileLoad profile = load_profile(job);
  const MeasuredProfile* profile_pointer = profile.profile ? &*profile.profile : nullptr;
  // The `cpu` preset's peak and bandwidth as this machine measured them.
  const JobConfig config = with_measured_hardware(job, profile_pointer);
  PlanOutcome outcome;
  if (!config.planner.load_plan_path.empty()) {
    ReusedPlan reused = reuse_plan(config, profile_pointer);
    outcome.plan = std::move(reused.plan);
    outcome.report = optimizer_state_note(config) + memory_limit_note(config) +
                     format_reuse_report(config, reused);
    for (const std::string& line :
         describe_profile_use(config, profile, {reused.candidate.setting}))
      outcome.report += line + "\n";
    outcome.differences = std::move(reused.differences);
    outcome.reused = true;
    if (!config.planner.save_plan_path.empty())
      write_plan(config.planner.save_plan_path, outcome.plan.data(), outcome.plan.size());
    return outcome;
  }
  SearchResult result = search_plans(config, profile_pointer);
  outcome.plan = serialize_plan(config, result.ranked.front(), profile_pointer);
  // The plan goes through the same door the runtime uses.
  load_plan_from_bytes("planned", outcome.plan);
  outcome.report = optimizer_state_note(config) + memory_limit_note(config) +
                   format_search_report(config, result, profile_pointer,
                                        describe_profile_use(config, profile, result.settings));
  if (!config.planner.save_plan_path.empty())
    write_plan(config.planner.save_plan_path, outcome.plan.data(), outcome.plan.size());
  return outcome;
}

}  // namespace paraplan
