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
#include "launcher/autotune_parameters.h"
#include "launcher/autotune_trial.h"
#include "launcher/launch.h"
#include "launcher/model_from.h"
#include "planner/cost/profile.h"
#include "planner/planner.h"
#include "planner/search/plan_search.h"
#include "schema/plan_io.h"

namespace paraplan {

namespace {

using nlohmann::json;

// The experiments the trial parameters' grid may add around the best setting.
constexpr int kMaxGridRuns = 4;

struct Trial {
  ParallelShape mesh;
  int zero = 0, micro_batch = 0;
  std::vector<int64_t> values;  // the trial parameters' (Tuner::parameters() order)
  TrialContext context;         // what the plan says the parameters' rules need
  std::string plan_path;
  double predicted_seconds = 0, predicted_peak_bytes = 0;
  std::string pruned;  // the memory model's reason, when it was not run
  std::optional<ExperimentOutcome> outcome;
  double measured_seconds = 0, measured_peak_bytes = 0;
  bool runs() const { return outcome && outcome->status == ExperimentStatus::kMeasured; }
};

// A value of every trial parameter and what the grid did with it.
struct GridEntry {
  TrialCombination combination;
  const Trial* trial = nullptr;  // the experiment, where one was planned
};

class Tuner {
 public:
  Tuner(const AutotuneOptions& options, std::vector<ConfigOverride> overrides,
        const JobConfig& config)
      : options_(options),
        overrides_(std::move(overrides)),
        config_(config),
        parameters_(trial_parameters(config)) {
    for (const TrialParameter& p : parameters_) job_values_.push_back(p.job_value);
  }

  // The setting planned (once; cheap), its plan file written; the trial
  // parameters at the job's values unless given.
  Trial& planned(const ParallelShape& mesh, int zero, int micro_batch,
                 const std::vector<int64_t>* values = nullptr) {
    if (!values) values = &job_values_;
    const auto key = std::make_tuple(mesh.pipeline_stages, mesh.data_parallel, mesh.tensor_parallel,
                                     zero, micro_batch, *values);
    auto found = trials_.find(key);
    if (found != trials_.end()) return *found->second;
    order_.push_back(std::make_unique<Trial>());
    Trial& t = *order_.back();
    trials_[key] = &t;
    t.mesh = mesh, t.zero = zero, t.micro_batch = micro_batch, t.values = *values;
    plan(t);
    return t;
  }

  // Planned and, unless the memory model refuses it, replayed (once).
  Trial& trial(const ParallelShape& mesh, int zero, int micro_batch,
               const std::vector<int64_t>* values = nullptr) {
    Trial& t = planned(mesh, zero, micro_batch, values);
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
    auto found =
        trials_.find(std::make_tuple(mesh.pipeline_stages, mesh.data_parallel, mesh.tensor_parallel,
                                     zero, micro_batch, job_values_));
    return found == trials_.end() || !found->second->outcome ? nullptr : found->second;
  }

  // The experiments run, in the order they ran.
  const std::vector<Trial*>& experiments() const { return run_order_; }
  std::vector<std::string>& notes() { return notes_; }
  const std::vector<TrialParameter>& parameters() const { return parameters_; }
  // The trial parameters' grid: the base setting, then the combinations around it.
  std::vector<GridEntry>& grid() { return grid_; }
  const std::vector<GridEntry>& grid() const { return grid_; }

