// plan_report.cc: the search summary, the top-k table and the runners-up's
// reasons (see plan_report.h).
#include "planner/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>
#include <tuple>
#include <vector>

#include "planner/cost/communicator_memory.h"
#include "planner/cost/plan_estimate.h"
#include "planner/cost/profile.h"
#include "planner/plan_report_text.h"
#include "schema/zero_stages.h"

namespace paraplan {
namespace {

using report_text::duration;
using report_text::gigabytes;
using report_text::kBytesPerGigabyte;
using report_text::printf_string;

std::string percent(double ratio) {
  return printf_string("%.1f%%", ratio * 100);
}

// Columns padded to their widest cell.
std::string render_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string text;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    text += line + "\n";
  }
  return text;
}

// The pipeline ranks of a ZeRO-3 plan keeping their parameters gathered.
int ranks_keeping_gathered(const PlanCandidate& c) {
  int keeping = 0;
  for (const StageLayout& stage : c.stages) keeping += stage.keep_parameters_gathered ? 1 : 0;
  return keeping;
}

// "0", "1/1", "2/4": the ZeRO stage and, where it shards, its groups; under
// ZeRO-3 whether the ranks keep their parameters gathered ("3/1 kept",
// "3/1 freed", "3/1 kept 2 of 4"); units of several layers last ("2/1,
// 4 layers/unit").
std::string zero_text(const PlanCandidate& c) {
  const PlanSetting& s = c.setting;
  if (!shards_optimizer_state(s.zero_stage)) return std::to_string(s.zero_stage);
  std::string text = std::to_string(s.zero_stage) + "/" + std::to_string(s.zero_ngroups);
  if (shards_parameters(s.zero_stage)) {
    const int keeping = ranks_keeping_gathered(c), ranks = static_cast<int>(c.stages.size());
    text += keeping == 0 ? " freed"
            : keeping == ranks
                ? " kept"
                : " kept " + std::to_string(keeping) + " of " + std::to_string(ranks);
  }
  if (shards_gradients(s.zero_stage) && s.zero_layers_per_unit > 1)
    text += ", " + std::to_string(s.zero_layers_per_unit) + " layers/unit";
  return text;
}

}  // namespace

std::string mesh_text(const PlanSetting& s) {
  return std::to_string(s.shape.pipeline_stages) + " x " + std::to_string(s.shape.data_parallel) +
         " x " + std::to_string(s.shape.tensor_parallel) +
         (s.shape.context_parallel > 1 ? " cp" + std::to_string(s.shape.context_parallel) : "");
}

std::string mesh_words(const ParallelShape& shape) {
  return "pp " + std::to_string(shape.pipeline_stages) + " x dp " +
         std::to_string(shape.data_parallel) +
         (shape.context_parallel > 1 ? " x cp " + std::to_string(shape.context_parallel) : "") +
         " x tp " + std::to_string(shape.tensor_parallel);
}

namespace {

const StageEstimate& slowest_stage(const PlanEstimate& estimate) {
  size_t slowest = 0;
  for (size_t s = 0; s < estimate.stages.size(); ++s)
    if (estimate.stages[s].slot_seconds() > estimate.stages[slowest].slot_seconds()) slowest = s;
  return estimate.stages[slowest];
}

}  // namespace

std::string recompute_summary(const PlanCandidate& candidate) {
  RecomputeCounts total;
  for (const StageLayout& stage : candidate.stages) {
    const RecomputeCounts counts = count_recompute(stage);
    total.none += counts.none, total.selective += counts.selective, total.full += counts.full;
  }
  if (total.selective == 0 && total.full == 0) return "none";
  std::string text;
  if (total.full > 0) text += "full x" + std::to_string(total.full);
  if (total.selective > 0)
    text += std::string(text.empty() ? "" : ", ") + "selective x" + std::to_string(total.selective);
  return text;
}

