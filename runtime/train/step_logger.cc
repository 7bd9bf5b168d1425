// step_logger.cc: formats and writes the per-step metrics.
#include "runtime/train/step_logger.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace paraplan {

namespace {
std::string with_thousands(int64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  int count = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (count > 0 && count % 3 == 0 && *it != '-') out.insert(out.begin(), ',');
    out.insert(out.begin(), *it);
    ++count;
  }
  return out;
}
}  // namespace

std::string format_step_line(const StepMetrics& m) {
  const double gib = static_cast<double>(m.peak_memory_bytes) / (1024.0 * 1024.0 * 1024.0);
  const double percent =
      m.memory_capacity_bytes ? 100.0 * m.peak_memory_bytes / m.memory_capacity_bytes : 0.0;
  char line[512];
  std::snprintf(line, sizeof line,
                "step: %5d  loss: %8.4f  grad_norm: %8.4f  lr: %.2e  memory: %6.2fGiB(%.2f%%)  "
                "tps: %s  tflops: %.2f  mfu: %.2f%%",
                m.step, m.loss, m.grad_norm, m.learning_rate, gib, percent,
                with_thousands(static_cast<int64_t>(m.tokens_per_second + 0.5)).c_str(), m.tflops,
                100.0 * m.mfu);
  std::string text = line;
  if (m.validation_loss) {
    std::snprintf(line, sizeof line, "  val_loss: %.4f", *m.validation_loss);
    text += line;
  }
  if (m.hellaswag) {
    std::snprintf(line, sizeof line, "  hellaswag: %lld/%lld = %.4f",
                  static_cast<long long>(m.hellaswag->right_by_mean),
                  static_cast<long long>(m.hellaswag->examples), m.hellaswag->accuracy());
    text += line;
  }
  return text;
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepMetrics& m) {
  std::vector<std::pair<std::string, double>> scalars = {
      {"loss/train", m.loss},
      {"optimizer/grad_norm", m.grad_norm},
      {"optimizer/lr", m.learning_rate},
      {"throughput/tokens_per_second", m.tokens_per_second},
      {"throughput/tflops", m.tflops},
      {"throughput/mfu_percent", 100 * m.mfu},
      {"memory/peak_gib", static_cast<double>(m.peak_memory_bytes) / (1024.0 * 1024 * 1024)},
      {"time/step_seconds", m.step_seconds}};
  if (m.validation_loss) scalars.emplace_back("loss/validation", *m.validation_loss);
  if (m.hellaswag) {
    scalars.emplace_back("eval/hellaswag_accuracy", m.hellaswag->accuracy());
    scalars.emplace_back("eval/hellaswag_accuracy_by_sum", m.hellaswag->accuracy_by_sum());
  }
  return scalars;
}

StepLogger::StepLogger(const std::string& json_path, bool append,
                       const std::string& tensorboard_dir)
    : json_path_(json_path) {
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
  if (json_path.empty()) return;
  json_.open(json_path, append ? std::ios::app : std::ios::trunc);
  if (!json_) throw std::runtime_error("--log-json: cannot open '" + json_path + "' for writing");
}

void StepLogger::log(const StepMetrics& m) {
  std::cout << format_step_line(m) << std::endl;
  if (tensorboard_) {
    // Metrics are not worth a run: a failed write is said once, and the run
    // goes on without TensorBoard.
    try {
      tensorboard_->add_scalars(m.step, tensorboard_scalars(m));
    } catch (const std::exception& error) {
      std::cout << "tensorboard: warning: " << error.what()
                << "; no more TensorBoard events this run" << std::endl;
      tensorboard_.reset();
    }
  }
  if (!json_.is_open()) return;
  nlohmann::json record = {{"step", m.step},
                           {"loss", m.loss},
                           {"grad_norm", m.grad_norm},
                           {"lr", m.learning_rate},
                           {"step_seconds", m.step_seconds},
                           {"tps", m.tokens_per_second},
                           {"tflops", m.tflops},
                           {"mfu", m.mfu},
                           {"memory_bytes", m.peak_memory_bytes},
                           {"memory_capacity_bytes", m.memory_capacity_bytes},
                           {"host_syncs", m.host_synchronizations},
                           {"bytes_zeroed", m.bytes_zeroed}};
  if (m.validation_loss) record["val_loss"] = *m.validation_loss;
  if (m.hellaswag) {
    record["hellaswag_accuracy"] = m.hellaswag->accuracy();
    record["hellaswag_accuracy_by_sum"] = m.hellaswag->accuracy_by_sum();
    record["hellaswag_right"] = m.hellaswag->right_by_mean;
    record["hellaswag_examples"] = m.hellaswag->examples;
  }
  // nlohmann/json writes doubles so they read back exactly: resumed runs
  // can be compared bit for bit.
  json_ << record.dump() << '\n';
  json_.flush();
  if (!json_) {  // as for TensorBoard: said once, and the run goes on
    std::cout << "--log-json: warning: write to '" << json_path_
              << "' failed; no more JSON lines this run" << std::endl;
    json_.close();
  }
}

}  // namespace paraplan
