// evaluator.cc: `paraplan evaluate` on every rank (evaluator.h).
#include "runtime/train/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "common/atomic_file.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/distributed_checkpoint.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/model/architecture.h"
#include "runtime/model/model_from_plan.h"
#include "runtime/pipeline/rank_state.h"
#include "runtime/tokenizer/hellaswag.h"
#include "runtime/train/evaluation.h"
#include "runtime/train/training_data.h"
#include "schema/plan_io.h"

namespace paraplan {

namespace {

// What an evaluation needs besides its rank state, validated before anything
// is allocated.
struct EvaluationInputs {
  LoadedPlan loaded;
  MeshCoordinates mesh{};
  StageModelSpec model{};
  std::string weights{};  // the resolved step or model directory
  std::unique_ptr<DataLoader> validation{};
  std::string validation_name{};
  int validation_batches = 0;
  std::unique_ptr<MultipleChoiceRows> hellaswag{};
};

EvaluationInputs validate_evaluation(const EvaluateOptions& options, const MpiSession& session) {
  EvaluationInputs in{.loaded = load_plan(options.plan_path)};
  in.mesh = place_this_rank(in.loaded, session);
  in.model = stage_model_from_plan(in.loaded, in.mesh.pipeline_rank);
  const schema::Training& training = *in.loaded.plan().training();
  const TransformerConfig& config = in.model.config;
  if (options.checkpoint.empty())
    throw std::runtime_error(
        "--checkpoint: give the weights to evaluate (a checkpoint, one of "
        "its step directories, or a Hugging Face model directory)");
  in.weights = resolve_checkpoint(options.checkpoint);
  if (options.eval_batches < 0)
    throw std::runtime_error("--eval-batches: " + std::to_string(options.eval_batches) +
                             " is invalid; give 1 or more (0: the plan's eval_batches)");
  in.validation = open_validation_data(options.validation_data_path, training, config.seq_len,
                                       config.vocab_size, &in.validation_name);
  if (in.validation) {
    const int64_t whole = in.validation->samples_per_epoch() / training.global_batch_size();
    in.validation_batches =
        options.eval_batches > 0
            ? static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(options.eval_batches, whole)))
            : evaluation_batches(training, in.validation->samples_per_epoch());
  }
  if (options.eval_batches > 0 && !in.validation)
    throw std::runtime_error(
        "--eval-batches: there is no validation data to read (give "
        "--val-data, or [data] validation in the job file)");
  if (!options.tokenizer.empty() && !is_hellaswag_text(options.hellaswag))
    throw std::runtime_error(
        "--tokenizer encodes a --hellaswag .jsonl; " +
        (options.hellaswag.empty()
             ? std::string("there is none")
             : options.hellaswag + " holds tokens already (llm.c's eval file)"));
  if (!options.hellaswag.empty())
    in.hellaswag = open_multiple_choice_rows(options.hellaswag, options.tokenizer, in.weights,
                                             config.seq_len, config.vocab_size);
  if (!in.validation && !in.hellaswag)
    throw std::runtime_error(
        "nothing to evaluate: give --val-data (token files), --hellaswag "
        "(hellaswag_val.bin or .jsonl), or [data] validation in the job "
        "file the plan was made from");
  return in;
}

void print_header(const EvaluationInputs& in, const EvaluateOptions& options, int world_size) {
  const schema::Training& training = *in.loaded.plan().training();
  const MeshCoordinates& mesh = in.mesh;
  std::cout << "paraplan evaluate: " << in.weights << " (" << parameter_count(in.model.config)
            << " parameters) under " << options.plan_path << ": " << world_size << " rank(s) (pp "
            << mesh.pipeline_size << " x dp " << mesh.data_size
            << (mesh.context_size > 1 ? " x cp " + std::to_string(mesh.context_size) : "")
            << " x tp " << mesh.tensor_size << "), global batch " << training.global_batch_size()
            << " x seq " << in.model.config.seq_len << std::endl;
  if (in.hellaswag) std::cout << describe(*in.hellaswag, options.hellaswag) << std::endl;
}