std::string why_slower(const PlanCandidate& candidate, const PlanCandidate& best) {
  const PlanEstimate& a = candidate.estimate;
  const PlanEstimate& b = best.estimate;
  const double step = a.prediction.step_seconds, best_step = b.prediction.step_seconds;
  const double slower = (step / best_step - 1) * 100;
  std::string text = slower < 0.05 ? std::string("+<0.1%") : printf_string("+%.1f%%", slower);
  // The step is m x slot + (p - 1) x slot + tail: attribute the difference.
  struct Cause {
    double seconds;
    std::string words;
  };
  const int m = candidate.setting.num_micro_batches, bm = best.setting.num_micro_batches;
  const double work = m * a.slot_seconds, best_work = bm * b.slot_seconds;
  const double bubble = a.pipeline_seconds - work, best_bubble = b.pipeline_seconds - best_work;
  const StageEstimate& slow = slowest_stage(a);
  const StageEstimate& best_slow = slowest_stage(b);
  // What grew most in the slowest stage, per micro-batch scaled to the step.
  const double compute = m * (slow.forward_seconds + slow.backward_seconds),
               best_compute = bm * (best_slow.forward_seconds + best_slow.backward_seconds);
  const auto tp_and_p2p = [](const StageEstimate& stage) {
    return stage.tensor_parallel_seconds + stage.tensor_parallel_wait_seconds +
           stage.context_parallel_seconds + stage.pipeline_p2p_seconds;
  };
  const double comm = m * tp_and_p2p(slow), best_comm = bm * tp_and_p2p(best_slow);
  const bool ring =
      candidate.setting.shape.context_parallel > 1 || best.setting.shape.context_parallel > 1;
  const double gathers = m * slow.parameter_gather_seconds,
               best_gathers = bm * best_slow.parameter_gather_seconds;
  std::string detail =
      compute - best_compute >= comm - best_comm
          ? "compute incl. recompute " + duration(compute) + " vs " + duration(best_compute)
          : (ring ? "TP + CP ring + p2p " : "TP + p2p ") + duration(comm) + " vs " +
                duration(best_comm);
  if (gathers - best_gathers > std::max(compute - best_compute, comm - best_comm))
    detail = "ZeRO-3 parameter gathers " + duration(gathers) + " vs " + duration(best_gathers);
  std::vector<Cause> causes = {
      {work - best_work,
       "slowest stage busy " + duration(work) + " vs " + duration(best_work) + " (" + detail + ")"},
      {bubble - best_bubble, "bubble " + percent(a.prediction.bubble_ratio) + " vs " +
                                 percent(b.prediction.bubble_ratio)},
      {a.tail_seconds - b.tail_seconds, "gradient reduction + optimizer " +
                                            duration(a.tail_seconds) + " vs " +
                                            duration(b.tail_seconds)}};
  std::sort(causes.begin(), causes.end(),
            [](const Cause& x, const Cause& y) { return x.seconds > y.seconds; });
  int named = 0;
  for (const Cause& cause : causes) {
    if (cause.seconds <= 0 || named == 2) break;
    text += (named == 0 ? ": " : "; ") + cause.words;
    ++named;
  }
  if (named == 0) text += ": equal step; ranked after a simpler mesh";
  return text;
}

std::string schedule_comparison(const SearchResult& result) {
  if (result.ranked.empty() || result.best_per_schedule.size() < 2) return "";
  const PlanCandidate& best = result.ranked.front();
  const double best_step = best.estimate.prediction.step_seconds;
  std::string text = "schedule: " + schedule_choice_name(best.setting.schedule) +
                     " won; the best plan of each schedule kind:\n";
  std::vector<std::vector<std::string>> rows = {
      {"schedule", "mesh pp x dp x tp", "micro-batch", "step", "bubble", "peak GB", "vs best"}};
  for (const PlanCandidate& c : result.best_per_schedule) {
    const PlanSetting& s = c.setting;
    const double step = c.estimate.prediction.step_seconds;
    rows.push_back(
        {schedule_choice_name(s.schedule), mesh_text(s),
         std::to_string(s.micro_batch_size) + " x " + std::to_string(s.num_micro_batches),
         duration(step), percent(c.estimate.prediction.bubble_ratio),
         gigabytes(static_cast<double>(c.estimate.peak_memory)),
         s.schedule.kind == best.setting.schedule.kind
             ? "best"
             : printf_string("+%.1f%%", (step / best_step - 1) * 100)});
  }
  return text + render_table(rows);
}

