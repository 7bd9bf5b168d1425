// distributed_checkpoint.h: plan-independent checkpoints of a multi-rank job.
//
// Checkpoints hold whole tensors by name (checkpoint.h), never per-rank
// shards, so a run saved under one plan resumes under another. Saving: the
// ZeRO-1 moment shards are gathered within each ZeRO group, then every rank of
// data-parallel rank 0 sends its parameters and moments to world rank 0, which
// places each element by its global index and writes the checkpoint. Loading:
// every rank reads the whole checkpoint and keeps its own slice (each rank
// holds the whole model in host memory for a moment: fine for the models the
// CPU backend trains; a sharded reader is the remedy for large ones).
#pragma once

#include <string>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/model_stage.h"
#include "runtime/parallel/distributed_optimizer.h"
#include "runtime/parallel/parallel_state.h"
#include "schema/plan_io.h"

namespace paraplan {

// Collective over the world. Returns the step directory written. Parameters
// are the optimizer's fp32 master weights (the stage's own under fp32).
// World rank 0 writes, and runs before_publish as save_checkpoint says.
std::string save_distributed_checkpoint(const std::string& dir, const LoadedPlan& plan,
                                        ModelStage& stage, DistributedOptimizer& optimizer,
                                        ProcessGroups& groups, const TrainState& state,
                                        const std::function<void()>& before_publish = {});

// Every rank loads its own slice; not collective.
TrainState load_distributed_checkpoint(const std::string& path, ModelStage& stage,
                                       DistributedOptimizer& optimizer);

// The weights alone, from a checkpoint or a Hugging Face model directory
// (model.safetensors + config.json), every rank its own slice; the optimizer's
// moments stay as they are (zero in a fresh run). Not collective.
void load_distributed_weights(const std::string& path, ModelStage& stage,
                              DistributedOptimizer& optimizer);

}  // namespace paraplan
