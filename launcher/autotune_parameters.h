// autotune_parameters.h: the trial parameters of `paraplan autotune` (the
// autotuning principle's combinatorial search): job keys beyond the mesh, the
// ZeRO stage and the micro-batch, such as the communication bucket sizes
// (DeepSpeed's reduce_bucket_size, allgather_bucket_size), measured in a small
// grid around the best setting the micro-batch and ZeRO search found. Each
// parameter is one entry: its override key, the ZeRO stages and meshes it
// matters on, and its candidate values with the pruning rules that skip
// known-bad or equivalent values before anything runs, each with its reason.
// Pure: nothing here plans or runs anything.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/job/job_config.h"
#include "schema/plan_io.h"

namespace paraplan {

// The setting a grid is built around, as its plan says.
struct TrialContext {
  int zero_stage = 0;
  int gradient_replicas = 1;  // ranks each gradient is reduced over (data x context)
  // Gradient elements of the pipeline rank holding the most (all its chunks);
  // 0 when not known (then no rule depends on it).
  int64_t stage_gradient_elements = 0;
  // ZeRO-2 and 3: the plan's layers per unit, and the most layers a model
  // chunk holds (0 when not known).
  int zero_layers_per_unit = 1;
  int chunk_layers = 0;
};

// One candidate value: measured, or skipped before running with why.
struct TrialValue {
  int64_t value = 0;
  std::string skipped;  // "" when it is to be measured
};

struct TrialParameter {
  std::string key;                    // the job key overridden: "training.gradient_bucket_size"
  std::string column;                 // its column in the summary table: "bucket"
  std::string meaning;                // the table legend's line
  std::vector<int> zero_stages;       // the ZeRO stages it matters under
  bool needs_gradient_group = false;  // only where a gradient is reduced over > 1 ranks
  int64_t job_value = 0;              // the job's own value: every other experiment's
  // The candidates around a context, the job's value first (never skipped).
  std::function<std::vector<TrialValue>(int64_t job_value, const TrialContext&)> candidates;
};

// Why the parameter does not matter to a setting like context; "" when it does.
std::string not_applicable(const TrialParameter& parameter, const TrialContext& context);

// [training] gradient_bucket_size (elements per gradient bucket, 0: one bucket
// reduced after backward), bucketed under ZeRO-0 and ZeRO-1 only, and only
// where the data-parallel reduction exists. Candidates: the job's value, 0,
// and a base size with a quarter and four times it; the base is the job's
// value where it cuts the largest stage into buckets, else a quarter of that
// stage (four buckets). Pruned: a size at least the stage's elements (one
// bucket, as 0), one giving more than kMaxGradientBuckets buckets a step (each
// a collective paying its latency), duplicates.
inline constexpr int64_t kMaxGradientBuckets = 64;
std::vector<TrialValue> gradient_bucket_candidates(int64_t job_value, const TrialContext& context);
TrialParameter gradient_bucket_parameter(int64_t job_value);

// [planner] zero_layers_per_unit (ZeRO-2 and 3's units: layers gathered and
// reduce-scattered as one; 0: the planner's choice), under ZeRO-2 and 3
// only, where a gradient has a data-parallel group. Candidates: the job's
// value, then 1, 2 and 4 layers. Pruned: the size the base plan runs (the
// planner's choice where the job leaves it), a size at least the largest
// chunk's layers where a smaller one is too (both one unit per chunk),
// duplicates.
std::vector<TrialValue> zero_unit_candidates(int64_t job_value, const TrialContext& context);
TrialParameter zero_unit_parameter(int64_t job_value);

// Every trial parameter, with the job's values. A new one is one more entry here.
std::vector<TrialParameter> trial_parameters(const JobConfig& config);

// One point of the grid: a value per parameter (in list order).
struct TrialCombination {
  std::vector<int64_t> values;
  std::string skipped;  // why it is not run; "" when it is
};

// The grid around context, the base setting (every job value) not in it: the
// parameters that apply vary over their measured values (the others keep the
// job's), each value skipped by a rule listed once with its reason; past
// max_runs the remaining combinations are skipped as beyond the budget.
std::vector<TrialCombination> trial_grid(const std::vector<TrialParameter>& parameters,
                                         const TrialContext& context, int max_runs);

// "bucket=8768": each parameter's column and value, joined by ", ", those
// that do not apply to context (where given) left out.
std::string describe_values(const std::vector<TrialParameter>& parameters,
                            const std::vector<int64_t>& values,
                            const TrialContext* context = nullptr);

// A plan's context: its ZeRO stage and units, gradient group, the largest
// pipeline rank's gradient elements (model counts of the chunks each rank
// holds) and the largest chunk's layers.
TrialContext plan_context(const schema::Plan& plan, const JobConfig& config);

}  // namespace paraplan
