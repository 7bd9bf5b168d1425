// schedule_executor.cc: the instruction interpreter of a pipeline rank.
#include "runtime/pipeline/schedule_executor.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>

#include "schema/plan_io.h"
#include "schema/stream_check.h"
#include "schema/zero_units.h"

namespace paraplan {

using schema::OpCode;

std::vector<ScheduleExecutor::ChunkBuffers> ScheduleExecutor::buffers_needed(
    const schema::StageSchedule& schedule, int num_chunks) {
  // Per chunk: the micro-batches holding a slot (from the first instruction
  // writing into it, a load, a received activation or the forward, to the
  // Backward or BackwardWeight), and those forwarded and not yet backwarded
  // or whose BackwardInput ran and BackwardWeight has not. Slots are taken in
  // micro-batch order and given back in that order, so the holders are
  // consecutive micro-batches and i mod slots tells them apart.
  struct ChunkSlots {
    std::deque<int> holding, forwarded, weight_pending;
    int next_to_hold = 0;
    size_t most = 1;
  };
  std::vector<ChunkSlots> chunks(num_chunks);
  const std::string where = "schedule of stage " + std::to_string(schedule.stage()) + ": ";
  const auto refuse = [&where](const std::string& what, int micro_batch, int chunk) {
    throw std::runtime_error(where + what + " of micro-batch " + std::to_string(micro_batch) +
                             " (chunk " + std::to_string(chunk) +
                             ") is out of first-in first-out order");
  };
  const auto hold = [&](ChunkSlots& chunk, int mb, int c) {
    if (!chunk.holding.empty() &&
        std::find(chunk.holding.begin(), chunk.holding.end(), mb) != chunk.holding.end())
      return;
    if (mb != chunk.next_to_hold) refuse("the first use of a slot", mb, c);
    ++chunk.next_to_hold;
    chunk.holding.push_back(mb);
    chunk.most = std::max(chunk.most, chunk.holding.size());
  };
  const auto release = [&](ChunkSlots& chunk, int mb, int c) {
    if (chunk.holding.empty() || chunk.holding.front() != mb) refuse("backward", mb, c);
    chunk.holding.pop_front();
  };
  for (const schema::Instruction* instruction : *schedule.instructions()) {
    const int c = instruction->chunk(), mb = instruction->micro_batch();
    if (c >= num_chunks)
      throw std::runtime_error(where + "chunk " + std::to_string(c) + " of a rank holding " +
                               std::to_string(num_chunks) + " chunks");
    ChunkSlots& chunk = chunks[c];
    switch (instruction->op()) {
      case OpCode::LoadMicroBatch:
      case OpCode::RecvActivation:
        hold(chunk, mb, c);
        break;
      case OpCode::RecvGradient:
        break;
      case OpCode::Forward:
        hold(chunk, mb, c);
        chunk.forwarded.push_back(mb);
        break;
      case OpCode::Backward:
      case OpCode::BackwardInput:
        if (chunk.forwarded.empty() || chunk.forwarded.front() != mb) refuse("backward", mb, c);
        chunk.forwarded.pop_front();
        if (instruction->op() == OpCode::BackwardInput)
          chunk.weight_pending.push_back(mb);
        else
          release(chunk, mb, c);
        break;
      case OpCode::BackwardWeight:
        if (chunk.weight_pending.empty() || chunk.weight_pending.front() != mb)
          refuse("BackwardWeight", mb, c);
        chunk.weight_pending.pop_front();
        release(chunk, mb, c);
        break;
      case OpCode::SendActivation:
      case OpCode::SendGradient:
      case OpCode::ReduceGradients:
      case OpCode::GatherParameters:
      case OpCode::ReleaseParameters:
      case OpCode::ReduceScatterGradients:
      case OpCode::OptimizerStep:
        break;
    }
  }
  // The stream checker's rule (schema/stream_check.h), which the planner's
  // verifier plays out too.
  const std::vector<bool> per_slot =
      output_gradient_per_slot(num_chunks, stream_ops(*schedule.instructions()));
  std::vector<ChunkBuffers> buffers;
  for (int c = 0; c < num_chunks; ++c)
    buffers.push_back({static_cast<int>(chunks[c].most), per_slot[c]});
  return buffers;
}

namespace {

// The world rank of pipeline rank `to`, a neighbour of this one or itself.
int world_rank_of(const PipelinePeers& pipeline, int to) {
  const int r = pipeline.pipeline_rank;
  if (to == r) return pipeline.own_rank;
  if (to == r + 1) return pipeline.next_stage_rank;
  if (to == r - 1) return pipeline.previous_stage_rank;
  if (to == 0) return pipeline.first_stage_rank;
  if (to == pipeline.pipeline_size - 1) return pipeline.last_stage_rank;
  throw std::logic_error("pipeline rank " + std::to_string(to) + " is no neighbour of rank " +
                         std::to_string(r));
}

}  // namespace

int next_virtual_stage_rank(const PipelinePeers& pipeline, int chunk, int num_chunks) {
  const PipelineLayout layout = pipeline.layout(num_chunks);
  const int vs = layout.virtual_stage(pipeline.pipeline_rank, chunk);
  if (vs == layout.last_virtual_stage()) return -1;
  return world_rank_of(pipeline, layout.rank_of(vs + 1));
}

int previous_virtual_stage_rank(const PipelinePeers& pipeline, int chunk, int num_chunks) {
  const PipelineLayout layout = pipeline.layout(num_chunks);
  const int vs = layout.virtual_stage(pipeline.pipeline_rank, chunk);
  if (vs == 0) return -1;
  return world_rank_of(pipeline, layout.rank_of(vs - 1));
}

int next_link_tag(const PipelinePeers& pipeline, int chunk, int num_chunks) {
  return pipeline.layout(num_chunks).virtual_stage(pipeline.pipeline_rank, chunk) %
         PeerToPeer::kMaxPeerTags;
}

int previous_link_tag(const PipelinePeers& pipeline, int chunk, int num_chunks) {
  return (pipeline.layout(num_chunks).virtual_stage(pipeline.pipeline_rank, chunk) +
          PeerToPeer::kMaxPeerTags - 1) %
         PeerToPeer::kMaxPeerTags;
}

ScheduleExecutor::ScheduleExecutor(const schema::StageSchedule& schedule, ModelStage& stage,
                                   kernels::Ops& ops, int num_micro_batches, int data_parallel_rank,
                                   PipelinePeers pipeline)
    : instructions_(stream_instructions(*schedule.instructions())),
      stage_(stage),
      ops_(ops),
      num_micro_batches_(num_micro_batches),
      data_parallel_rank_(data_parallel_rank),
      pipeline_(pipeline) {
  // Its keys (compute_step) say nothing of the stage: recordings of one
  // built before on these ops would replay into its freed buffers.
  ops_.forget_recorded();
  // Unit ops right after a compute (only unit ops between) belong to it.
  belongs_to_compute_.assign(instructions_.size(), false);
  for (size_t i = 1; i < instructions_.size(); ++i)
    belongs_to_compute_[i] =
        is_zero_unit_op(instructions_[i].op()) &&
        (is_compute_op(instructions_[i - 1].op()) || belongs_to_compute_[i - 1]);
  const int v = stage.num_chunks();
  const std::vector<ChunkBuffers> buffers = buffers_needed(schedule, v);
  for (int c = 0; c < v; ++c) {
    Chunk chunk;
    chunk.stage = &stage.chunk(c);
    chunk.received.assign(chunk.stage->num_slots(), -1);
    chunk.activation_receive.assign(chunk.stage->num_slots(), 0);
    chunk.gradient_receive.assign(chunk.stage->num_slots(), 0);
    chunk.activation_send.assign(chunk.stage->num_slots(), 0);
    chunk.output_gradient_per_slot = buffers[c].output_gradient_per_slot;
    chunk.next_rank = next_virtual_stage_rank(pipeline, c, v);
    chunk.previous_rank = previous_virtual_stage_rank(pipeline, c, v);
    chunk.next_tag = next_link_tag(pipeline, c, v);
    chunk.previous_tag = previous_link_tag(pipeline, c, v);
    chunk.next_local = pipeline.layout(v).local_neighbour(pipeline.pipeline_rank, c, true);
    chunk.previous_local = pipeline.layout(v).local_neighbour(pipeline.pipeline_rank, c, false);
    chunks_.push_back(chunk);
  }
  for (size_t i = 0; i < instructions_.size(); ++i) {
    const schema::Instruction& instruction = instructions_[i];
    if (instruction.chunk() >= v)
      throw std::runtime_error("schedule: " + std::string(opcode_name(instruction.op())) +
                               " of chunk " + std::to_string(instruction.chunk()) +
                               " on a rank holding " + std::to_string(v) + " model chunks");
    const bool finishes =
        instruction.op() == OpCode::Backward || instruction.op() == OpCode::BackwardWeight;
    if (finishes) chunks_[instruction.chunk()].last_backward = i;
  }
  const size_t tokens =
      static_cast<size_t>(stage.micro_batch_size()) * stage.layout().config().seq_len;
  host_tokens_.resize(tokens);
  host_targets_.resize(tokens);
  // Last, after every check that may throw: the destructor frees them.
  for (Chunk& chunk : chunks_) {
    for (int slot = 0; slot < chunk.stage->num_slots(); ++slot)
      chunk.slot_free.push_back(ops.create_mark());
    if (!chunk.output_gradient_per_slot) chunk.gradient_buffer_free = ops.create_mark();
  }
}

ScheduleExecutor::~ScheduleExecutor() {
  for (Chunk& chunk : chunks_) {
    for (void* mark : chunk.slot_free) ops_.destroy_mark(mark);
    ops_.destroy_mark(chunk.gradient_buffer_free);
  }
}

double ScheduleExecutor::run_step(const SampleSource& data, int64_t first_sample, float loss_scale,
                                  const ExecutorHooks& hooks, InstructionObserver* observer) {
  first_forward_done_ = false;
  for (Chunk& chunk : chunks_) {
    chunk.finished = false;
    std::fill(chunk.received.begin(), chunk.received.end(), -1);
    chunk.input_gradient_of = -1;
    // Whatever ran between steps (evaluation, a checkpoint) is before every
    // receive of this one.
    for (void* mark : chunk.slot_free) ops_.record_mark(mark);
    if (chunk.gradient_buffer_free != nullptr) ops_.record_mark(chunk.gradient_buffer_free);
  }
  sends_in_flight_.clear();  // the last step's ReduceGradients waited for them
  // ZeRO-3: the compute's last reads reach the unit ops' program while the
  // stream runs (and only then: evaluation reads on demand).
  struct WatchReads {
    const ExecutorHooks& hooks;
    ~WatchReads() {
      if (hooks.watch_zero_unit_reads) hooks.watch_zero_unit_reads(nullptr);
    }
  } watch{hooks};
  if (hooks.watch_zero_unit_reads)
    hooks.watch_zero_unit_reads([this](int chunk, int unit) { program_.read(chunk, unit); });
  for (size_t i = 0; i < instructions_.size(); ++i) {
    if (observer == nullptr) {
      execute(i, data, first_sample, loss_scale, hooks);
      continue;
    }
    ops_.synchronize();
    observer->before(instructions_[i]);
    execute(i, data, first_sample, loss_scale, hooks);
    ops_.synchronize();
    observer->after(instructions_[i]);
  }
  // The forwards added their losses on the device; one read for the step.
  double losses = 0;
  for (Chunk& chunk : chunks_) losses += chunk.stage->take_loss_sum();
  return losses;
}

std::function<void(size_t)> ScheduleExecutor::final_from_hook(int c, const ExecutorHooks& hooks) {
  chunks_[c].finished = true;
  if (!hooks.gradients_final_from) return {};
  // Offsets at or past the next chunk's range are final only once every later
  // chunk is; otherwise this chunk's offsets would claim them too early.
  for (size_t later = c + 1; later < chunks_.size(); ++later)
    if (!chunks_[later].finished) return {};
  const size_t base = stage_.chunk_offset(c);
  return [&hooks, base](size_t offset) { hooks.gradients_final_from(base + offset); };
}

std::function<void(size_t)> ScheduleExecutor::backward_hook(int c, bool finishes,
                                                            const ExecutorHooks& hooks) {
  std::function<void(size_t)> final_from = finishes ? final_from_hook(c, hooks) : nullptr;
  if (!hooks.zero_unit_of) return final_from;
  const size_t base = stage_.chunk_offset(c);
  return [this, &hooks, base, final_from = std::move(final_from)](size_t offset) {
    const auto [chunk, unit] = hooks.zero_unit_of(base + offset);
    program_.finished(chunk, unit);
    if (final_from) final_from(offset);
  };
}

void ScheduleExecutor::compute_step(const Chunk& chunk, const schema::Instruction& instruction,
                                    float loss_scale, bool tells_the_host,
                                    const std::function<void()>& launches) {
  // A backward that reports gradients final does host work as it goes (the
  // reduction starts), which a replay would skip.
  if (!ops_.records_launches() || tells_the_host || !chunk.stage->compute_replays()) {
    launches();
    return;
  }
  // The op, the chunk, the slot and the loss scale (a forward's argument)
  // name what was recorded: the same key, the same launches.
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &loss_scale, sizeof(scale_bits));
  const uint64_t key =
      uint64_t{static_cast<uint8_t>(instruction.op())} << 56 |
      uint64_t{static_cast<uint8_t>(instruction.chunk())} << 48 |
      uint64_t{static_cast<uint16_t>(slot_of(chunk, instruction.micro_batch()))} << 32 | scale_bits;
  ops_.run_recorded(key, launches);
}

