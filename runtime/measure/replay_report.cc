// replay_report.cc: per-stage measured-against-predicted figures of a replay.
#include "runtime/measure/replay_report.h"

#include <algorithm>
#include <cstdio>

#include "runtime/comm/communicator.h"
#include "runtime/parallel/parallel_state.h"

namespace paraplan {

using nlohmann::json;

void RankMeasurement::to_array(double* out) const {
  const double fields[] = {forward_seconds,
                           forward_collective_seconds,
                           forward_count,
                           backward_seconds,
                           backward_collective_seconds,
                           backward_count,
                           transfer_seconds,
                           load_seconds,
                           reduce_seconds,
                           optimizer_seconds,
                           optimizer_collective_seconds,
                           step_seconds};
  static_assert(sizeof fields / sizeof fields[0] == 12);
  std::copy(std::begin(fields), std::end(fields), out);
  std::copy(std::begin(memory_peak), std::end(memory_peak), out + 12);
  out[kFields - 1] = memory_peak_total;
}

RankMeasurement RankMeasurement::from_array(const double* in) {
  RankMeasurement m;
  double* fields[] = {&m.forward_seconds,
                      &m.forward_collective_seconds,
                      &m.forward_count,
                      &m.backward_seconds,
                      &m.backward_collective_seconds,
                      &m.backward_count,
                      &m.transfer_seconds,
                      &m.load_seconds,
                      &m.reduce_seconds,
                      &m.optimizer_seconds,
                      &m.optimizer_collective_seconds,
                      &m.step_seconds};
  for (int i = 0; i < 12; ++i) *fields[i] = in[i];
  std::copy(in + 12, in + 12 + kNumMemoryCategories, m.memory_peak);
  m.memory_peak_total = in[kFields - 1];
  return m;
}

namespace {

json compare(double predicted, double measured) {
  json entry = {{"predicted", predicted}, {"measured", measured}};
  // No relative error against a prediction of (next to) nothing.
  entry["error"] = predicted > 1e-9 ? json((measured - predicted) / predicted) : json(nullptr);
  return entry;
}

double per(double total, double count) {
  return count > 0 ? total / count : 0;
}

}  // namespace

json replay_report(const schema::Plan& plan, const ReplayRun& run,
                   const std::vector<RankMeasurement>& ranks) {
  const schema::Mesh& mesh = *plan.mesh();
  const schema::Training& training = *plan.training();
  const schema::Predictions* predictions = plan.predictions();
  const int stages = mesh.pipeline_parallel();
  const int m = training.num_micro_batches();
  const double steps = std::max(1, run.steps);
  const double step_predicted = predictions ? predictions->step_seconds() : 0;

  json report = {{"plan", run.plan_path},
                 {"backend", run.backend},
                 {"ranks", ranks.size()},
                 {"steps", run.steps},
                 {"warmup", run.warmup},
                 {"mesh",
                  {{"pipeline_parallel", mesh.pipeline_parallel()},
                   {"data_parallel", mesh.data_parallel()},
                   {"tensor_parallel", mesh.tensor_parallel()}}},
                 {"micro_batch_size", training.micro_batch_size()},
                 {"num_micro_batches", m},
                 {"zero_stage", plan.zero()->stage()},
                 {"time_model", predictions && predictions->time_model()
                                    ? predictions->time_model()->str()
                                    : "unknown (plan without predictions)"}};
  json stage_reports = json::array();
  bool memory_within = true;
  double peak_predicted = 0, peak_measured = 0;
  for (int s = 0; s < stages; ++s) {
    // Mean of the stage's ranks (memory: the largest).
    RankMeasurement mean;
    double memory[kNumMemoryCategories + 1] = {};
    int count = 0;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const MeshCoordinates at = mesh_coordinates(static_cast<int>(r), stages, mesh.data_parallel(),
                                                  mesh.tensor_parallel());
      if (at.pipeline_rank != s) continue;
      const RankMeasurement& rank = ranks[r];
      ++count;
      mean.forward_seconds += per(rank.forward_seconds, rank.forward_count);
      mean.backward_seconds += per(rank.backward_seconds, rank.backward_count);
      mean.forward_collective_seconds += per(
          rank.forward_collective_seconds + rank.backward_collective_seconds, rank.forward_count);
      mean.reduce_seconds += (rank.reduce_seconds + rank.optimizer_collective_seconds) / steps;
      mean.optimizer_seconds += rank.optimizer_seconds / steps;
      for (int c = 0; c < kNumMemoryCategories; ++c)
        memory[c] = std::max(memory[c], rank.memory_peak[c]);
      memory[kNumMemoryCategories] = std::max(memory[kNumMemoryCategories], rank.memory_peak_total);
    }
    const double n = std::max(1, count);
    const double forward = mean.forward_seconds / n, backward = mean.backward_seconds / n;
    const double tensor_parallel = mean.forward_collective_seconds / n;
    const double reduction = mean.reduce_seconds / n, optimizer = mean.optimizer_seconds / n;
    const double rest =
        run.job_step_seconds - m * (forward + backward + tensor_parallel) - reduction - optimizer;

    const schema::StagePrediction* p =
        predictions && predictions->stages() && s < static_cast<int>(predictions->stages()->size())
            ? predictions->stages()->Get(s)
            : nullptr;
    const double p_forward = p ? p->forward_seconds() : 0;
    const double p_backward = p ? p->backward_seconds() : 0;
    const double p_tensor = p ? p->tensor_parallel_seconds() : 0;
    const double p_reduction = p ? p->gradient_reduction_seconds() : 0;
    const double p_optimizer = p ? p->optimizer_seconds() : 0;
    const double p_rest =
        step_predicted - m * (p_forward + p_backward + p_tensor) - p_reduction - p_optimizer;

    json memory_report = json::object();
    const schema::StageMemory* pm = p ? p->memory() : nullptr;
    const double predicted_memory[] = {
        pm ? double(pm->weights()) : 0, pm ? double(pm->gradients()) : 0,
        pm ? double(pm->optimizer_state()) : 0, pm ? double(pm->activations()) : 0,
        pm ? double(pm->transient()) : 0};
    for (int c = 0; c < kNumMemoryCategories; ++c)
      memory_report[memory_category_name(static_cast<MemoryCategory>(c))] =
          compare(predicted_memory[c], memory[c]);
    const double total_predicted = pm ? double(pm->total()) : 0;
    memory_report["total"] = compare(total_predicted, memory[kNumMemoryCategories]);
    if (pm && memory[kNumMemoryCategories] > total_predicted) memory_within = false;
    peak_predicted = std::max(peak_predicted, total_predicted);
    peak_measured = std::max(peak_measured, memory[kNumMemoryCategories]);

    stage_reports.push_back({{"stage", s},
                             {"ranks", count},
                             {"forward", compare(p_forward, forward)},
                             {"backward", compare(p_backward, backward)},
                             {"tensor_parallel", compare(p_tensor, tensor_parallel)},
                             {"gradient_reduction", compare(p_reduction, reduction)},
                             {"optimizer", compare(p_optimizer, optimizer)},
                             {"pipeline_and_bubble", compare(std::max(0.0, p_rest), rest)},
                             {"memory_bytes", memory_report}});
  }
  report["stages"] = stage_reports;
  report["step_seconds"] = compare(step_predicted, run.job_step_seconds);
  const double tokens = static_cast<double>(training.global_batch_size()) * plan.model()->seq_len();
  report["tokens_per_second"] =
      compare(predictions ? predictions->tokens_per_second() : 0,
              run.job_step_seconds > 0 ? tokens / run.job_step_seconds : 0);
  // The plan's MFU convention, scaled by the measured step.
  const double mfu_predicted = predictions ? predictions->mfu() : 0;
  report["mfu"] =
      compare(mfu_predicted,
              run.job_step_seconds > 0 ? mfu_predicted * step_predicted / run.job_step_seconds : 0);
  report["peak_memory_bytes"] = compare(peak_predicted, peak_measured);
  report["memory_within_prediction"] = memory_within;
  // Flat figures for scripts (bench.sh, autotune).
  report["step_seconds_measured"] = run.job_step_seconds;
  report["step_seconds_predicted"] = step_predicted;
  report["tokens_per_second_measured"] = report["tokens_per_second"]["measured"];
  return report;
}

