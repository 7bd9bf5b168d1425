// schedule_executor.h: interprets one pipeline stage's instruction stream from
// the plan. The schedules themselves are built by the planner
// (planner/schedule/) and checked by schema/plan_validate_schedule.cc; this
// file only runs them. Transfers are posted (plan.fbs Transfers): a Send or
// Recv starts its transfer and returns; the compute that reads or
// overwrites its buffer waits for it.
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
#include <string>
#include <utility>
#include <vector>

#include "plan_generated.h"
#include "runtime/comm/communicator.h"
#include "runtime/data/sample_source.h"
#include "runtime/model/model_stage.h"
#include "runtime/pipeline/zero_unit_program.h"
#include "schema/pipeline_layout.h"

namespace paraplan {

// Where a rank's transfers go: world ranks of its pipeline neighbours. With
// several model chunks per rank (virtual stages, schema/pipeline_layout.h),
// chunk c's neighbours are the virtual stages before and after its own:
// round robin, chunk c of the last rank feeds chunk c + 1 of the first, so
// the first and last ranks also talk to each other (first_stage_rank,
// last_stage_rank); in ZB-V's V the last rank's chunk 0 feeds its own chunk
// 1, a local hand-off (own_rank).
struct PipelinePeers {
  PeerToPeer* peers = nullptr;
  int previous_stage_rank = -1;
  int next_stage_rank = -1;
  int pipeline_rank = 0, pipeline_size = 1;
  int first_stage_rank = -1;  // the last rank: the world rank of pipeline rank 0
  int last_stage_rank = -1;   // the first rank: the world rank of pipeline rank p - 1
  int own_rank = -1;          // this rank's world rank
  // Which virtual stage each chunk is; v_shape as the schedule kind says.
  bool v_shape = false;

  PipelineLayout layout(int num_chunks) const {
    return PipelineLayout(pipeline_size, num_chunks, v_shape);
  }
};

// World ranks of chunk c's neighbour virtual stages (of num_chunks per rank):
// the next one (activations go there) and the previous one (gradients go
// there); -1 for none, own_rank for a chunk of this rank.
int next_virtual_stage_rank(const PipelinePeers& pipeline, int chunk, int num_chunks);
int previous_virtual_stage_rank(const PipelinePeers& pipeline, int chunk, int num_chunks);
// The PeerToPeer tag of the link from chunk c's virtual stage to the next
// one and from the previous one (each link its own, so chunks' messages
// between two ranks stay apart).
int next_link_tag(const PipelinePeers& pipeline, int chunk, int num_chunks);
int previous_link_tag(const PipelinePeers& pipeline, int chunk, int num_chunks);

struct ExecutorHooks {
  std::function<void()> reduce_gradients;
  std::function<void()> optimizer_step;
  // Told, as the step's last Backward / BackwardWeight of each chunk passes
  // them, the buffer offsets from which no gradient will be written again this
  // step (ModelStage::backward; offsets into the rank's buffer, falling):
  // starts the data-parallel reduction of finished gradient buckets.
  std::function<void(size_t)> gradients_final_from;
  // ZeRO-2 and 3 (plan.fbs's unit ops; unset below): runs a
  // GatherParameters, ReleaseParameters or ReduceScatterGradients; names the
  // (chunk, unit) whose gradients begin at a rank-buffer offset a backward
  // reports finished; and, while a step's stream runs, installs what is
  // told each (chunk, unit) a compute has read for the last time (null
  // uninstalls it; ZeRO-3's reads need their units gathered while installed).
  std::function<void(const schema::Instruction&)> run_zero_unit_op;
  std::function<std::pair<int, int>(size_t)> zero_unit_of;
  std::function<void(std::function<void(int, int)>)> watch_zero_unit_reads;
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
  // Per model chunk of the rank, the buffers its stream needs: slots, the
  // most micro-batches holding one at any point, from the first instruction
  // writing into it (load, received activation, forward) to the Backward,
  // or the BackwardWeight after a BackwardInput; and whether each slot needs
  // its own received output gradient (schema/stream_check.h's rule: a
  // receive not at its consumer may land while the input gradient, in the
  // one shared buffer otherwise, is in use). Throws if a chunk's slots are not taken
  // in micro-batch order or
  // its backwards are not first-in first-out, or a BackwardWeight does not
  // follow its BackwardInput in that order.
  struct ChunkBuffers {
    int slots = 1;
    bool output_gradient_per_slot = false;
    bool operator==(const ChunkBuffers&) const = default;
  };
  static std::vector<ChunkBuffers> buffers_needed(const schema::StageSchedule& schedule,
                                                  int num_chunks = 1);

  // stage: the rank's model (its chunks: ModelStage::chunk).
  ScheduleExecutor(const schema::StageSchedule& schedule, ModelStage& stage, kernels::Ops& ops,
                   int num_micro_batches, int data_parallel_rank, PipelinePeers pipeline = {});
  ~ScheduleExecutor();
  ScheduleExecutor(const ScheduleExecutor&) = delete;
  ScheduleExecutor& operator=(const ScheduleExecutor&) = delete;

