// schedule_executor.h: interprets one pipeline stage's instruction stream from
// the plan. The schedules themselves (1F1B, GPipe) are built by the planner
// (planner/schedule.cc) and checked by schema/plan_validate_schedule.cc; this
// file only runs them.
//
// The runtime never decides: the order of loads, forwards, backwards,
// transfers, the gradient reduction and the optimizer step is the plan's. The
// executor maps each in-flight micro-batch to an activation slot of the stage
// (micro-batch i -> slot i mod slots; the streams are first-in first-out) and
// hands the reduction and the optimizer step back to the caller, which owns
// the communicators and the optimizer.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "plan_generated.h"
#include "runtime/comm/communicator.h"
#include "runtime/data/sample_source.h"
#include "runtime/model/model_stage.h"

namespace paraplan {

// Where a stage's transfers go: world ranks of its pipeline neighbours.
struct PipelinePeers {
  PeerToPeer* peers = nullptr;
  int previous_stage_rank = -1;
  int next_stage_rank = -1;
};

struct ExecutorHooks {
  std::function<void()> reduce_gradients;
  std::function<void()> optimizer_step;
  // Passed to the backward of the step's last micro-batch (ModelStage::backward):
  // starts the data-parallel reduction of finished gradient buckets.
  std::function<void(size_t)> gradients_final_from;
  // Before the step's first forward: waits for parameters still being
  // gathered from the previous step (ZeRO-1).
  std::function<void()> before_first_forward;
};

// Told before and after every instruction (replay times them). The executor
// synchronizes the device before each call, so the time between the two calls
// is the instruction's own, not queued work of an earlier one.
class InstructionObserver {
 public:
  virtual ~InstructionObserver() = default;
  virtual void before(const schema::Instruction& instruction) = 0;
  virtual void after(const schema::Instruction& instruction) = 0;
};

class ScheduleExecutor {
 public:
  // The activation slots a stream needs: the most micro-batches forwarded and
  // not yet backwarded at any point. Throws if the stream is not first-in
  // first-out (backwards in a different order than forwards).
  static int slots_needed(const schema::StageSchedule& schedule);

  ScheduleExecutor(const schema::StageSchedule& schedule, ModelStage& stage, kernels::Ops& ops,
                   int num_micro_batches, int data_parallel_rank, PipelinePeers pipeline = {});

  // Runs one optimizer step's instructions. Micro-batch j of this replica
  // reads samples first_sample + (data_parallel_rank * m + j) * B, ..., so the
  // data order depends on the global sample index only. Returns the sum of
  // the per-token losses this stage computed (0 on stages without the head),
  // read from the device once, at the end.
  double run_step(const SampleSource& data, int64_t first_sample, float loss_scale,
                  const ExecutorHooks& hooks, InstructionObserver* observer = nullptr);

 private:
  int slot_of(int micro_batch) const { return micro_batch % stage_.num_slots(); }
  void execute(const schema::Instruction& instruction, const SampleSource& data,
               int64_t first_sample, float loss_scale, const ExecutorHooks& hooks);
  // One paired transfer; -1 peers or null buffers skip a half.
  void transfer(const void* send, int send_to, void* receive, int receive_from);

  std::vector<schema::Instruction> instructions_;
  ModelStage& stage_;
  kernels::Ops& ops_;
  int num_micro_batches_;
  int data_parallel_rank_;
  PipelinePeers pipeline_;
  // The micro-batch whose output gradient sits in the stage's receive buffer.
  int gradient_holder_ = -1;
  bool first_forward_done_ = false;                  // this step
  std::vector<int32_t> host_tokens_, host_targets_;  // staging, reused every step
};

}  // namespace paraplan
