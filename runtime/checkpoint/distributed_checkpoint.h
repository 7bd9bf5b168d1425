// distributed_checkpoint.h: plan-independent checkpoints of a multi-rank job.
//
// Checkpoints hold whole tensors by name (checkpoint.h), never per-rank
// shards, so a run saved under one plan resumes under another.
//
// Saving goes a tensor at a time, each tensor written by one of its stage's
// writers: a tensor rank's ZeRO rank in the first ZeRO group (without ZeRO
// any data rank: each holds all the state), so a job with neither tensor nor
// pipeline parallelism still writes from every rank of that group. Each ZeRO rank
// sends its part of the tensor to the writer's ZeRO rank
// (DistributedOptimizer::read_range), the writer's tensor peers send their
// slices, and the writer streams the tensor whole into a file of its own
// (model-0000k-of-0000n.safetensors, optimizer-0000k-of-0000n), with
// model.safetensors.index.json naming each tensor's file as transformers'
// sharded checkpoints do (a single writer writes model.safetensors). No rank
// holds more than one whole tensor beside its own state, so a 70B model's
// checkpoint never sits in one host's memory.
//
// Loading: every rank reads the parts of its slices it keeps
// (DistributedOptimizer::held_ranges), a tensor at a time.
//
// Every writer must see the directory: --checkpoint-dir on a filesystem the
// nodes share (a writer that cannot see it stops, naming it).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/model_stage.h"
#include "runtime/parallel/distributed_optimizer.h"
#include "runtime/parallel/parallel_state.h"
#include "schema/plan_io.h"

namespace paraplan {

// Collective over the world. Returns the step directory written (on world
// rank 0; empty elsewhere). Parameters are the optimizer's fp32 master
// weights (the stage's own under fp32). World rank 0 makes the directory
// aside, indexes the files once every writer is done, and runs
// before_publish as save_checkpoint says.
std::string save_distributed_checkpoint(const std::string& dir, const LoadedPlan& plan,
                                        ModelStage& stage, DistributedOptimizer& optimizer,
                                        ProcessGroups& groups, const TrainState& state,
                                        const std::function<void()>& before_publish = {});

// How a save's writers write in the background.
struct BackgroundWrite {
  // The ranks sharing this node's memory, each holding a share about this
  // rank's size: a writer whose node would need more than 80% of the memory
  // available writes its share in line instead (PendingCheckpoint::in_line_note).
  int ranks_on_node = 1;
  // Runs on the writing thread first (the tests inject a failure or a delay
  // there); what it throws fails the save as a write would.
  std::function<void()> before_writing;
};

// A save whose files are still being written on a thread of each writer
// (`train --checkpoint-async`, torchtitan's async checkpointing): the
// transfers are done and each writer holds a copy of its share in host
// memory, so training goes on while the filesystem takes the bytes. The job
// publishes it once every rank's progress is kWritten (the trainer agrees on
// the largest progress of all ranks at each step's all-reduce).
class PendingCheckpoint {
 public:
  // Ordered: the job's progress is the largest of its ranks'.
  enum class Progress { kWritten = 0, kWriting = 1, kFailed = 2 };
  struct Save;

  // Waits for this rank's writes, except while an exception unwinds (the job
  // is ending: the thread is left to the process's end).
  ~PendingCheckpoint();
  PendingCheckpoint(const PendingCheckpoint&) = delete;
  PendingCheckpoint& operator=(const PendingCheckpoint&) = delete;

  int64_t step() const { return step_; }
  Progress progress() const;           // this rank's files
  const std::string& failure() const;  // why they failed, once kFailed
  // Why this rank wrote its share in line instead (too little memory to hold
  // it); "" when it did not.
  const std::string& in_line_note() const;
  void wait();  // until this rank's files are written or failed
  // Collective over the world, once the job's progress is kFailed: the
  // failure of the lowest world rank whose write failed, with its reason, the
  // same text on every rank (so the job ends with it whichever rank ends it).
  std::string job_failure(Communicator& world) const;
  // Once every rank's files are written: on world rank 0, indexes them and
  // publishes the step directory (before_publish as save_checkpoint says) and
  // returns it; elsewhere returns "". Not collective.
  std::string publish(const std::function<void()>& before_publish = {});

 private:
  friend std::unique_ptr<PendingCheckpoint> start_distributed_checkpoint(
      const std::string&, const LoadedPlan&, ModelStage&, DistributedOptimizer&, ProcessGroups&,
      const TrainState&, const BackgroundWrite&);
  PendingCheckpoint(std::unique_ptr<Save> save, int64_t step);

  std::unique_ptr<Save> save_;
  int64_t step_ = 0;
};

// Collective over the world: the transfers of save_distributed_checkpoint,
// then each writer writes its files on a thread of its own from a copy of its
// share (BackgroundWrite says when it writes in line instead).
std::unique_ptr<PendingCheckpoint> start_distributed_checkpoint(
    const std::string& dir, const LoadedPlan& plan, ModelStage& stage,
    DistributedOptimizer& optimizer, ProcessGroups& groups, const TrainState& state,
    const BackgroundWrite& background = {});

// Why a writer whose share is `share_bytes` writes it in line rather than
// holding it for the background: its node's `ranks_on_node` ranks (each
// holding about as much) would need more than 80% of `available_bytes`; ""
// when they fit, or when the memory available is unknown (0).
std::string background_write_refusal(double share_bytes, int ranks_on_node, double available_bytes,
                                     int world_rank);

// Every rank loads its own slice; not collective.
TrainState load_distributed_checkpoint(const std::string& path, ModelStage& stage,
                                       DistributedOptimizer& optimizer);

// The weights alone, from a checkpoint or a Hugging Face model directory
// (model.safetensors or its index and shards, + config.json), every rank its
// own slice; the optimizer's
// moments stay as they are (zero in a fresh run). Not collective.
void load_distributed_weights(const std::string& path, ModelStage& stage,
                              DistributedOptimizer& optimizer);

}  // namespace paraplan