 private:
  std::string stem(const Trial& t) const {
    std::string name = options_.work_dir + "/pp" + std::to_string(t.mesh.pipeline_stages) + "-dp" +
                       std::to_string(t.mesh.data_parallel) + "-tp" +
                       std::to_string(t.mesh.tensor_parallel) + "-zero" + std::to_string(t.zero) +
                       "-mb" + std::to_string(t.micro_batch);
    for (size_t i = 0; i < parameters_.size(); ++i)
      if (t.values[i] != job_values_[i])
        name += "-" + parameters_[i].column + std::to_string(t.values[i]);
    return name;
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
    for (size_t i = 0; i < parameters_.size(); ++i)
      if (t.values[i] != job_values_[i])
        fixed.push_back({parameters_[i].key, std::to_string(t.values[i])});
    try {
      const PlanOutcome outcome = plan_job(load_job_config(options_.config, fixed));
      t.plan_path = stem(t) + ".pplan";
      write_plan(t.plan_path, outcome.plan.data(), outcome.plan.size());
      const LoadedPlan loaded = load_plan(t.plan_path);
      t.context = plan_context(loaded.plan(), config_);
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
    const std::string values =
        t.values == job_values_ ? "" : " " + describe_values(parameters_, t.values, &t.context);
    std::printf("  %-18s ZeRO-%d micro-batch %3d%s: %s", mesh_name(t.mesh).c_str(), t.zero,
                t.micro_batch, values.c_str(), experiment_status_name(t.outcome->status));
    if (t.runs())
      std::printf(" %.4f s/step (predicted %.4f)", t.measured_seconds, t.predicted_seconds);
    else
      std::printf(" (%s)", t.outcome->message.c_str());
    std::printf("\n");
    std::fflush(stdout);
  }

  const AutotuneOptions& options_;
  std::vector<ConfigOverride> overrides_;
  const JobConfig& config_;
  std::vector<TrialParameter> parameters_;
  std::vector<int64_t> job_values_;
  std::map<std::tuple<int, int, int, int, int, std::vector<int64_t>>, Trial*> trials_;
  std::vector<std::unique_ptr<Trial>> order_;
  std::vector<Trial*> run_order_;
  std::vector<std::string> notes_;
  std::vector<GridEntry> grid_;
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

// The fastest measured of trials, or null.
const Trial* fastest(const std::vector<Trial*>& trials) {
  const Trial* best = nullptr;
  for (const Trial* t : trials)
    if (t->runs() && (!best || t->measured_seconds < best->measured_seconds)) best = t;
  return best;
}

std::string setting_name(const Trial& t) {
  return mesh_name(t.mesh) + ", ZeRO-" + std::to_string(t.zero) + ", micro-batch " +
         std::to_string(t.micro_batch);
}

// Step 4: the trial parameters' grid around the best measured setting, at
// most kMaxGridRuns more experiments, each measured as the others; a
// parameter that does not apply there, and each value a pruning rule skips,
// says why. The base setting is the grid's first entry.
void tune_parameters(Tuner& tuner) {
  const Trial* best = fastest(tuner.experiments());
  if (!best) return;
  for (const TrialParameter& parameter : tuner.parameters())
    if (const std::string why = not_applicable(parameter, best->context); !why.empty())
      tuner.notes().push_back(setting_name(*best) + ": " + why);
  const std::vector<TrialCombination> grid =
      trial_grid(tuner.parameters(), best->context, kMaxGridRuns);
  if (grid.empty()) return;
  tuner.grid().push_back({{best->values, ""}, best});
  for (const TrialCombination& combination : grid) {
    const Trial* t = nullptr;
    if (combination.skipped.empty())
      t = &tuner.trial(best->mesh, best->zero, best->micro_batch, &combination.values);
    tuner.grid().push_back({combination, t});
  }
}

// The experiment's number in the table (1 first), 0 when it did not run.
int run_number(const Tuner& tuner, const Trial* t) {
  const auto& run = tuner.experiments();
  const auto found = std::find(run.begin(), run.end(), t);
  return found == run.end() ? 0 : static_cast<int>(found - run.begin()) + 1;
}

// What became of a grid entry: "#5 measured 0.0123 s/step", "skipped: why".
std::string grid_fate(const Tuner& tuner, const GridEntry& entry) {
  if (!entry.combination.skipped.empty()) return "skipped: " + entry.combination.skipped;
  const Trial& t = *entry.trial;
  if (!t.outcome) return "pruned: " + t.pruned;
  char seconds[64] = "";
  if (t.runs()) std::snprintf(seconds, sizeof seconds, " %.4f s/step", t.measured_seconds);
  return "#" + std::to_string(run_number(tuner, &t)) + " " +
         experiment_status_name(t.outcome->status) + seconds +
         (t.runs() ? "" : " (" + t.outcome->message + ")");
}

void print_grid(const Tuner& tuner) {
  const std::vector<GridEntry>& grid = tuner.grid();
  if (grid.empty()) return;
  const Trial& base = *grid.front().trial;
  std::printf("trial parameters around #%d (%s; the largest stage holds %lld gradient elements):\n",
              run_number(tuner, &base), setting_name(base).c_str(),
              static_cast<long long>(base.context.stage_gradient_elements));
  for (const GridEntry& entry : grid)
    std::printf(
        "  %s%s: %s\n",
        describe_values(tuner.parameters(), entry.combination.values, &base.context).c_str(),
        &entry == &grid.front() ? " (the job's)" : "", grid_fate(tuner, entry).c_str());
}

json grid_json(const Tuner& tuner) {
  json combinations = json::array();
  for (const GridEntry& entry : tuner.grid()) {
    json values = json::object();
    for (size_t i = 0; i < tuner.parameters().size(); ++i)
      values[tuner.parameters()[i].key] = entry.combination.values[i];
    const Trial* t = entry.trial;
    const int run = run_number(tuner, t);
    combinations.push_back(
        {{"parameters", values},
         {"base", &entry == &tuner.grid().front()},
         {"status", !entry.combination.skipped.empty() ? "skipped"
                    : t->outcome                       ? experiment_status_name(t->outcome->status)
                                                       : "pruned"},
         {"reason", !entry.combination.skipped.empty() ? entry.combination.skipped
                    : t->outcome                       ? t->outcome->message
                                                       : t->pruned},
         {"experiment", run ? json(run) : json()},
         {"measured_step_seconds", t && t->runs() ? json(t->measured_seconds) : json()}});
  }
  json grid = {{"combinations", combinations}};
  if (!tuner.grid().empty()) {
    const Trial& base = *tuner.grid().front().trial;
    grid["around"] = run_number(tuner, &base);
    grid["stage_gradient_elements"] = base.context.stage_gradient_elements;
  }
  return grid;
}

// The trial parameters' cells of a table row: the value, "-" where it does not apply.
std::string parameter_cells(const std::vector<TrialParameter>& parameters, const Trial& t) {
  std::string cells;
  for (size_t i = 0; i < parameters.size(); ++i) {
    char cell[40];
    const bool applies = not_applicable(parameters[i], t.context).empty();
    std::snprintf(cell, sizeof cell, " %10s |",
                  applies ? std::to_string(t.values[i]).c_str() : "-");
    cells += cell;
  }
  return cells;
}

// The summary table's line for the run-th experiment.
std::string table_row(int run, const Trial& t, const std::vector<TrialParameter>& parameters) {
  char line[512];
  std::snprintf(
      line, sizeof line, "%3d | %-18s | %4d | %11d |%s %11.4f | %10s | %6s | %s%s%s\n", run,
      mesh_name(t.mesh).c_str(), t.zero, t.micro_batch, parameter_cells(parameters, t).c_str(),
      t.predicted_seconds, t.runs() ? std::to_string(t.measured_seconds).substr(0, 6).c_str() : "-",
      t.runs() ? (std::to_string(static_cast<int>(
                      std::lround(100 * (t.measured_seconds / t.predicted_seconds - 1)))) +
                  "%")
                     .c_str()
               : "-",
      experiment_status_name(t.outcome->status), t.runs() ? "" : ": ",
      t.runs() ? "" : t.outcome->message.c_str());
  return line;
}

json experiment_json(const Trial& t, const std::vector<TrialParameter>& parameters) {
  json values = json::object();
  for (size_t i = 0; i < parameters.size(); ++i) values[parameters[i].key] = t.values[i];
  return {{"mesh", mesh_name(t.mesh)},
          {"zero_stage", t.zero},
          {"micro_batch_size", t.micro_batch},
          {"parameters", values},
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
  std::cout << "\n  # | mesh               | ZeRO | micro-batch |";
  for (const TrialParameter& p : tuner.parameters()) std::printf(" %10s |", p.column.c_str());
  std::cout << " predicted s | measured s |  error | status\n";
  for (const Trial* t : tuner.experiments()) {
    ++table.run;
    if (!t->runs()) ++table.failed;
    std::cout << table_row(table.run, *t, tuner.parameters());
    table.experiments.push_back(experiment_json(*t, tuner.parameters()));
  }
  table.best = fastest(tuner.experiments());
  for (const TrialParameter& p : tuner.parameters())
    std::cout << "  " << p.column << ": " << p.meaning << "; - where it does not apply\n";
  return table;
}

// Writes the best measured plan to output and says how it did.
void write_best_plan(const Trial& best, const Tuner& tuner, const JobConfig& config,
                     const std::string& output) {
  const LoadedPlan chosen = load_plan(best.plan_path);
  write_plan(output, chosen.bytes().data(), chosen.bytes().size());
  const double tokens =
      static_cast<double>(config.training.global_batch_size) * config.model.seq_len;
  std::printf(
      "best: %s, %s: measured %.4f s/step (%.0f tokens/s) against "
      "predicted %.4f s (%+.1f%%)\nbest plan written to %s\n",
      setting_name(best).c_str(),
      describe_values(tuner.parameters(), best.values, &best.context).c_str(),
      best.measured_seconds, tokens / best.measured_seconds, best.predicted_seconds,
      100 * (best.measured_seconds / best.predicted_seconds - 1), output.c_str());
}

}  // namespace

int run_autotune(const AutotuneOptions& options, const std::vector<std::string>& extras) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ConfigOverride> overrides =
      with_model_from(options.model_from, options.config, autotune_overrides(extras));
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
  Tuner tuner(options, overrides, config);
  for (const ParallelShape& mesh : meshes)
    tune_mesh(tuner, mesh, search.space, config, options.plateau);
  tune_parameters(tuner);

  // The summary: every setting tried, the best measured.
  const ExperimentTable table = print_experiment_table(tuner);
  for (const std::string& note : tuner.notes()) std::cout << "  note: " << note << "\n";
  print_grid(tuner);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("experiments: %d run (%d failed) in %.1f s\n", table.run, table.failed, seconds);
  if (!table.best)
    throw std::runtime_error("autotune: no experiment ran; see the logs in " + options.work_dir);
  write_best_plan(*table.best, tuner, config, output);
  if (!options.report.empty())
    write_file_atomically(
        options.report,
        json{{"experiments", table.experiments},
             {"seconds", seconds},
             {"best", table.experiments.size() ? json(table.best->plan_path) : json()},
             {"notes", tuner.notes()},
             {"trial_parameters", grid_json(tuner)},
             {"output", output}}
                .dump(2) +
            "\n");
  return 0;
}

}  // namespace paraplan