namespace {

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  return text;
}

std::string mebibytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

std::string error_text(const json& entry) {
  if (entry["error"].is_null()) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", entry["error"].get<double>() * 100);
  return text;
}

void add_row(std::string& out, const std::string& stage, const std::string& part, const json& entry,
             std::string (*format)(double)) {
  char line[160];
  std::snprintf(line, sizeof line, "%5s | %-30s | %12s | %12s | %7s\n", stage.c_str(), part.c_str(),
                format(entry["predicted"].get<double>()).c_str(),
                format(entry["measured"].get<double>()).c_str(), error_text(entry).c_str());
  out += line;
}

}  // namespace

std::string replay_table(const json& report) {
  const json& mesh = report["mesh"];
  std::string out = "replay of " + report["plan"].get<std::string>() + ": " +
                    std::to_string(report["ranks"].get<int>()) + " rank(s) (pp " +
                    std::to_string(mesh["pipeline_parallel"].get<int>()) + " x dp " +
                    std::to_string(mesh["data_parallel"].get<int>()) + " x tp " +
                    std::to_string(mesh["tensor_parallel"].get<int>()) + "), micro-batch " +
                    std::to_string(report["micro_batch_size"].get<int>()) + " x " +
                    std::to_string(report["num_micro_batches"].get<int>()) + ", ZeRO-" +
                    std::to_string(report["zero_stage"].get<int>()) + ", backend " +
                    report["backend"].get<std::string>() + ", " +
                    std::to_string(report["steps"].get<int>()) + " steps after " +
                    std::to_string(report["warmup"].get<int>()) + " warm-up\n" +
                    "predicted with: " + report["time_model"].get<std::string>() + "\n";
  out += "stage | part                           |    predicted |     measured |   error\n";
  for (const json& stage : report["stages"]) {
    const std::string s = std::to_string(stage["stage"].get<int>());
    add_row(out, s, "forward / micro-batch", stage["forward"], milliseconds);
    add_row(out, "", "backward / micro-batch", stage["backward"], milliseconds);
    add_row(out, "", "tensor-parallel / micro-batch", stage["tensor_parallel"], milliseconds);
    add_row(out, "", "gradient reduction / step", stage["gradient_reduction"], milliseconds);
    add_row(out, "", "optimizer / step", stage["optimizer"], milliseconds);
    add_row(out, "", "p2p, bubble, waits / step", stage["pipeline_and_bubble"], milliseconds);
    const json& memory = stage["memory_bytes"];
    for (const char* category :
         {"weights", "gradients", "optimizer_state", "activations", "workspace"})
      add_row(out, "", std::string("memory: ") + category, memory[category], mebibytes);
    add_row(out, "", "memory: peak", memory["total"], mebibytes);
  }
  add_row(out, "all", "step", report["step_seconds"], milliseconds);
  char line[200];
  std::snprintf(line, sizeof line,
                "tokens/s: predicted %.0f, measured %.0f; MFU measured %.1f%%; peak memory "
                "within prediction: %s\n",
                report["tokens_per_second"]["predicted"].get<double>(),
                report["tokens_per_second"]["measured"].get<double>(),
                report["mfu"]["measured"].get<double>() * 100,
                report["memory_within_prediction"].get<bool>() ? "yes" : "NO");
  out += line;
  return out;
}

}  // namespace paraplan
