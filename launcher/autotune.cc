// autotune.cc: ranked settings, micro-batch binary search with plateau
// detection, progressive ZeRO, every experiment a real replay (autotune.h).
#include "launcher/autotune.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "common/atomic_file.h"
#include "launcher/autotune_trial.h"
#include "launcher/launch.h"
#include "planner/cost/profile.h"
#include "planner/planner.h"
#include "planner/search/plan_search.h"
#include "schema/plan_io.h"

namespace paraplan {

namespace {

using nlohmann::json;

struct Trial {
  ParallelShape mesh;
  int zero = 0, micro_batch = 0;
  std::string plan_path;
  double predicted_seconds = 0, predicted_peak_bytes = 0;
  std::string pruned;  // the memory model's reason, when it was not run
  std::optional<ExperimentOutcome> outcome;
  double measured_seconds = 0, measured_peak_bytes = 0;
  bool runs() const { return outcome && outcome->status == ExperimentStatus::kMeasured; }
};

class Tuner {
 public:
  Tuner(const AutotuneOptions& options, std::vector<ConfigOverride> overrides)
      : options_(options), overrides_(std::move(overrides)) {}

  // Plans (cheap) and, unless the memory model refuses it, replays one setting.
  // The setting planned (once; cheap), its plan file written.
  Trial& planned(const ParallelShape& mesh, int zero, int micro_batch) {
    const auto key = std::make_tuple(mesh.pipeline_stages, mesh.data_parallel, mesh.tensor_parallel,
                                     zero, micro_batch);
    auto found = trials_.find(key);
    if (found != trials_.end()) return *found->second;
    order_.push_back(std::make_unique<Trial>());
    Trial& t = *order_.back();
    trials_[key] = &t;
    t.mesh = mesh, t.zero = zero, t.micro_batch = micro_batch;
    plan(t);
    return t;
  }

  // Planned and, unless the memory model refuses it, replayed (once).
  Trial& trial(const ParallelShape& mesh, int zero, int micro_batch) {
    Trial& t = planned(mesh, zero, micro_batch);
    if (t.pruned.empty() && !t.outcome) measure(t);
    return t;
  }

  // Planned only: is the setting within the memory model?
  bool fits_model(const ParallelShape& mesh, int zero, int micro_batch, double* predicted) {
    const Trial& t = planned(mesh, zero, micro_batch);
    if (predicted) *predicted = t.predicted_seconds;
    return t.pruned.empty();
  }

  // A trial already run, else null (nothing is run).
  Trial* find(const ParallelShape& mesh, int zero, int micro_batch) {
    auto found = trials_.find(std::make_tuple(mesh.pipeline_stages, mesh.data_parallel,
                                              mesh.tensor_parallel, zero, micro_batch));
    return found == trials_.end() || !found->second->outcome ? nullptr : found->second;
  }

  // The experiments run, in the order they ran.
  const std::vector<Trial*>& experiments() const { return run_order_; }
  std::vector<std::string>& notes() { return notes_; }

 private:
  std::string stem(const Trial& t) const {
    return options_.work_dir + "/pp" + std::to_string(t.mesh.pipeline_stages) + "-dp" +
           std::to_string(t.mesh.data_parallel) + "-tp" + std::to_string(t.mesh.tensor_parallel) +
           "-zero" + std::to_string(t.zero) + "-mb" + std::to_string(t.micro_batch);
  }

  void plan(Trial& t) {
    std::vector<ConfigOverride> fixed = overrides_;
    fixed.push_back({"planner.pipeline_nstages", std::to_string(t.mesh.pipeline_stages)});
    fixed.push_back({"planner.data_parallel_degree", std::to_string(t.mesh.data_parallel)});
    fixed.push_back({"planner.tensor_parallel_degree", std::to_string(t.mesh.tensor_parallel)});
    fixed.push_back({"planner.zero_stage", std::to_string(t.zero)});
    fixed.push_back({"training.micro_batch_size", std::to_string(t.micro_batch)});
    fixed.push_back({"planner.load_plan_path", ""});
    fixed.push_back({"planner.save_plan_path", ""});
    try {
      const PlanOutcome outcome = plan_job(load_job_config(options_.config, fixed));
      t.plan_path = stem(t) + ".pplan";
      write_plan(t.plan_path, outcome.plan.data(), outcome.plan.size());
      const LoadedPlan loaded = load_plan(t.plan_path);
      const schema::Predictions* p = loaded.plan().predictions();
      t.predicted_seconds = p ? p->step_seconds() : 0;
      if (p && p->stages())
        for (const schema::StagePrediction* stage : *p->stages())
          if (stage->memory() != nullptr)  // required by validation; checked all the same
            t.predicted_peak_bytes =
                std::max(t.predicted_peak_bytes, static_cast<double>(stage->memory()->total()));
    } catch (const std::exception& error) {
      t.pruned = error.what();
    }
  }