void ScheduleExecutor::run_compute(size_t index, const ExecutorHooks& hooks,
                                   const std::function<void()>& compute) {
  size_t end = index + 1;
  while (end < instructions_.size() && belongs_to_compute_[end]) ++end;
  if (end == index + 1) {
    compute();
    return;
  }
  if (!hooks.run_zero_unit_op)
    refuse(instructions_[index], "has ZeRO unit ops after it, but this rank runs no ZeRO-2 or 3");
  program_.begin(instructions_[index], &instructions_[index + 1], end - index - 1,
                 hooks.run_zero_unit_op);
  compute();
  program_.end();
}

void ScheduleExecutor::execute(size_t index, const SampleSource& data, int64_t first_sample,
                               float loss_scale, const ExecutorHooks& hooks) {
  const schema::Instruction& instruction = instructions_[index];
  const int c = instruction.chunk();
  Chunk& chunk = chunks_[c];
  ModelStage& stage = *chunk.stage;
  const int batch = stage.micro_batch_size();
  const int micro_batch = instruction.micro_batch();
  const bool finishes_gradients = index == chunk.last_backward;
  if (instruction.op() == OpCode::SendActivation || instruction.op() == OpCode::RecvActivation ||
      instruction.op() == OpCode::SendGradient || instruction.op() == OpCode::RecvGradient) {
    const bool to_next =
        instruction.op() == OpCode::SendActivation || instruction.op() == OpCode::RecvGradient;
    if ((to_next ? chunk.next_local : chunk.previous_local) >= 0) {
      hand_off(chunk, instruction);
      return;
    }
  }
  switch (instruction.op()) {
    case OpCode::LoadMicroBatch: {
      const int64_t sample =
          first_sample +
          static_cast<int64_t>(data_parallel_rank_ * num_micro_batches_ + micro_batch) * batch;
      data.load(sample, batch, host_tokens_.data(), host_targets_.data());
      // This rank's tokens of the whole sequences (context parallelism), queued.
      stage.load_micro_batch(slot_of(chunk, micro_batch), host_tokens_.data(),
                             host_targets_.data());
      break;
    }
    case OpCode::Forward:
      wait_before(chunk, instruction);
      if (!first_forward_done_ && hooks.before_first_forward) hooks.before_first_forward();
      first_forward_done_ = true;
      run_compute(index, hooks, [&] {
        compute_step(chunk, instruction, loss_scale, false,
                     [&] { stage.forward(slot_of(chunk, micro_batch), loss_scale); });
      });
      break;
    case OpCode::Backward:
    case OpCode::BackwardInput:
      wait_before(chunk, instruction);
      // A chunk without the head starts from the received output gradient,
      // which must be this micro-batch's (the streams keep them in order).
      if (!stage.has_head() && chunk.received[slot_of(chunk, micro_batch)] != micro_batch)
        refuse(instruction, "before its output gradient was received");
      if (chunk.input_gradient_of >= 0)
        refuse(instruction, "before the input gradient of micro-batch " +
                                std::to_string(chunk.input_gradient_of) + " was sent");
      if (!stage.has_embedding()) chunk.input_gradient_of = micro_batch;
      run_compute(index, hooks, [&] {
        if (instruction.op() == OpCode::BackwardInput) {
          stage.backward_input(slot_of(chunk, micro_batch));
          return;
        }
        std::function<void(size_t)> hook = backward_hook(c, finishes_gradients, hooks);
        compute_step(chunk, instruction, loss_scale, static_cast<bool>(hook),
                     [&] { stage.backward(slot_of(chunk, micro_batch), hook); });
      });
      chunk.received[slot_of(chunk, micro_batch)] = -1;
      break;
    case OpCode::BackwardWeight:
      run_compute(index, hooks, [&] {
        stage.backward_weight(slot_of(chunk, micro_batch),
                              backward_hook(c, finishes_gradients, hooks));
      });
      break;
    case OpCode::GatherParameters:
    case OpCode::ReleaseParameters:
    case OpCode::ReduceScatterGradients:
      // Those belonging to a compute ran with it; the others run as reached.
      if (belongs_to_compute_[index]) return;
      if (!hooks.run_zero_unit_op) refuse(instruction, "on a rank that runs no ZeRO-2 or 3");
      hooks.run_zero_unit_op(instruction);
      return;
    case OpCode::SendActivation:
    case OpCode::RecvActivation:
    case OpCode::SendGradient:
    case OpCode::RecvGradient:
      post(chunk, instruction);  // a compute op waits for it (wait_before)
      return;
    case OpCode::ReduceGradients:
      wait_for_sends();
      if (hooks.reduce_gradients) hooks.reduce_gradients();
      break;
    case OpCode::OptimizerStep:
      if (hooks.optimizer_step) hooks.optimizer_step();
      break;
  }
  const bool reads_slot =
      instruction.op() == OpCode::Forward || instruction.op() == OpCode::Backward ||
      instruction.op() == OpCode::BackwardInput || instruction.op() == OpCode::BackwardWeight;
  if (reads_slot && !chunk.slot_free.empty())
    ops_.record_mark(chunk.slot_free[slot_of(chunk, micro_batch)]);
  const bool uses_gradient_buffer =
      instruction.op() == OpCode::Backward || instruction.op() == OpCode::BackwardInput;
  if (uses_gradient_buffer && chunk.gradient_buffer_free != nullptr)
    ops_.record_mark(chunk.gradient_buffer_free);
}