namespace {

// The rejected setting that best says why a ZeRO stage has no plan: one that
// did not fit memory, the most memory-friendly (smallest micro-batch, most
// model parallelism), as explain_no_plan picks; else any.
const SettingRejection* closest_rejection(const SearchResult& result, int zero_stage) {
  const SettingRejection* closest = nullptr;
  const auto key = [](const SettingRejection& r) {
    const PlanSetting& s = r.setting;
    return std::make_tuple(r.kind != RejectionKind::DoesNotFit, s.micro_batch_size,
                           -s.shape.pipeline_stages * s.shape.tensor_parallel,
                           -s.shape.pipeline_stages);
  };
  for (const SettingRejection& rejection : result.rejections)
    if (rejection.setting.zero_stage == zero_stage &&
        (closest == nullptr || key(rejection) < key(*closest)))
      closest = &rejection;
  return closest;
}

// Why no plan of ZeRO stage k made it: nothing fitted, or every setting
// failed a filter.
std::string why_none(const SearchResult& result, int k) {
  const std::string head = "ZeRO " + std::to_string(k) + ": ";
  const SettingRejection* closest = closest_rejection(result, k);
  if (closest == nullptr) return head + "no setting (no mesh with data parallelism to shard)\n";
  const PlanSetting& s = closest->setting;
  return head +
         (closest->kind == RejectionKind::DoesNotFit ? "no plan fits memory"
                                                     : "no plan passes the filters") +
         ", e.g. " + mesh_words(s.shape) + " micro-batch " + std::to_string(s.micro_batch_size) +
         (closest->reason.empty() ? "" : ": " + closest->reason) + "\n";
}

// Why the winner beat `other`, the best plan of another ZeRO stage: the
// winner's own plan (mesh, micro-batching, stages) under that stage either
// does not fit memory or runs slower.
std::string why_winner_beat(const JobConfig& config, const SearchResult& result,
                            const PlanCandidate& other, const MeasuredProfile* profile) {
  const PlanCandidate& winner = result.ranked.front();
  const int k = other.setting.zero_stage;
  const std::string head = "ZeRO " + std::to_string(k) + ": ";
  const std::string its_best = "its best plan is " + why_slower(other, winner);
  PlanCandidate same = winner;
  same.setting.zero_stage = k;
  same.setting.zero_ngroups = shards_optimizer_state(k) ? result.space.zero_ngroups : 1;
  same.setting.zero_layers_per_unit =
      shards_gradients(k) ? std::max(winner.setting.zero_layers_per_unit, 1) : 1;
  const int dp = same.setting.shape.gradient_replicas();
  if (shards_optimizer_state(k) && (dp <= 1 || dp % same.setting.zero_ngroups != 0))
    return head + "shards nothing on the winner's mesh (dp " + std::to_string(dp) + "); " +
           its_best + "\n";
  const double limit = config.planner.consider_mem
                           ? plan_memory_limit_gb(config) * kBytesPerGigabyte
                           : std::numeric_limits<double>::infinity();
  // ZeRO-3: each rank keeps its parameters gathered where that fits, as the
  // search would have it; the other stages gather nothing.
  for (StageLayout& stage : same.stages) stage.keep_parameters_gathered = shards_parameters(k);
  same.estimate = evaluate_plan(config, same.setting, same.stages, profile);
  if (shards_parameters(k)) {
    for (size_t r = 0; r < same.stages.size(); ++r)
      if (static_cast<double>(same.estimate.stages[r].memory.total()) > limit)
        same.stages[r].keep_parameters_gathered = false;
    same.estimate = evaluate_plan(config, same.setting, same.stages, profile);
  }
  if (static_cast<double>(same.estimate.peak_memory) > limit)
    return head + "does not fit memory: the winner's plan needs " +
           gigabytes(static_cast<double>(same.estimate.peak_memory)) + " GB per rank under ZeRO " +
           std::to_string(k) + " (limit " + memory_limit_text(config) + "); " + its_best + "\n";
  if (same.estimate.prediction.step_seconds <= winner.estimate.prediction.step_seconds)
    return head + "the winner's plan runs as fast under ZeRO " + std::to_string(k) +
           "; the lower stage ranks first\n";
  return head + "slower: the winner's plan under ZeRO " + std::to_string(k) + " runs " +
         why_slower(same, winner) + "\n";
}

// "0-3, 5": the pipeline ranks whose keep_parameters_gathered is `kept`.
std::string ranks_text(const PlanCandidate& c, bool kept) {
  std::string text;
  const int p = static_cast<int>(c.stages.size());
  for (int r = 0; r < p; ++r) {
    if (c.stages[r].keep_parameters_gathered != kept) continue;
    int last = r;
    while (last + 1 < p && c.stages[last + 1].keep_parameters_gathered == kept) ++last;
    text += (text.empty() ? "" : ", ") + std::to_string(r) +
            (last > r ? "-" + std::to_string(last) : std::string());
    r = last;
  }
  return text;
}

// Which pipeline ranks of the best ZeRO-3 plan keep their parameters
// gathered (a slot per unit, one all-gather per unit and step) and which
// free them after each read (two slots, an all-gather per read).
std::string kept_gathered_line(const PlanCandidate& c) {
  const std::string head = "ZeRO 3's best plan ";
  const int keeping = ranks_keeping_gathered(c);
  if (keeping == static_cast<int>(c.stages.size()))
    return head + "keeps the parameters gathered on every pipeline rank\n";
  const std::string not_kept = " (keeping them gathered does not fit, or is not faster)\n";
  if (keeping == 0)
    return head + "frees the parameters after each read on every pipeline rank" + not_kept;
  return head + "keeps the parameters gathered on pipeline ranks " + ranks_text(c, true) +
         " and frees them after each read on " + ranks_text(c, false) + not_kept;
}

// Why the best plan's ZeRO-2/3 units hold the layers they do: what their
// collectives expose per block against units of one layer, and what the
// plan would take with those.
std::string zero_unit_line(const JobConfig& config, const PlanCandidate& best,
                           const MeasuredProfile* profile) {
  const PlanSetting& s = best.setting;
  if (!shards_gradients(s.zero_stage)) return "";
  const int k = std::max(s.zero_layers_per_unit, 1);
  const bool fixed = config.planner.zero_layers_per_unit > 0;
  const StageCostModel costs(config, s, profile);
  const std::string one_exposes = duration(costs.zero_unit_seconds_per_block(1)) + " per block";
  if (k == 1 && fixed) return "ZeRO units: one layer each ([planner] zero_layers_per_unit)\n";
  if (k == 1 && costs.zero_unit_seconds_per_block(1) <= 0)
    return "ZeRO units: one layer each; their gathers and reduce-scatters hide behind the "
           "compute\n";
  if (k == 1)
    return "ZeRO units: one layer each; larger ones would not cut what their gathers and "
           "reduce-scatters expose (" +
           one_exposes + ")\n";
  PlanCandidate one = best;
  one.setting.zero_layers_per_unit = 1;
  one.estimate = evaluate_plan(config, one.setting, one.stages, profile);
  return "ZeRO units: " + std::to_string(k) + " layers each" +
         (fixed ? " ([planner] zero_layers_per_unit)" : "") +
         ": their gathers and reduce-scatters expose " +
         duration(costs.zero_unit_seconds_per_block(k)) + " per block against " + one_exposes +
         " with one layer each; step " + duration(best.estimate.prediction.step_seconds) +
         " against " + duration(one.estimate.prediction.step_seconds) + ", peak " +
         gigabytes(static_cast<double>(best.estimate.peak_memory)) + " against " +
         gigabytes(static_cast<double>(one.estimate.peak_memory)) + " GB per rank\n";
}

}  // namespace

