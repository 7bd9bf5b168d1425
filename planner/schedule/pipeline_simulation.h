// pipeline_simulation.h: one training step's instruction streams (schedule.h)
// played out in time, for devices that share cores: the CPU backend's ranks,
// more of them than the node has cores, compute at the share of the cores
// the ranks computing at that moment leave them. A stage waiting in its
// pipeline bubble leaves its share to the others, so warm-up and cool-down
// compute runs faster than the steady state; the closed form of stage_cost.h
// ((m + p - 1) x slowest slot + tail) assumes every rank always busy.
//
// Model: every rank of a stage does the same as the stage's others. A
// Forward, Backward, BackwardInput or BackwardWeight (of one of the v chunks:
// 1 / v of the stage's work) is its compute followed by its tensor-parallel
// collectives, both work (seconds at a dedicated core's speed: on the CPU
// backend a collective is the ranks' own copies and reductions), then its
// waits for the tensor-parallel group's last member (wall time); a node's
// rank keeps its core (rank mod the cores: Linux does not move a busy
// process to a core that falls idle), a core is shared by the ranks working
// on it, and a stage goes at its slowest rank's pace. Transfers are posted
// (schedule.h): a Send or Recv posts its end and goes on; a message moves
// once both ends are posted, on devices of their own completing p2p seconds
// after the later post; on shared cores the sender copies it when posting
// and the receiver when its consumer starts (p2p seconds of work each: a
// CPU rank's MPI transfer is its own memcpy). A compute op waits for the
// messages it consumes (and a backward for its chunk's last input-gradient
// send), ReduceGradients for every send. ReduceGradients is its
// reduction's work; OptimizerStep waits for every stage (the gradient norm's
// all-reduce over the world), then does its work. The step ends when the
// last stage's optimizer step does.
#pragma once

#include <vector>

#include "planner/schedule/schedule.h"

namespace paraplan {

struct SimulatedStageInput {
  double forward_work = 0, backward_work = 0;  // per micro-batch, dedicated-core seconds
  // Per micro-batch: the tensor-parallel collectives' work.
  double forward_collectives = 0, backward_collectives = 0;
  // Per micro-batch: after those collectives, waiting for the group's last
  // member (wall time; the rank's core is free meanwhile).
  double forward_group_waits = 0, backward_group_waits = 0;
  double p2p_seconds = 0;     // per message this stage sends
  double reduction_work = 0;  // per step: the gradient reduction
  double optimizer_work = 0;  // per step, dedicated-core seconds
  // The share of backward_work a BackwardWeight does (the rest is its
  // BackwardInput's); with v chunks each chunk's op does 1 / v of the work.
  double weight_fraction = 0;
};

struct SimulatedStage {
  // Mean wall time of the compute per micro-batch (its work, or more while
  // other ranks compute too), and the optimizer step's.
  double forward_wall = 0, backward_wall = 0, optimizer_wall = 0;
  // Per step, the transfers: sends x p2p seconds on devices of their own,
  // on shared cores the copies' work (both ends of every message).
  double transfer_seconds = 0;
  // The step less the stage's work and transfers: waiting for
  // the other stages (the bubble) and for a core (computing slower than a
  // dedicated core while the others compute too).
  double waiting_seconds = 0;
};

struct SimulatedStep {
  double step_seconds = 0;
  std::vector<SimulatedStage> stages;
};

// ranks_per_stage: data x tensor parallel; cores: the node's cores shared by
// all its ranks (every stage here on one node), or <= 0 for a device each.
SimulatedStep simulate_step(const PipelineSchedule& schedule,
                            const std::vector<SimulatedStageInput>& stages, int ranks_per_stage,
                            double cores);

// simulate_step's step on devices of their own with no
// communication time and no collectives, in time linear in the ops: every
// rank runs its stream in order, a compute op as soon as the rank is free and
// the messages it needs are posted at both ends (its activation; a backward
// its output gradient and its chunk's last input-gradient send, whose buffer
// it writes again), a Send or Recv posting its end when the stream reaches
// it. forward and backward per micro-batch and rank (a chunk's op does
// 1 / v), weight_fraction of backward in a BackwardWeight. The cost model's
// bubbles (PipelineSimulation.DependencyBoundStepIsSimulateStepsStep holds
// them equal). Throws std::logic_error if the streams cannot all run.
double dependency_bound_step(const PipelineSchedule& schedule, double forward, double backward,
                             double weight_fraction);

}  // namespace paraplan