  void measure(Trial& t) {
    const std::string report = stem(t) + ".json";
    std::filesystem::remove(report);
    const std::vector<std::string> command = {this_executable(),
                                              "launch",
                                              "--plan",
                                              t.plan_path,
                                              "--mpirun",
                                              options_.mpirun,
                                              "--",
                                              "replay",
                                              "--steps",
                                              std::to_string(options_.steps),
                                              "--warmup",
                                              std::to_string(options_.warmup),
                                              "--backend",
                                              options_.backend,
                                              "--report",
                                              report};
    run_order_.push_back(&t);
    t.outcome = run_experiment(command, stem(t) + ".log", options_.experiment_timeout);
    if (t.runs()) {
      std::ifstream file(report);
      const json r = json::parse(file, nullptr, false);
      if (r.is_discarded() || !r.contains("step_seconds_measured")) {
        t.outcome->status = ExperimentStatus::kFailed;
        t.outcome->message = "no readable report at " + report;
        return;
      }
      t.measured_seconds = r["step_seconds_measured"].get<double>();
      t.measured_peak_bytes = r["peak_memory_bytes"]["measured"].get<double>();
    }
    std::printf("  %-18s ZeRO-%d micro-batch %3d: %s", mesh_name(t.mesh).c_str(), t.zero,
                t.micro_batch, experiment_status_name(t.outcome->status));
    if (t.runs())
      std::printf(" %.4f s/step (predicted %.4f)", t.measured_seconds, t.predicted_seconds);
    else
      std::printf(" (%s)", t.outcome->message.c_str());
    std::printf("\n");
    std::fflush(stdout);
  }