std::string zero_stage_comparison(const JobConfig& config, const SearchResult& result,
                                  const MeasuredProfile* profile) {
  if (result.ranked.empty()) return "";
  const PlanCandidate& best = result.ranked.front();
  if (result.space.zero_stages.size() < 2) return zero_unit_line(config, best, profile);
  const double best_step = best.estimate.prediction.step_seconds;
  std::string text = "ZeRO: stage " + std::to_string(best.setting.zero_stage) +
                     " won; the best plan of each ZeRO stage searched:\n";
  std::vector<std::vector<std::string>> rows = {
      {"ZeRO", "mesh pp x dp x tp", "micro-batch", "step", "peak GB per rank", "vs best"}};
  std::string reasons;
  for (int k : result.space.zero_stages) {
    const auto found =
        std::find_if(result.best_per_zero_stage.begin(), result.best_per_zero_stage.end(),
                     [k](const PlanCandidate& c) { return c.setting.zero_stage == k; });
    if (found == result.best_per_zero_stage.end()) {
      rows.push_back({std::to_string(k), "-", "-", "-", "-", "none"});
      reasons += why_none(result, k);
      continue;
    }
    const PlanSetting& s = found->setting;
    const double step = found->estimate.prediction.step_seconds;
    const bool won = k == best.setting.zero_stage;
    rows.push_back(
        {zero_text(*found), mesh_text(s),
         std::to_string(s.micro_batch_size) + " x " + std::to_string(s.num_micro_batches),
         duration(step), gigabytes(static_cast<double>(found->estimate.peak_memory)),
         won ? "best" : printf_string("+%.1f%%", (step / best_step - 1) * 100)});
    if (!won) reasons += why_winner_beat(config, result, *found, profile);
    if (shards_parameters(k)) reasons += kept_gathered_line(*found);
  }
  return text + render_table(rows) + reasons + zero_unit_line(config, best, profile);
}

