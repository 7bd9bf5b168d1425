// replay_report.cc: per-stage measured-against-predicted figures of a replay.
#include "runtime/measure/replay_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/comm/communicator.h"
#include "runtime/parallel/parallel_state.h"

namespace paraplan {

using nlohmann::json;

void RankMeasurement::to_array(double* out) const {
  const double fields[] = {
      forward_seconds, forward_count,      backward_seconds, backward_count,
      load_seconds,    optimizer_seconds,  step_seconds,     tensor.transfer,
      tensor.wait,     reduction.transfer, reduction.wait,   world.transfer,
      world.wait,      pipeline.transfer,  pipeline.wait,    core_wait_seconds};
  static_assert(sizeof fields / sizeof fields[0] == kScalars);
  std::copy(std::begin(fields), std::end(fields), out);
  std::copy(std::begin(memory_peak), std::end(memory_peak), out + kScalars);
  out[kFields - 2] = memory_peak_total;
  out[kFields - 1] = communicator_buffers;
}

RankMeasurement RankMeasurement::from_array(const double* in) {
  RankMeasurement m;
  double* fields[] = {
      &m.forward_seconds, &m.forward_count,      &m.backward_seconds, &m.backward_count,
      &m.load_seconds,    &m.optimizer_seconds,  &m.step_seconds,     &m.tensor.transfer,
      &m.tensor.wait,     &m.reduction.transfer, &m.reduction.wait,   &m.world.transfer,
      &m.world.wait,      &m.pipeline.transfer,  &m.pipeline.wait,    &m.core_wait_seconds};
  for (int i = 0; i < kScalars; ++i) *fields[i] = in[i];
  std::copy(in + kScalars, in + kScalars + kNumMemoryCategories, m.memory_peak);
  m.memory_peak_total = in[kFields - 2];
  m.communicator_buffers = in[kFields - 1];
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

namespace {

// The parts of a step, in the order the table prints them.
constexpr const char* kParts[] = {
    "forward", "backward", "tensor_parallel", "pipeline_p2p", "gradient_reduction", "optimizer",
    "wait",    "other"};
constexpr int kNumParts = sizeof kParts / sizeof kParts[0];
constexpr const char* kPerMicroBatch[] = {"forward", "backward", "tensor_parallel", "pipeline_p2p"};

// A stage's measured parts per step (means over its ranks) and where its
// waits came from.
struct StageParts {
  double part[kNumParts] = {};
  // tensor_parallel, pipeline_p2p, gradient_reduction, world, end_of_step, core
  double waits[6] = {};
  double forward_count = 0, backward_count = 0;
  // The tracker's categories, then the peak with NCCL's buffers.
  double memory[kNumMemoryCategories + 1] = {};
  double communicator_buffers = 0;
  int ranks = 0;
};

StageParts measured_parts(const std::vector<RankMeasurement>& ranks, const schema::Mesh& mesh,
                          int stage, double steps, double job_step) {
  StageParts parts;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const MeshCoordinates at =
        mesh_coordinates(static_cast<int>(r), mesh.pipeline_parallel(), mesh.data_parallel(),
                         mesh.tensor_parallel(), mesh.context_parallel());
    if (at.pipeline_rank != stage) continue;
    const RankMeasurement& m = ranks[r];
    ++parts.ranks;
    const double rank_step = m.step_seconds / steps;
    // The gradient norm's all-reduce over the world counts with the reduction.
    const double busy[] = {m.forward_seconds,
                           m.backward_seconds,
                           m.tensor.transfer,
                           m.pipeline.transfer,
                           m.reduction.transfer + m.world.transfer,
                           m.optimizer_seconds};
    const double waits[] = {m.tensor.wait, m.pipeline.wait, m.reduction.wait, m.world.wait};
    double accounted = m.core_wait_seconds / steps;  // waiting for a core
    parts.waits[5] += accounted;
    parts.part[6] += accounted;
    for (int i = 0; i < 6; ++i) parts.part[i] += busy[i] / steps, accounted += busy[i] / steps;
    for (int i = 0; i < 4; ++i) {
      parts.waits[i] += waits[i] / steps;
      parts.part[6] += waits[i] / steps;
      accounted += waits[i] / steps;
    }
    // A rank that finished its step before the slowest waits for the next.
    parts.waits[4] += std::max(0.0, job_step - rank_step);
    parts.part[6] += std::max(0.0, job_step - rank_step);
    parts.part[7] += rank_step - accounted;
    parts.forward_count += m.forward_count / steps;
    parts.backward_count += m.backward_count / steps;
    for (int c = 0; c < kNumMemoryCategories; ++c)
      parts.memory[c] = std::max(parts.memory[c], m.memory_peak[c]);
    parts.memory[kNumMemoryCategories] =
        std::max(parts.memory[kNumMemoryCategories], m.memory_peak_total + m.communicator_buffers);
    parts.communicator_buffers = std::max(parts.communicator_buffers, m.communicator_buffers);
  }
  const double n = std::max(1, parts.ranks);
  for (double& value : parts.part) value /= n;
  for (double& value : parts.waits) value /= n;
  parts.forward_count /= n, parts.backward_count /= n;
  return parts;
}

// The plan's parts for a stage per step: m x the per-micro-batch terms, the
// per-step terms, the bubble (or, for plans without it, the step less the
// rest), and nothing for `other`.
void predicted_parts(const schema::StagePrediction* p, int m, double step, double* part) {
  std::fill(part, part + kNumParts, 0.0);
  if (p == nullptr) return;
  part[0] = m * p->forward_seconds();
  part[1] = m * p->backward_seconds();
  part[2] = m * p->tensor_parallel_seconds();
  part[3] = m * p->pipeline_p2p_seconds();
  part[4] = p->gradient_reduction_seconds();
  part[5] = p->optimizer_seconds();
  double rest = step;
  for (int i = 0; i < 6; ++i) rest -= part[i];
  part[6] = p->bubble_seconds() > 0 ? p->bubble_seconds() : std::max(0.0, rest);
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
                   {"context_parallel", mesh.context_parallel()},
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
    const StageParts measured = measured_parts(ranks, mesh, s, steps, run.job_step_seconds);
    const schema::StagePrediction* p =
        predictions && predictions->stages() && s < static_cast<int>(predictions->stages()->size())
            ? predictions->stages()->Get(s)
            : nullptr;
    double predicted[kNumParts];
    predicted_parts(p, m, step_predicted, predicted);

    json per_step = json::object(), per_micro_batch = json::object();
    for (int i = 0; i < kNumParts; ++i)
      per_step[kParts[i]] = compare(predicted[i], measured.part[i]);
    const double counts[] = {measured.forward_count, measured.backward_count,
                             measured.forward_count, measured.forward_count};
    for (int i = 0; i < 4; ++i)
      per_micro_batch[kPerMicroBatch[i]] =
          compare(m > 0 ? predicted[i] / m : 0, per(measured.part[i], counts[i]));
    json waits = {{"tensor_parallel", measured.waits[0]},    {"pipeline_p2p", measured.waits[1]},
                  {"gradient_reduction", measured.waits[2]}, {"world", measured.waits[3]},
                  {"end_of_step", measured.waits[4]},        {"core", measured.waits[5]}};

    json memory_report = json::object();
    const schema::StageMemory* pm = p ? p->memory() : nullptr;
    // What the runtime allocates: the plan's figures less AutoDist's
    // transient reserve (plan.fbs), which the plan fits with but nothing
    // allocates.
    const double reserve = pm ? double(pm->transient_reserve()) : 0;
    const double predicted_memory[] = {
        pm ? double(pm->weights()) : 0,         pm ? double(pm->gradients()) : 0,
        pm ? double(pm->optimizer_state()) : 0, pm ? double(pm->gathered()) : 0,
        pm ? double(pm->activations()) : 0,     pm ? double(pm->transient()) - reserve : 0};
    static_assert(sizeof predicted_memory / sizeof predicted_memory[0] == kNumMemoryCategories);
    for (int c = 0; c < kNumMemoryCategories; ++c)
      memory_report[memory_category_name(static_cast<MemoryCategory>(c))] =
          compare(predicted_memory[c], measured.memory[c]);
    memory_report["communicator_buffers"] =
        compare(pm ? double(pm->communicator_buffers()) : 0, measured.communicator_buffers);
    const double total_predicted = pm ? double(pm->total()) - reserve : 0;
    memory_report["total"] = compare(total_predicted, measured.memory[kNumMemoryCategories]);
    memory_report["transient_reserve"] = reserve;
    if (pm && measured.memory[kNumMemoryCategories] > total_predicted) memory_within = false;
    peak_predicted = std::max(peak_predicted, total_predicted);
    peak_measured = std::max(peak_measured, measured.memory[kNumMemoryCategories]);

    stage_reports.push_back({{"stage", s},
                             {"ranks", measured.ranks},
                             {"per_step", per_step},
                             {"per_micro_batch", per_micro_batch},
                             {"waits", waits},
                             // The per-micro-batch and per-step figures scripts read.
                             {"forward", per_micro_batch["forward"]},
                             {"backward", per_micro_batch["backward"]},
                             {"tensor_parallel", per_micro_batch["tensor_parallel"]},
                             {"gradient_reduction", per_step["gradient_reduction"]},
                             {"optimizer", per_step["optimizer"]},
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
  report["each_step_seconds_measured"] = run.each_step_seconds;
  // JSON has no NaN: a non-finite loss is written as null.
  nlohmann::json losses = nlohmann::json::array();
  for (double loss : run.each_step_loss)
    losses.push_back(std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr));
  report["each_step_loss"] = losses;
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
    add_row(out, s, "forward / micro-batch", stage["per_micro_batch"]["forward"], milliseconds);
    add_row(out, "", "backward / micro-batch", stage["per_micro_batch"]["backward"], milliseconds);
    const char* labels[] = {"forward / step",
                            "backward / step",
                            "tensor-parallel / step",
                            "pipeline p2p / step",
                            "gradient reduction / step",
                            "optimizer / step",
                            "waits, bubble / step",
                            "other / step"};
    for (int i = 0; i < kNumParts; ++i)
      add_row(out, "", labels[i], stage["per_step"][kParts[i]], milliseconds);
    const json& memory = stage["memory_bytes"];
    for (const char* category : {"weights", "gradients", "optimizer_state", "gathered",
                                 "activations", "workspace", "communicator_buffers"})
      add_row(out, "", std::string("memory: ") + category, memory[category], mebibytes);
    add_row(out, "", "memory: peak", memory["total"], mebibytes);
    if (memory.value("transient_reserve", 0.0) > 0) {
      char reserve[160];
      std::snprintf(reserve, sizeof reserve,
                    "      | (the plan also reserved %.2f MiB: transient_mem_coef's estimate "
                    "beyond the workspace, never allocated)\n",
                    memory["transient_reserve"].get<double>() / (1024.0 * 1024.0));
      out += reserve;
    }
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
  if (report.contains("each_step_loss") && !report["each_step_loss"].empty()) {
    out += "loss per step (warm-up first):";
    for (const json& loss : report["each_step_loss"]) {
      if (loss.is_null()) {
        out += " nan";
        continue;
      }
      std::snprintf(line, sizeof line, " %.4f", loss.get<double>());
      out += line;
    }
    out += "\n";
  }
  return out;
}

}  // namespace paraplan