  // Runs one optimizer step's instructions. Micro-batch j of this replica
  // reads samples first_sample + (data_parallel_rank * m + j) * B, ..., so the
  // data order depends on the global sample index only. Returns the sum of
  // the per-token losses this stage computed (0 on stages without the head),
  // read from the device once, at the end.
  double run_step(const SampleSource& data, int64_t first_sample, float loss_scale,
                  const ExecutorHooks& hooks, InstructionObserver* observer = nullptr);

 private:
  struct Chunk {
    ModelStage* stage = nullptr;
    int next_rank = -1, previous_rank = -1;  // world ranks of its neighbour virtual stages
    int next_tag = 0, previous_tag = 0;      // the links' PeerToPeer tags
    // The chunks of this rank at the other end of a local hand-off (-1: the
    // neighbour is on another rank, or none).
    int next_local = -1, previous_local = -1;
    // Per slot, the micro-batch whose received output gradient waits for its
    // backward (-1: none); the micro-batch whose input gradient waits to be sent.
    std::vector<int> received;
    int input_gradient_of = -1;
    bool output_gradient_per_slot = false;
    // The index of the step's last instruction finishing its gradients (its
    // last Backward or BackwardWeight), and whether it has run this step.
    size_t last_backward = 0;
    bool finished = false;
    // Posted transfers not yet waited on (0: none): per slot the receive of
    // its input activation and of its output gradient; the input-gradient send.
    // Per slot also its output's send, which the slot's next forward overwrites.
    std::vector<PeerToPeer::Posted> activation_receive, gradient_receive, activation_send;
    PeerToPeer::Posted input_gradient_send = 0;
    // Per slot, an Ops mark after the last compute that read its buffers (the
    // input activation, the output gradient): a posted receive into the slot
    // waits for that, not for all the compute queued before it.
    std::vector<void*> slot_free;
    // With one output-gradient buffer (not per slot): an Ops mark after the
    // chunk's last Backward / BackwardInput, which read and rewrote it; a
    // gradient received into it waits for that and for the input gradient's
    // send out of it (PeerToPeer's after_send), not for later forwards.
    void* gradient_buffer_free = nullptr;
  };
  static int slot_of(const Chunk& chunk, int micro_batch) {
    return micro_batch % chunk.stage->num_slots();
  }
  void execute(size_t index, const SampleSource& data, int64_t first_sample, float loss_scale,
               const ExecutorHooks& hooks);
  // Tells hooks.gradients_final_from what chunk c's last backward finished:
  // offsets within the chunk, shifted to the rank's buffer, and only once
  // every chunk after it in the buffer is finished too (the offsets fall).
  std::function<void(size_t)> final_from_hook(int c, const ExecutorHooks& hooks);
  // What a backward of chunk c tells: the unit ops' program which units it
  // finished, and for the step's last (finishes) final_from_hook's too.
  std::function<void(size_t)> backward_hook(int c, bool finishes, const ExecutorHooks& hooks);
  // A compute instruction with the unit ops that belong to it (those after
  // it): `compute` runs between the program's begin and end.
  void run_compute(size_t index, const ExecutorHooks& hooks, const std::function<void()>& compute);
  // A Forward's or Backward's launches, through Ops::run_recorded (which may
  // record them once and replay them: CUDA graphs) where the chunk's stage
  // says they replay and the step does no host work the caller needs
  // (tells_the_host: a backward reporting gradients final); else run.
  void compute_step(const Chunk& chunk, const schema::Instruction& instruction, float loss_scale,
                    bool tells_the_host, const std::function<void()>& launches);
  [[noreturn]] static void refuse(const schema::Instruction& instruction,
                                  const std::string& problem);
  // Bookkeeping of the slots' received gradients and the chunk's one input
  // gradient: refuses a stream that would overwrite either before it is used.
  static void receive_output_gradient(Chunk& chunk, const schema::Instruction& instruction,
                                      int micro_batch);
  static void send_input_gradient(Chunk& chunk, const schema::Instruction& instruction);
  // Starts the instruction's transfer; waits for what a compute op is about
  // to read or overwrite (or a gradient's receive into the chunk's one
  // buffer); all sends before the reduction.
  void post(Chunk& chunk, const schema::Instruction& instruction);
  void wait_before(Chunk& chunk, const schema::Instruction& instruction);
  void wait_for_sends();
  void wait_for_send(PeerToPeer::Posted& send);  // and forgets it
  // A Send / Recv between two chunks of this rank: the Recv copies what its
  // Send, the instruction before, left in the sending chunk's buffer.
  void hand_off(Chunk& chunk, const schema::Instruction& instruction);

  std::vector<schema::Instruction> instructions_;
  // Per instruction: a unit op belonging to the compute before it (run by
  // program_, not when the loop reaches it).
  std::vector<bool> belongs_to_compute_;
  ZeroUnitProgram program_;
  ModelStage& stage_;
  std::vector<Chunk> chunks_;
  kernels::Ops& ops_;
  int num_micro_batches_;
  int data_parallel_rank_;
  PipelinePeers pipeline_;
  bool first_forward_done_ = false;                  // this step
  std::vector<PeerToPeer::Posted> sends_in_flight_;  // posted, not waited on
  std::vector<int32_t> host_tokens_, host_targets_;  // staging, reused every step
};

}  // namespace paraplan