void ScheduleExecutor::refuse(const schema::Instruction& instruction, const std::string& problem) {
  throw std::runtime_error(std::string("schedule: ") + opcode_name(instruction.op()) +
                           " of micro-batch " + std::to_string(instruction.micro_batch()) +
                           " (chunk " + std::to_string(instruction.chunk()) + ") " + problem);
}

void ScheduleExecutor::receive_output_gradient(Chunk& chunk, const schema::Instruction& instruction,
                                               int micro_batch) {
  // One buffer for all slots (the input gradient's): only once the last
  // received gradient was used and the last input gradient sent.
  if (!chunk.output_gradient_per_slot) {
    for (int other : chunk.received)
      if (other >= 0)
        refuse(instruction, "receives the output gradient of micro-batch " +
                                std::to_string(micro_batch) + " over micro-batch " +
                                std::to_string(other) + "'s, not yet backwarded");
    if (chunk.input_gradient_of >= 0)
      refuse(instruction, "receives an output gradient over the input gradient of micro-batch " +
                              std::to_string(chunk.input_gradient_of) + ", not yet sent");
  }
  // Into the micro-batch's slot, whose previous gradient must have been used.
  int& received = chunk.received[slot_of(chunk, micro_batch)];
  if (received >= 0)
    refuse(instruction, "receives the output gradient of micro-batch " +
                            std::to_string(micro_batch) + " over micro-batch " +
                            std::to_string(received) + "'s, not yet backwarded");
  received = micro_batch;
}

