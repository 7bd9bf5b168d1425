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