// --report: the figures as one JSON object.
void write_report(const std::string& path, const EvaluateSummary& summary) {
  nlohmann::json report = nlohmann::json::object();
  if (summary.validation_loss) {
    report["validation_loss"] = *summary.validation_loss;
    report["validation_tokens"] = summary.validation_tokens;
  }
  if (summary.hellaswag) {
    const MultipleChoiceScore& score = summary.hellaswag->score;
    report["hellaswag"] = {{"examples", score.examples},
                           {"right", score.right_by_mean},
                           {"accuracy", score.accuracy()},
                           {"right_by_sum", score.right_by_sum},
                           {"accuracy_by_sum", score.accuracy_by_sum()},
                           {"mean_losses", summary.hellaswag->mean_losses}};
  }
  write_file_atomically(path, report.dump() + "\n");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

EvaluateSummary evaluate_on_rank(const EvaluationInputs& in, RankState& rank,
                                 const EvaluateOptions& options, bool leader) {
  const schema::Training& training = *in.loaded.plan().training();
  load_distributed_weights(in.weights, *rank.stage, *rank.optimizer);
  EvaluateSummary summary;
  char line[512];
  if (in.validation) {
    const auto start = std::chrono::steady_clock::now();
    summary.validation_loss =
        evaluate(rank, *in.validation, training, in.validation_batches, in.validation_name);
    summary.validation_tokens =
        int64_t{in.validation_batches} * training.global_batch_size() * in.model.config.seq_len;
    std::snprintf(line, sizeof line,
                  "validation: loss %.4f over %lld tokens (%d batches) in %.1f s, of ",
                  *summary.validation_loss, static_cast<long long>(summary.validation_tokens),
                  in.validation_batches, seconds_since(start));
    if (leader) std::cout << line << in.validation_name << std::endl;
  }
  if (in.hellaswag) {
    const auto start = std::chrono::steady_clock::now();
    summary.hellaswag =
        evaluate_multiple_choice(rank, *in.hellaswag, training, "--hellaswag " + options.hellaswag);
    const MultipleChoiceScore& score = summary.hellaswag->score;
    std::snprintf(line, sizeof line,
                  "hellaswag: %lld/%lld = %.4f (lowest mean loss per token, llm.c's figure); by "
                  "summed loss %.4f; in %.1f s",
                  static_cast<long long>(score.right_by_mean),
                  static_cast<long long>(score.examples), score.accuracy(), score.accuracy_by_sum(),
                  seconds_since(start));
    if (leader) std::cout << line << std::endl;
  }
  if (leader && !options.report_path.empty()) write_report(options.report_path, summary);
  return summary;
}

}  // namespace

EvaluateSummary evaluate_checkpoint(const EvaluateOptions& options) {
  MpiSession session;
  try {
    const EvaluationInputs in = validate_evaluation(options, session);
    const bool leader = session.world_rank() == 0;
    if (leader) print_header(in, options, session.world_size());
    RankState rank = build_rank_state(
        in.loaded, in.model, in.mesh, session,
        RankBuildOptions{.backend = options.backend,
                         .transport = options.transport,
                         .wrap_groups = {},
                         .wrap_ops = {},
                         .collective_timeout_seconds = options.collective_timeout_seconds});
    try {
      return evaluate_on_rank(in, rank, options, leader);
    } catch (const std::exception& error) {
      // Ended while `rank` lives, as train does (trainer.cc): unwinding would
      // wait in NCCL's teardown for peers that wait for this rank.
      if (session.world_size() > 1) MpiSession::abort_job(error.what());
      throw;
    }
  } catch (const std::exception& error) {
    if (session.world_size() > 1) MpiSession::abort_job(error.what());
    throw;
  }
}

}  // namespace paraplan
