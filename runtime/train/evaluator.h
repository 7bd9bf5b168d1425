// evaluator.h: `paraplan evaluate`: the validation loss and the HellaSwag
// accuracy of a checkpoint's weights (or a Hugging Face model directory's)
// under a plan, on every rank of the job: the plan's mesh, pipeline, tensor
// and context parallelism and micro-batching, forwards only. Any plan of the
// model gives the same figures (evaluation.h), so a model trained under one
// plan is measured under another, as large as the job. The ranks are built as
// training builds them (gradients and optimizer state allocated, unused): a
// model evaluates under any plan it could train under.
#pragma once

#include <optional>
#include <string>

#include "runtime/data/multiple_choice.h"

namespace paraplan {

struct EvaluateOptions {
  std::string plan_path;
  std::string checkpoint;  // a step directory, a checkpoint directory, or a Hugging Face model
  // Token files (data_paths.h); empty: the plan's [data] validation. One of
  // the two evaluations is required.
  std::string validation_data_path;
  std::string hellaswag;  // runtime/train/trainer.h's TrainOptions::hellaswag
  std::string tokenizer;  // for a .jsonl; empty: the one beside the weights
  // Global batches of validation data; 0: the plan's eval_batches. At most
  // one pass either way.
  int eval_batches = 0;
  // Optional: the figures as JSON, with each HellaSwag completion's mean loss
  // per token (written atomically by rank 0).
  std::string report_path;
  std::string backend = "cpu";
  double collective_timeout_seconds = 600;
  std::string transport = "auto";
};

struct EvaluateSummary {
  std::optional<double> validation_loss;
  int64_t validation_tokens = 0;
  std::optional<MultipleChoiceEvaluation> hellaswag;
};

// Prints the figures on rank 0 and returns them on every rank. Throws
// std::runtime_error naming the flag and the file on bad input; one rank's
// failure ends the job.
EvaluateSummary evaluate_checkpoint(const EvaluateOptions& options);

}  // namespace paraplan