void ScheduleExecutor::send_input_gradient(Chunk& chunk, const schema::Instruction& instruction) {
  if (chunk.input_gradient_of != instruction.micro_batch())
    refuse(instruction, "sends an input gradient its chunk has not computed last");
  chunk.input_gradient_of = -1;
}

void ScheduleExecutor::post(Chunk& chunk, const schema::Instruction& instruction) {
  PeerToPeer* peers = pipeline_.peers;
  const bool to_next =
      instruction.op() == OpCode::SendActivation || instruction.op() == OpCode::RecvGradient;
  const int peer = to_next ? chunk.next_rank : chunk.previous_rank;
  const int tag = to_next ? chunk.next_tag : chunk.previous_tag;
  if (peers == nullptr || peer < 0)
    throw std::runtime_error("schedule: a transfer instruction on a stage without that neighbour");
  ModelStage& stage = *chunk.stage;
  const size_t elements = stage.activation_elements();
  const int mb = instruction.micro_batch(), slot = slot_of(chunk, mb);
  const auto refuse_if_pending = [&](PeerToPeer::Posted pending, const char* what) {
    if (pending != 0)
      refuse(instruction, std::string("posts over slot ") + std::to_string(slot) + "'s " + what +
                              ", not yet waited on");
  };
  switch (instruction.op()) {
    case OpCode::SendActivation: {
      PeerToPeer::Posted& send = chunk.activation_send[slot];
      refuse_if_pending(send, "activation send");
      send = peers->post_send(stage.output(slot), elements, peer, stage.dtype(), tag);
      sends_in_flight_.push_back(send);
      break;
    }
    case OpCode::RecvActivation:
      refuse_if_pending(chunk.activation_receive[slot], "activation receive");
      chunk.activation_receive[slot] = peers->post_receive(
          stage.input(slot), elements, peer, stage.dtype(), tag, chunk.slot_free[slot]);
      break;
    case OpCode::SendGradient:
      send_input_gradient(chunk, instruction);
      chunk.input_gradient_send =
          peers->post_send(stage.input_gradient(), elements, peer, stage.dtype(), tag);
      sends_in_flight_.push_back(chunk.input_gradient_send);
      break;
    case OpCode::RecvGradient:
      refuse_if_pending(chunk.gradient_receive[slot], "output-gradient receive");
      receive_output_gradient(chunk, instruction, mb);
      if (chunk.output_gradient_per_slot) {
        chunk.gradient_receive[slot] = peers->post_receive(
            stage.output_gradient(slot), elements, peer, stage.dtype(), tag, chunk.slot_free[slot]);
      } else {
        // Into the chunk's one buffer (also its input gradient's): once every
        // backward that wrote or read it is done and the input gradient in it
        // is out, not after the forwards queued since.
        chunk.gradient_receive[slot] =
            peers->post_receive(stage.output_gradient(slot), elements, peer, stage.dtype(), tag,
                                chunk.gradient_buffer_free, chunk.input_gradient_send);
      }
      break;
    case OpCode::LoadMicroBatch:
    case OpCode::Forward:
    case OpCode::Backward:
    case OpCode::ReduceGradients:
    case OpCode::GatherParameters:
    case OpCode::ReleaseParameters:
    case OpCode::ReduceScatterGradients:
    case OpCode::OptimizerStep:
    case OpCode::BackwardInput:
    case OpCode::BackwardWeight:
      break;
  }
}