  const AutotuneOptions& options_;
  std::vector<ConfigOverride> overrides_;
  std::map<std::tuple<int, int, int, int, int>, Trial*> trials_;
  std::vector<std::unique_ptr<Trial>> order_;
  std::vector<Trial*> run_order_;
  std::vector<std::string> notes_;
};

// The largest candidate that runs, by binary search (the largest the memory
// model accepts first: it usually runs). Returns -1 when none does.
int largest_that_runs(Tuner& tuner, const ParallelShape& mesh, int zero,
                      const std::vector<int>& candidates) {
  if (candidates.empty()) return -1;
  int hi = static_cast<int>(candidates.size()) - 1;
  if (tuner.trial(mesh, zero, candidates[hi]).runs()) return hi;
  int lo = 0, largest = -1;
  --hi;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (tuner.trial(mesh, zero, candidates[mid]).runs()) {
      largest = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return largest;
}

// Measures candidates[0..largest] from the smallest up until the gain drops
// below plateau; returns the fastest trial of the candidates measured, the
// binary search's included (null when none ran).
Trial* grow_until_plateau(Tuner& tuner, const ParallelShape& mesh, int zero,
                          const std::vector<int>& candidates, int largest, double plateau) {
  Trial* previous = nullptr;
  for (int i = 0; i <= largest; ++i) {
    Trial& t = tuner.trial(mesh, zero, candidates[i]);
    if (!t.runs()) continue;
    if (previous && t.measured_seconds > previous->measured_seconds / (1 + plateau)) {
      tuner.notes().push_back(mesh_name(mesh) + " ZeRO-" + std::to_string(zero) +
                              ": stopped growing at micro-batch " + std::to_string(candidates[i]) +
                              " (gain over " + std::to_string(previous->micro_batch) + " below " +
                              std::to_string(static_cast<int>(plateau * 100)) + "%)");
      break;
    }
    previous = &t;
  }
  Trial* best = nullptr;
  for (int b : candidates)
    if (Trial* t = tuner.find(mesh, zero, b);
        t && t->runs() && (!best || t->measured_seconds < best->measured_seconds))
      best = t;
  return best;
}

// The extras as config overrides; throws on anything else.
std::vector<ConfigOverride> autotune_overrides(const std::vector<std::string>& extras) {
  std::vector<std::string> unknown;
  std::vector<ConfigOverride> overrides = parse_override_arguments(extras, &unknown);
  if (!unknown.empty())
    throw std::runtime_error("autotune: unexpected argument '" + unknown.front() +
                             "'; overrides take the form --section.key value");
  return overrides;
}

void check_limits(const AutotuneOptions& options) {
  if (options.steps < 1 || options.warmup < 0 || options.max_meshes < 1 || options.plateau < 0 ||
      options.experiment_timeout <= 0)
    throw std::runtime_error(
        "autotune: --steps >= 1, --warmup >= 0, --max-meshes >= 1, --plateau >= 0 and "
        "--experiment-timeout > 0 are required");
}

// The first max_meshes distinct meshes of the ranked plans, in rank order.
std::vector<ParallelShape> meshes_to_tune(const std::vector<PlanCandidate>& ranked,
                                          int max_meshes) {
  std::vector<ParallelShape> meshes;
  for (const PlanCandidate& candidate : ranked) {
    const ParallelShape& shape = candidate.setting.shape;
    const bool seen = std::any_of(meshes.begin(), meshes.end(), [&](const ParallelShape& m) {
      return m.pipeline_stages == shape.pipeline_stages && m.data_parallel == shape.data_parallel &&
             m.tensor_parallel == shape.tensor_parallel;
    });
    if (!seen && static_cast<int>(meshes.size()) < max_meshes) meshes.push_back(shape);
  }
  return meshes;
}

// Steps 2 and 3 for one mesh: the lowest ZeRO stage's micro-batches, then
// each higher stage's only where it can beat the best of the stages below:
// they were memory-bound (their largest fitting micro-batch is not the
// largest candidate, or none fit), or the cost model predicts the higher
// stage faster than the best measured so far. Each skip is a note saying why.
void tune_mesh(Tuner& tuner, const ParallelShape& mesh, const SearchSpace& space,
               const JobConfig& config, double plateau) {
  std::vector<int> sizes = micro_batch_sizes(space, config, mesh.data_parallel);
  std::sort(sizes.begin(), sizes.end());
  // The candidates at least `smallest` the memory model accepts for a stage.
  auto accepted = [&](int zero, int smallest) {
    std::vector<int> fits;
    for (int b : sizes)
      if (b >= smallest && tuner.fits_model(mesh, zero, b, nullptr)) fits.push_back(b);
    return fits;
  };
  std::vector<int> stages = space.zero_stages;
  std::sort(stages.begin(), stages.end());
  Trial* best = nullptr;      // the fastest of the stages tried so far
  bool memory_bound = false;  // a stage tried so far could not run the largest size
  bool tried_any = false;
  for (int zero : stages) {
    const std::string name = mesh_name(mesh) + " ZeRO-" + std::to_string(zero);
    if (zero > 0 && mesh.data_parallel == 1) {
      tuner.notes().push_back(name + " skipped: one data-parallel rank has nothing to shard");
      continue;
    }
    if (tried_any && !memory_bound) {
      double predicted = 0;
      const bool faster = best && tuner.fits_model(mesh, zero, best->micro_batch, &predicted) &&
                          predicted < best->predicted_seconds;
      if (!faster) {
        tuner.notes().push_back(name +
                                " skipped: the stages below ran the largest micro-batch and the "
                                "cost model does not predict it faster");
        continue;
      }
    }
    const std::vector<int> fits = accepted(zero, best ? best->micro_batch : 0);
    if (fits.empty()) {
      tuner.notes().push_back(name + " pruned: the memory model accepts no micro-batch size" +
                              (best ? " above the best so far" : ""));
      memory_bound = true;
      tried_any = true;
      continue;
    }
    const int largest = largest_that_runs(tuner, mesh, zero, fits);
    Trial* stage_best = grow_until_plateau(tuner, mesh, zero, fits, largest, plateau);
    if (stage_best && (!best || stage_best->measured_seconds < best->measured_seconds))
      best = stage_best;
    memory_bound = largest < 0 || fits[largest] != sizes.back();
    tried_any = true;
  }
}

// The summary table's line for the run-th experiment.
std::string table_row(int run, const Trial& t) {
  char line[256];
  std::snprintf(line, sizeof line, "%3d | %-18s | %4d | %11d | %11.4f | %10s | %6s | %s%s%s\n", run,
                mesh_name(t.mesh).c_str(), t.zero, t.micro_batch, t.predicted_seconds,
                t.runs() ? std::to_string(t.measured_seconds).substr(0, 6).c_str() : "-",
                t.runs() ? (std::to_string(static_cast<int>(std::lround(
                                100 * (t.measured_seconds / t.predicted_seconds - 1)))) +
                            "%")
                               .c_str()
                         : "-",
                experiment_status_name(t.outcome->status), t.runs() ? "" : ": ",
                t.runs() ? "" : t.outcome->message.c_str());
  return line;
}

json experiment_json(const Trial& t) {
  return {{"mesh", mesh_name(t.mesh)},
          {"zero_stage", t.zero},
          {"micro_batch_size", t.micro_batch},
          {"predicted_step_seconds", t.predicted_seconds},
          {"measured_step_seconds", t.runs() ? json(t.measured_seconds) : json()},
          {"status", experiment_status_name(t.outcome->status)},
          {"message", t.outcome->message},
          {"plan", t.plan_path}};
}

// The experiments run, as printed and for the report, and the fastest.
struct ExperimentTable {
  const Trial* best = nullptr;
  int run = 0, failed = 0;
  json experiments = json::array();
};

ExperimentTable print_experiment_table(const Tuner& tuner) {
  ExperimentTable table;
  std::cout << "\n  # | mesh               | ZeRO | micro-batch | predicted s | measured s |"
               "  error | status\n";
  for (const Trial* t : tuner.experiments()) {
    ++table.run;
    if (!t->runs()) ++table.failed;
    if (t->runs() && (!table.best || t->measured_seconds < table.best->measured_seconds))
      table.best = t;
    std::cout << table_row(table.run, *t);
    table.experiments.push_back(experiment_json(*t));
  }
  return table;
}

// Writes the best measured plan to output and says how it did.
void write_best_plan(const Trial& best, const JobConfig& config, const std::string& output) {
  const LoadedPlan chosen = load_plan(best.plan_path);
  write_plan(output, chosen.bytes().data(), chosen.bytes().size());
  const double tokens =
      static_cast<double>(config.training.global_batch_size) * config.model.seq_len;
  std::printf(
      "best: %s, ZeRO-%d, micro-batch %d: measured %.4f s/step (%.0f tokens/s) against "
      "predicted %.4f s (%+.1f%%)\nbest plan written to %s\n",
      mesh_name(best.mesh).c_str(), best.zero, best.micro_batch, best.measured_seconds,
      tokens / best.measured_seconds, best.predicted_seconds,
      100 * (best.measured_seconds / best.predicted_seconds - 1), output.c_str());
}

}  // namespace

int run_autotune(const AutotuneOptions& options, const std::vector<std::string>& extras) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ConfigOverride> overrides = autotune_overrides(extras);
  check_limits(options);
  const JobConfig config = load_job_config(options.config, overrides);
  const std::string output =
      options.output.empty() ? config.planner.save_plan_path : options.output;
  if (output.empty())
    throw std::runtime_error(
        "autotune: no output file; give --output FILE or planner.save_plan_path");
  std::filesystem::create_directories(options.work_dir);