namespace {

// NCCL's buffers the best plan counts (in its peak): per rank of the
// peak stage, and each communicator of its first rank that has any.
std::string communicator_buffers_line(const JobConfig& config, const PlanCandidate& best) {
  const std::vector<StageEstimate>& stages = best.estimate.stages;
  const int s = best.estimate.peak_memory_stage;
  if (s < 0 || s >= static_cast<int>(stages.size()) || stages[s].memory.communicator_buffers == 0)
    return "";
  const PlanSetting& setting = best.setting;
  schema::CommunicatorMesh mesh;
  mesh.pipeline = setting.shape.pipeline_stages;
  mesh.data = setting.shape.data_parallel;
  mesh.context = setting.shape.context_parallel;
  mesh.tensor = setting.shape.tensor_parallel;
  mesh.zero_groups =
      setting.shape.gradient_replicas() % setting.zero_ngroups == 0 ? setting.zero_ngroups : 1;
  mesh.zero_stage = setting.zero_stage;
  std::string parts;
  for (const CommunicatorBuffers& buffers :
       communicator_buffers(nccl_device_defaults(config.cluster.preset), config.cluster.nccl,
                            setting.layout, mesh, s * mesh.data * mesh.context * mesh.tensor))
    if (buffers.bytes > 0)
      parts += (parts.empty() ? "" : ", ") + buffers.name + " (" + std::to_string(buffers.size) +
               ") " + printf_string("%.0f", static_cast<double>(buffers.bytes) / 1048576) + " MiB";
  return "NCCL communicator buffers (counted in the peak): " +
         gigabytes(static_cast<double>(stages[s].memory.communicator_buffers)) +
         " GB per rank of stage " + std::to_string(s) + ": " + parts + "\n";
}

}  // namespace