void ScheduleExecutor::wait_for_send(PeerToPeer::Posted& send) {
  if (send == 0) return;
  pipeline_.peers->wait(send);
  const auto in_flight = std::find(sends_in_flight_.begin(), sends_in_flight_.end(), send);
  // (The validator refuses a send after ReduceGradients, the only way here.)
  if (in_flight == sends_in_flight_.end())
    throw std::logic_error("schedule: a send waited on after its step's ReduceGradients");
  sends_in_flight_.erase(in_flight);
  send = 0;
}

void ScheduleExecutor::wait_before(Chunk& chunk, const schema::Instruction& instruction) {
  const int slot = slot_of(chunk, instruction.micro_batch());
  if (instruction.op() == OpCode::Forward) {
    if (chunk.activation_receive[slot] != 0) pipeline_.peers->wait(chunk.activation_receive[slot]);
    chunk.activation_receive[slot] = 0;
    wait_for_send(chunk.activation_send[slot]);  // the forward writes that output again
    return;
  }
  if (chunk.gradient_receive[slot] != 0) pipeline_.peers->wait(chunk.gradient_receive[slot]);
  chunk.gradient_receive[slot] = 0;
  wait_for_send(chunk.input_gradient_send);  // the backward writes the input gradient again
  // Full recompute writes the slot's output again (the same values, but on a
  // device under the send's read); the send is done by now in any stream
  // whose backward follows the next stage's, so this costs nothing.
  wait_for_send(chunk.activation_send[slot]);
}

