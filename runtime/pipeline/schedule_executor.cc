// schedule_executor.cc: the instruction interpreter of a pipeline stage.
#include "runtime/pipeline/schedule_executor.h"

#include <deque>
#include <stdexcept>
#include <string>

#include "schema/plan_io.h"

namespace paraplan {

using schema::OpCode;

int ScheduleExecutor::slots_needed(const schema::StageSchedule& schedule) {
  std::deque<int> in_flight;
  size_t most = 0;
  for (const schema::Instruction* instruction : *schedule.instructions()) {
    if (instruction->op() == OpCode::Forward) {
      in_flight.push_back(instruction->micro_batch());
      most = std::max(most, in_flight.size());
    } else if (instruction->op() == OpCode::Backward) {
      if (in_flight.empty() || in_flight.front() != instruction->micro_batch())
        throw std::runtime_error(
            "schedule of stage " + std::to_string(schedule.stage()) + ": backward of micro-batch " +
            std::to_string(instruction->micro_batch()) + " is out of first-in first-out order");
      in_flight.pop_front();
    }
  }
  return static_cast<int>(std::max<size_t>(most, 1));
}

ScheduleExecutor::ScheduleExecutor(const schema::StageSchedule& schedule, ModelStage& stage,
                                   kernels::Ops& ops, int num_micro_batches, int data_parallel_rank,
                                   PipelinePeers pipeline)
    : stage_(stage),
      ops_(ops),
      num_micro_batches_(num_micro_batches),
      data_parallel_rank_(data_parallel_rank),
      pipeline_(pipeline) {
  for (const schema::Instruction* instruction : *schedule.instructions())
    instructions_.push_back(*instruction);
  const size_t tokens =
      static_cast<size_t>(stage.micro_batch_size()) * stage.layout().config().seq_len;
  host_tokens_.resize(tokens);
  host_targets_.resize(tokens);
}

double ScheduleExecutor::run_step(const SampleSource& data, int64_t first_sample, float loss_scale,
                                  const ExecutorHooks& hooks, InstructionObserver* observer) {
  first_forward_done_ = false;
  for (const schema::Instruction& instruction : instructions_) {
    if (observer == nullptr) {
      execute(instruction, data, first_sample, loss_scale, hooks);
      continue;
    }
    ops_.synchronize();
    observer->before(instruction);
    execute(instruction, data, first_sample, loss_scale, hooks);
    ops_.synchronize();
    observer->after(instruction);
  }
  // The forwards added their losses on the device; one read for the step.
  return stage_.take_loss_sum();
}

void ScheduleExecutor::execute(const schema::Instruction& instruction, const SampleSource& data,
                               int64_t first_sample, float loss_scale, const ExecutorHooks& hooks) {
  const int batch = stage_.micro_batch_size();
  const size_t token_bytes = host_tokens_.size() * sizeof(int32_t);
  const int micro_batch = instruction.micro_batch();
  switch (instruction.op()) {
    case OpCode::LoadMicroBatch: {
      const int64_t sample =
          first_sample +
          static_cast<int64_t>(data_parallel_rank_ * num_micro_batches_ + micro_batch) * batch;
      data.load(sample, batch, host_tokens_.data(), host_targets_.data());
      // Staged through pinned memory on a device: the host does not wait, and
      // the vectors are free again at once.
      ops_.copy_from_host_async(stage_.tokens(slot_of(micro_batch)), host_tokens_.data(),
                                token_bytes);
      ops_.copy_from_host_async(stage_.targets(slot_of(micro_batch)), host_targets_.data(),
                                token_bytes);
      break;
    }
    case OpCode::Forward:
      if (!first_forward_done_ && hooks.before_first_forward) hooks.before_first_forward();
      first_forward_done_ = true;
      stage_.forward(slot_of(micro_batch), loss_scale);
      break;
    case OpCode::Backward:
      // A stage without the head starts from the received output gradient,
      // which must be this micro-batch's (the streams keep them in order).
      if (!stage_.has_head() && gradient_holder_ != micro_batch)
        throw std::runtime_error("schedule: backward of micro-batch " +
                                 std::to_string(micro_batch) +
                                 " before its output gradient was received");
      // The step's last backward finishes every gradient (first-in first-out
      // streams: micro-batch m - 1 is the last one backwarded).
      if (micro_batch == num_micro_batches_ - 1)
        stage_.backward(slot_of(micro_batch), hooks.gradients_final_from);
      else
        stage_.backward(slot_of(micro_batch));
      gradient_holder_ = -1;
      break;
    case OpCode::SendActivation:
      transfer(stage_.output(slot_of(micro_batch)), pipeline_.next_stage_rank, nullptr, -1);
      break;
    case OpCode::RecvActivation:
      transfer(nullptr, -1, stage_.input(slot_of(micro_batch)), pipeline_.previous_stage_rank);
      break;
    case OpCode::SendGradient:
      transfer(stage_.input_gradient(), pipeline_.previous_stage_rank, nullptr, -1);
      break;
    case OpCode::RecvGradient:
      transfer(nullptr, -1, stage_.output_gradient(), pipeline_.next_stage_rank);
      gradient_holder_ = micro_batch;
      break;
    case OpCode::SendActivationRecvGradient:
      transfer(stage_.output(slot_of(micro_batch)), pipeline_.next_stage_rank,
               stage_.output_gradient(), pipeline_.next_stage_rank);
      gradient_holder_ = instruction.peer_micro_batch();
      break;
    case OpCode::SendGradientRecvActivation:
      transfer(stage_.input_gradient(), pipeline_.previous_stage_rank,
               stage_.input(slot_of(instruction.peer_micro_batch())),
               pipeline_.previous_stage_rank);
      break;
    case OpCode::ReduceGradients:
      if (hooks.reduce_gradients) hooks.reduce_gradients();
      break;
    case OpCode::OptimizerStep:
      if (hooks.optimizer_step) hooks.optimizer_step();
      break;
    case OpCode::BackwardInput:
    case OpCode::BackwardWeight:
      // Refused by plan validation (schema v3, not executed yet).
      throw std::runtime_error(std::string("schedule: ") + opcode_name(instruction.op()) +
                               " is not executed by this paraplan");
  }
}

void ScheduleExecutor::transfer(const void* send, int send_to, void* receive, int receive_from) {
  if (pipeline_.peers == nullptr || (send_to < 0 && receive_from < 0))
    throw std::runtime_error("schedule: a transfer instruction on a stage without that neighbour");
  pipeline_.peers->send_receive(send, send ? stage_.activation_elements() : 0, send_to, receive,
                                receive ? stage_.activation_elements() : 0, receive_from,
                                stage_.dtype());
}

}  // namespace paraplan