std::string format_search_report(const JobConfig& config, const SearchResult& result,
                                 const MeasuredProfile* profile,
                                 const std::vector<std::string>& profile_lines) {
  const SearchStatistics& stats = result.statistics;
  const DeviceLayout& layout = result.space.layout;
  std::string text;
  text += "paraplan plan: " + std::to_string(layout.world_size()) + " devices (" +
          std::to_string(layout.num_nodes) + " x " + std::to_string(layout.devices_per_node) +
          "), " + std::to_string(result.space.meshes.size()) + " meshes, " +
          std::to_string(stats.settings) + " settings: " + std::to_string(stats.solved) +
          " searched (" + std::to_string(stats.pruned_in_search) + " stopped by the top-" +
          std::to_string(config.planner.topk) + " bound), " +
          std::to_string(stats.skipped_by_bound) + " skipped by their lower bound, " +
          std::to_string(result.rejections.size()) + " rejected; " +
          printf_string("%.3f", stats.seconds) + " s, solver " +
          (config.planner.solver == PlannerSolver::IntegerLinearProgramming ? "ilp" : "dp") + "\n";
  text +=
      "time model: " +
      (profile ? "measured profile " + profile->path() + " (" + profile->device() + ")"
               : std::string("analytic (GEMMs by tiles and waves on ") +
                     std::to_string(config.cluster.compute_units) + " units at " +
                     printf_string("%.3g", config.cluster.peak_flops(config.model.dtype) / 1e12) +
                     " TFLOP/s; memory-bound work at " +
                     printf_string("%g", config.cluster.memory_bandwidth_gbps) + " GB/s)") +
      "; memory limit " + memory_limit_text(config) +
      (config.planner.consider_mem ? "" : " (not enforced: consider_mem = false)") + "\n";
  for (const std::string& line : profile_lines) text += line + "\n";
  if (!config.planner.is_train)
    text +=
        "is_train = false: memory and time are for inference (forward only); do not train "
        "with this plan\n";
  std::vector<std::vector<std::string>> rows = {{"#", "mesh pp x dp x tp", "micro-batch", "ZeRO",
                                                 "schedule", "recompute", "step", "tokens/s", "MFU",
                                                 "peak GB per stage", "why it lost"}};
  for (size_t i = 0; i < result.ranked.size(); ++i) {
    const PlanCandidate& c = result.ranked[i];
    const PlanSetting& s = c.setting;
    std::string memory;
    const std::vector<StageEstimate>& stages = c.estimate.stages;
    if (stages.size() <= 8) {
      for (const StageEstimate& stage : stages)
        memory.append(memory.empty() ? "" : " ")
            .append(gigabytes(static_cast<double>(stage.memory.total())));
    } else {
      size_t low = 0;
      for (size_t k = 0; k < stages.size(); ++k)
        if (stages[k].memory.total() < stages[low].memory.total()) low = k;
      memory = "max " + gigabytes(static_cast<double>(c.estimate.peak_memory)) + " (stage " +
               std::to_string(c.estimate.peak_memory_stage) + "), min " +
               gigabytes(static_cast<double>(stages[low].memory.total())) + " (stage " +
               std::to_string(low) + ")";
    }
    rows.push_back(
        {std::to_string(i + 1),
         std::to_string(s.shape.pipeline_stages) + " x " + std::to_string(s.shape.data_parallel) +
             " x " + std::to_string(s.shape.tensor_parallel) +
             (s.shape.sequence_parallel ? " sp" : "") +
             (s.shape.context_parallel > 1 ? " cp" + std::to_string(s.shape.context_parallel) : ""),
         std::to_string(s.micro_batch_size) + " x " + std::to_string(s.num_micro_batches),
         zero_text(c), schedule_choice_name(s.schedule), recompute_summary(c),
         duration(c.estimate.prediction.step_seconds),
         printf_string("%.0f", c.estimate.prediction.tokens_per_second),
         percent(c.estimate.prediction.mfu), memory,
         i == 0 ? "best" : why_slower(c, result.ranked.front())});
  }
  text += render_table(rows);
  if (!result.ranked.empty()) text += communicator_buffers_line(config, result.ranked.front());
  text += schedule_comparison(result);
  text += zero_stage_comparison(config, result, profile);
  text += context_parallel_comparison(result);
  for (const std::string& line : result.log) text += "  " + line + "\n";
  // Rejected settings, counted by reason, with one example each.
  const char* names[] = {"do not fit memory",
                         "fail max_pipeline_unbalance_ratio",
                         "fail max_pipeline_bubble_ratio",
                         "have no valid stage boundaries",
                         "have zero_ngroups not dividing dp",
                         "cannot split the global batch",
                         "cannot run the fixed pipeline_scheduler"};
  for (int kind = 0; kind < static_cast<int>(std::size(names)); ++kind) {
    int count = 0;
    const SettingRejection* example = nullptr;
    for (const SettingRejection& rejection : result.rejections)
      if (static_cast<int>(rejection.kind) == kind) {
        ++count;
        if (example == nullptr) example = &rejection;
      }
    if (count == 0) continue;
    const PlanSetting& s = example->setting;
    text += std::to_string(count) + " setting(s) " + names[kind] + ", e.g. " + mesh_words(s.shape) +
            " micro-batch " + std::to_string(s.micro_batch_size) +
            (example->reason.empty() ? "" : ": " + example->reason) + "\n";
  }
  return text;
}

}  // namespace paraplan