void ScheduleExecutor::hand_off(Chunk& chunk, const schema::Instruction& instruction) {
  ModelStage& stage = *chunk.stage;
  const int mb = instruction.micro_batch(), slot = slot_of(chunk, mb);
  const size_t bytes = stage.activation_elements() * kernels::dtype_bytes(stage.dtype());
  switch (instruction.op()) {
    case OpCode::SendActivation:
      break;  // its Recv, next, copies the output
    case OpCode::RecvActivation: {
      const Chunk& from = chunks_[chunk.previous_local];
      ops_.copy(stage.input(slot), from.stage->output(slot_of(from, mb)), bytes);
      break;
    }
    case OpCode::SendGradient:
      send_input_gradient(chunk, instruction);
      break;
    case OpCode::RecvGradient: {
      if (!chunk.output_gradient_per_slot) wait_for_send(chunk.input_gradient_send);
      receive_output_gradient(chunk, instruction, mb);
      Chunk& from = chunks_[chunk.next_local];
      ops_.copy(stage.output_gradient(slot), from.stage->input_gradient(), bytes);
      // The copy read `from`'s one gradient buffer: a receive into it waits for that too.
      if (from.gradient_buffer_free != nullptr) ops_.record_mark(from.gradient_buffer_free);
      break;
    }
    case OpCode::LoadMicroBatch:
    case OpCode::Forward:
    case OpCode::Backward:
    case OpCode::ReduceGradients:
    case OpCode::GatherParameters:
    case OpCode::ReleaseParameters:
    case OpCode::ReduceScatterGradients:
    case OpCode::OptimizerStep:
    case OpCode::BackwardInput:
    case OpCode::BackwardWeight:
      break;
  }
}

void ScheduleExecutor::wait_for_sends() {
  for (const Chunk& chunk : chunks_)
    for (size_t slot = 0; slot < chunk.activation_receive.size(); ++slot)
      if (chunk.activation_receive[slot] != 0 || chunk.gradient_receive[slot] != 0)
        throw std::runtime_error("schedule: ReduceGradients while a receive into slot " +
                                 std::to_string(slot) + " is still posted: nothing used it");
  for (const PeerToPeer::Posted send : sends_in_flight_) pipeline_.peers->wait(send);
  sends_in_flight_.clear();
  for (Chunk& chunk : chunks_) {
    std::fill(chunk.activation_send.begin(), chunk.activation_send.end(), 0);
    chunk.input_gradient_send = 0;
  }
}

}  // namespace paraplan
