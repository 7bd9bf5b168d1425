// trainer.h: `paraplan train`: runs a plan's training job on this process.
//
// Validates everything (plan, world, backend, data, checkpoint) before it
// allocates, then steps: the stage's instruction stream over the micro-batches,
// gradient clipping by the global norm, AdamW with the plan's LR schedule,
// validation (and --hellaswag) every eval_interval steps, checkpoints every checkpoint_every
// steps and at the end. Logs one torchtitan-style line per step.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/data/multiple_choice.h"

namespace paraplan {

struct TrainOptions {
  std::string plan_path;
  // Token files: a path, a glob or a comma-separated list (data_paths.h).
  // Empty: the plan's [data] train (required then) and [data] validation.
  std::string data_path;
  std::string validation_data_path;
  int steps = -1;              // train until this step (absolute); -1: the plan's total_steps
  std::string checkpoint_dir;  // optional
  int checkpoint_every = 0;    // 0: only at the end
  // Also save once this long has passed since the last save (or the start):
  // bounds the work a failure loses whatever a step costs. 0: off.
  double checkpoint_every_seconds = 0;
  // Keep only the newest K step directories at or before each save
  // (checkpoint_retention.h); 0 keeps all.
  int checkpoint_keep_latest = 0;
  // Write each checkpoint but the last in the background: the transfers in
  // line, then every writer's files from a copy of its share in host memory
  // while training goes on (distributed_checkpoint.h: PendingCheckpoint).
  bool checkpoint_async = false;
  bool resume = false;  // continue from checkpoint_dir's latest checkpoint
  // Resume even though the data order differs from the checkpoint's
  // (train_state.json's data_order): its next_train_sample then counts in
  // the new order. Without it such a resume is refused.
  bool accept_data_order_change = false;
  // Start from these weights (a checkpoint, or a Hugging Face model directory:
  // model.safetensors + config.json) at step 0 with fresh optimizer state.
  std::string init_from;
  // Kept beside each checkpoint's config.json: tokenizer.json or a tiktoken
  // file (runtime/tokenizer/bpe_tokenizer.h). Empty: the one beside the
  // checkpoint resumed from or the --init-from weights, if any.
  std::string tokenizer;
  // A multiple-choice set scored at every evaluation (eval_interval and the
  // last step): llm.c's hellaswag_val.bin, or HellaSwag's .jsonl encoded with
  // the tokenizer (--tokenizer, else the one beside the weights started
  // from; bytes for a byte-level model). Empty: none.
  std::string hellaswag;
  std::string log_json;                     // optional: one JSON object per step
  std::string tensorboard_dir;              // optional: TensorBoard scalars per step
  std::string backend = "cpu";              // cpu | cuda
  double collective_timeout_seconds = 600;  // 0: wait forever (rank_state.h)
  std::string transport = "auto";           // auto | mpi | nccl | staged (transport.h)
};

struct TrainSummary {
  int first_step = 0;  // the step training started from (> 0 when resumed)
  int last_step = 0;
  std::vector<double> losses;                   // per step run
  std::vector<uint64_t> host_synchronizations;  // per step run, this rank's
  std::optional<double> final_validation_loss;
  std::optional<MultipleChoiceScore> final_hellaswag;
};

TrainSummary train(const TrainOptions& options);

}  // namespace paraplan
