// distributed_checkpoint.h: plan-independent checkpoints of a multi-rank job.
//
// Checkpoints hold whole tensors by name (checkpoint.h), never per-rank
// shards, so a run saved under one plan resumes under another. Saving goes a
// tensor at a time: each ZeRO rank sends its part of the tensor to the first
// of its group (DistributedOptimizer::read_range), and the ranks of
// data-parallel (and context) rank 0, one per pipeline stage and tensor rank,
// write in parallel. Each writes its share of its stage's tensors, whole (its
// tensor peers send it their slices), to a file of its own: model-0000k-of-0000n.safetensors and
// optimizer-0000k-of-0000n, with model.safetensors.index.json naming each tensor's file, as
// transformers' sharded checkpoints do (a single writer writes model.safetensors). No rank holds
// more than one whole tensor, so a 70B model's checkpoint (or a ZeRO-3 stage, the whole model where
// nothing else splits it) never sits in one host's memory. Loading: every rank reads its slice of
// each tensor its layout holds, a tensor at a time, and keeps the part it owns
// (DistributedOptimizer::load_range).
// Every writer must see the directory: --checkpoint-dir on a filesystem the
// nodes share (a writer that cannot see it stops naming it).
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
