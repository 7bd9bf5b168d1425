// rank_state.h: everything one rank holds to run a plan — the op set, the
// memory tracker, the process groups, its stage's layout and model, the
// distributed optimizer and the instruction executor — built the same way by
// `paraplan train` and `paraplan replay`.
//
// The caller validates first (plan, world size, data) and builds after, so a
// bad input is refused before anything is allocated.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kernels/ops.h"
#include "kernels/sync_counting_ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/model/architecture.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/model/model_from_plan.h"
#include "runtime/parallel/distributed_optimizer.h"
#include "runtime/parallel/parallel_state.h"
#include "runtime/pipeline/schedule_executor.h"
#include "schema/plan_io.h"

namespace paraplan {

struct RankState {
  RankState() = default;
  // Moved only as build_rank_state returns it: the optimizer keeps a
  // reference to `groups`, which a move elsewhere would leave behind.
  RankState(RankState&&) = default;
  RankState& operator=(RankState&&) = delete;
  // Waits for the last step's parameter all-gathers (ZeRO-1 starts them
  // after the optimizer step; on NCCL they write into the parameters until
  // they finish) before the parameters are freed. Not while an exception
  // unwinds: the job is ending, and a peer may never finish its half.
  ~RankState();

  std::unique_ptr<kernels::Ops> ops;  // the backend, wrapped by sync_counter
  // Counts the host synchronizations of everything built on ops (the step
  // log and replay report them per step); points into ops.
  kernels::SyncCountingOps* sync_counter = nullptr;
  std::unique_ptr<MemoryTracker> memory;
  ProcessGroups groups;
  std::unique_ptr<ParameterLayout> layout;
  std::unique_ptr<ModelStage> stage;
  std::unique_ptr<DistributedOptimizer> optimizer;
  std::unique_ptr<ScheduleExecutor> executor;
  PipelinePeers pipeline;  // where the executor's transfers go
};

struct RankBuildOptions {
  std::string backend = "cpu";  // cpu | cuda
  // auto | mpi | nccl | staged (transport.h); auto: plain MPI for the CPU
  // backend, NCCL for CUDA with one GPU per rank, else staged MPI.
  std::string transport = "auto";
  // > 0: allocations past this many bytes fail with OutOfDeviceMemory.
  uint64_t memory_capacity_bytes = 0;
  // Called on the process groups before the stage and optimizer take them,
  // with the rank's ops: replay wraps each communicator to time it (on a
  // device, between synchronizations of the ops).
  std::function<void(ProcessGroups&, kernels::Ops&)> wrap_groups;
  // Called on the backend's ops before anything uses them (a test stubs the
  // compute to count synchronizations of a large model's step in no time).
  std::function<std::unique_ptr<kernels::Ops>(std::unique_ptr<kernels::Ops>)> wrap_ops;
  // Seconds a collective or pipeline transfer may take before the job ends
  // with a message naming the rank, group and operation (watchdog.h); 0 waits
  // forever.
  double collective_timeout_seconds = 600;
  // The context the rank's checkpoints record (TransformerConfig::
  // max_positions: the model a run started from may serve more than seq_len).
  int max_positions = 0;
};

// The compute threads each rank of this node gets on the CPU backend: the
// cores shared among the node's ranks (at least 1).
int cpu_threads_per_rank(const MpiSession& session);

// The op set for --backend: "cpu" (OpenBLAS threads shared among the ranks of
// this node) or "cuda" (the GPU of this node-local rank), storing tensors in
// `storage` (the plan's model.dtype).
std::unique_ptr<kernels::Ops> make_backend(const std::string& name, const MpiSession& session,
                                           kernels::DType storage = kernels::DType::kFloat32);

// This rank's place in the plan's mesh; throws unless the job has exactly the
// plan's pipeline x data x tensor ranks (before anything is allocated).
MeshCoordinates place_this_rank(const LoadedPlan& loaded, const MpiSession& session);

// Builds this rank's part of the plan for mesh position `mesh`; the parameters
// are allocated but not initialized (see initialize_parameters). With MPI, the
// process groups use the transport chosen from options.transport (rank 0 logs
// which and why); without mpirun, one-rank local groups.
RankState build_rank_state(const LoadedPlan& loaded, const StageModelSpec& model,
                           const MeshCoordinates& mesh, const MpiSession& session,
                           const RankBuildOptions& options);

// The executor hooks of a training step: the optimizer's bucketed gradient
// reduction and parameter gathering around optimizer_step (which calls
// optimizer.step with the step's learning rate).
ExecutorHooks optimizer_hooks(DistributedOptimizer& optimizer,
                              std::function<void()> optimizer_step);

// The job's sum of the per-token losses every rank's stage computed
// (ScheduleExecutor::run_step, ModelStage::take_loss_sum): counted once per
// tensor group (the head's tensor rank 0; the rank's last chunk holds the
// head, if the rank does) and summed over the world, so every rank gets it.
// A collective: every rank calls it.
double job_loss_sum(RankState& rank, double stage_loss_sum);

// Fills the stage's parameters with the model's counter-based initialization
// (the same values for every plan).
void initialize_parameters(RankState& rank, uint64_t seed);

}  // namespace paraplan