  // 1. Rank by the cost model (the memory model has pruned what cannot fit).
  const ProfileLoad profile = load_profile(config);
  const SearchResult search = search_plans(config, profile.profile ? &*profile.profile : nullptr);
  const std::vector<ParallelShape> meshes = meshes_to_tune(search.ranked, options.max_meshes);
  std::cout << "paraplan autotune: " << options.config << "; " << search.ranked.size()
            << " ranked plans, tuning " << meshes.size() << " mesh(es) in predicted order; "
            << "time model: "
            << (profile.profile ? "profile " + profile.path : std::string("analytic roofline"))
            << std::endl;
  Tuner tuner(options, overrides);
  for (const ParallelShape& mesh : meshes)
    tune_mesh(tuner, mesh, search.space, config, options.plateau);

  // The summary: every setting tried, the best measured.
  const ExperimentTable table = print_experiment_table(tuner);
  for (const std::string& note : tuner.notes()) std::cout << "  note: " << note << "\n";
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("experiments: %d run (%d failed) in %.1f s\n", table.run, table.failed, seconds);
  if (!table.best)
    throw std::runtime_error("autotune: no experiment ran; see the logs in " + options.work_dir);
  write_best_plan(*table.best, config, output);
  if (!options.report.empty())
    write_file_atomically(
        options.report,
        json{{"experiments", table.experiments},
             {"seconds", seconds},
             {"best", table.experiments.size() ? json(table.best->plan_path) : json()},
             {"notes", tuner.notes()},
             {"output", output}}
                .dump(2) +
            "\n");
  return 0;
}

}  // namespace paraplan
