// run_checkpoints.h: a training run's checkpoints, every rank taking part in
// each (distributed_checkpoint.h): saved in line, or (--checkpoint-async)
// transferred in line and written in the background, then published once the
// step's all-reduce says every rank's files are written. Rank 0 publishes
// only while the checkpoint directory is still this run's (checkpoint_lock.h)
// and removes, on a thread of its own, what --checkpoint-keep-latest no
// longer keeps (checkpoint_retention.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_lock.h"
#include "runtime/checkpoint/distributed_checkpoint.h"
#include "runtime/pipeline/rank_state.h"
#include "runtime/train/trainer.h"
#include "schema/plan_io.h"

namespace paraplan {

// The tokenizer file kept beside each checkpoint's config.json (as a Hugging
// Face model directory has it), so `paraplan sample` and transformers find it.
struct CheckpointTokenizer {
  // tokenizer.json (a given tiktoken file converted), or tokenizer.tiktoken
  // for a tiktoken file carried from where the run started.
  std::string name;
  std::string bytes;
};

// train --tokenizer (checked against the model's vocabulary; throws naming
// the file), else the one beside the checkpoint resumed from or the
// --init-from weights (tokenizer_file_in), kept unread; nullopt when there is
// none.
std::optional<CheckpointTokenizer> tokenizer_for_checkpoints(const std::string& given,
                                                             const std::string& started_from,
                                                             int64_t vocab_size,
                                                             const std::string& plan_path);

// What a run's saves need besides the rank.
struct RunCheckpointInputs {
  const LoadedPlan& plan;
  DataOrderRecord train_order;        // recorded in each checkpoint
  CheckpointDirLock* lock = nullptr;  // rank 0's, with --checkpoint-dir
  bool leader = false;                // world rank 0: says, publishes, removes
  int ranks_on_node = 1;              // sharing this node's memory (BackgroundWrite)
  // The tests' injected faults at a background write of this rank: a
  // failure, or a 2 s delay, before writing the checkpoint of that step (-1:
  // none; a failure wins). A rank that writes no file has no write to fail
  // or delay.
  int failing_write_step = -1, slow_write_step = -1;
  std::optional<CheckpointTokenizer> tokenizer;  // rank 0's, written beside each save
};

class RunCheckpoints {
 public:
  RunCheckpoints(RunCheckpointInputs inputs, RankState& rank, const TrainOptions& options);
  ~RunCheckpoints();  // waits for a removal of old checkpoints

  // This rank's background write, for the step's all-reduce of the largest:
  // a PendingCheckpoint::Progress, kWritten (0) when there is none.
  double progress() const;

  // After the step's all-reduce: publishes the background save once every
  // rank has written its files; ends the run if one failed (collective then).
  void conclude(double job_progress);

  // The checkpoint of `step` (collective), in line when it is the run's last
  // (or not --checkpoint-async); a background save still being written is
  // waited for and published first.
  void save(int step, const TrainState& state, bool last);

 private:
  using Clock = std::chrono::steady_clock;
  std::function<void()> fence() const;
  BackgroundWrite background_write(int step) const;
  void announce(const std::string& written, int64_t step, const std::string& how);
  void remove_old(int64_t step);

  RunCheckpointInputs inputs_;
  RankState& rank_;
  const TrainOptions& options_;
  std::unique_ptr<PendingCheckpoint> pending_;
  Clock::time_point pending_started_;
  double loop_seconds_ = 0;  // what starting pending_ took of the training loop
  // The step directories this run published: all a run not resumed may
  // remove (the directory may hold an earlier, unrelated run's).
  std::set<std::string> published_;
  std::thread removal_;  // rank 0's removal of old checkpoints
};

}  // namespace paraplan
