// schedule.cc: 1F1B and GPipe instruction streams, and the verifier that runs all
// stages' streams together under rendezvous communication.
#include "planner/schedule.h"

#include <stdexcept>

namespace paraplan {

using schema::OpCode;

namespace {

// Appends to one stage's stream, knowing which neighbours and data the stage has.
class StreamBuilder {
 public:
  StreamBuilder(int pipeline_rank, int num_stages)
      : has_previous_(pipeline_rank > 0),
        has_next_(pipeline_rank < num_stages - 1),
        loads_data_(pipeline_rank == 0 || pipeline_rank == num_stages - 1) {}

  bool has_previous() const { return has_previous_; }
  bool has_next() const { return has_next_; }

  void add(OpCode op, int micro_batch, int peer = -1) {
    stream_.push_back({op, micro_batch, peer});
  }
  void receive_activation(int micro_batch) {
    if (has_previous_) add(OpCode::RecvActivation, micro_batch);
  }
  void forward(int micro_batch) {
    if (loads_data_) add(OpCode::LoadMicroBatch, micro_batch);
    add(OpCode::Forward, micro_batch);
  }
  void send_activation(int micro_batch) {
    if (has_next_) add(OpCode::SendActivation, micro_batch);
  }
  void receive_gradient(int micro_batch) {
    if (has_next_) add(OpCode::RecvGradient, micro_batch);
  }
  void send_gradient(int micro_batch) {
    if (has_previous_) add(OpCode::SendGradient, micro_batch);
  }
  InstructionStream finish() {
    add(OpCode::ReduceGradients, -1);
    add(OpCode::OptimizerStep, -1);
    return std::move(stream_);
  }

 private:
  bool has_previous_, has_next_, loads_data_;
  InstructionStream stream_;
};

void check_sizes(int num_stages, int num_micro_batches) {
  if (num_stages < 1 || num_micro_batches < 1)
    throw std::invalid_argument("pipeline schedule: num_stages (" + std::to_string(num_stages) +
                                ") and num_micro_batches (" + std::to_string(num_micro_batches) +
                                ") must both be >= 1");
}

}  // namespace

PipelineSchedule generate_one_forward_one_backward(int num_stages, int num_micro_batches) {
  check_sizes(num_stages, num_micro_batches);
  PipelineSchedule schedule{
      schema::ScheduleKind::OneForwardOneBackward, num_stages, num_micro_batches, {}};
  const int m = num_micro_batches;
  for (int rank = 0; rank < num_stages; ++rank) {
    StreamBuilder b(rank, num_stages);
    const int warmup = std::min(num_stages - rank - 1, m);
    const int steady = m - warmup;
    for (int mb = 0; mb < warmup; ++mb) {
      b.receive_activation(mb);
      b.forward(mb);
      b.send_activation(mb);
    }
    if (steady > 0) b.receive_activation(warmup);
    for (int i = 0; i < steady; ++i) {
      const int forward_mb = warmup + i, backward_mb = i;
      b.forward(forward_mb);
      // The last stage's gradient comes from its own loss: nothing to receive.
      if (b.has_next()) b.add(OpCode::SendActivationRecvGradient, forward_mb, backward_mb);
      b.add(OpCode::Backward, backward_mb);
      if (i == steady - 1) {
        b.send_gradient(backward_mb);
      } else if (b.has_previous()) {
        b.add(OpCode::SendGradientRecvActivation, backward_mb, forward_mb + 1);
      }
    }
    for (int i = 0; i < warmup; ++i) {
      const int backward_mb = steady + i;
      b.receive_gradient(backward_mb);
      b.add(OpCode::Backward, backward_mb);
      b.send_gradient(backward_mb);
    }
    schedule.stages.push_back(b.finish());
  }
  return schedule;
}

PipelineSchedule generate_gpipe(int num_stages, int num_micro_batches) {
  check_sizes(num_stages, num_micro_batches);
  PipelineSchedule schedule{schema::ScheduleKind::GPipe, num_stages, num_micro_batches, {}};
  for (int rank = 0; rank < num_stages; ++rank) {
    StreamBuilder b(rank, num_stages);
    for (int mb = 0; mb < num_micro_batches; ++mb) {
      b.receive_activation(mb);
      b.forward(mb);
      b.send_activation(mb);
    }
    for (int mb = 0; mb < num_micro_batches; ++mb) {
      b.receive_gradient(mb);
      b.add(OpCode::Backward, mb);
      b.send_gradient(mb);
    }
    schedule.stages.push_back(b.finish());
  }
  return schedule;
}

PipelineSchedule generate_schedule(schema::ScheduleKind kind, int num_stages,
                                   int num_micro_batches) {
  return kind == schema::ScheduleKind::GPipe
             ? generate_gpipe(num_stages, num_micro_batches)
             : generate_one_forward_one_backward(num_stages, num_micro_batches);
}

std::string format_instruction(const PipelineInstruction& instruction) {
  std::string text = schema::EnumNameOpCode(instruction.op);
  const bool step_level =
      instruction.op == OpCode::ReduceGradients || instruction.op == OpCode::OptimizerStep;
  if (step_level && instruction.micro_batch < 0) return text;
  text += '(';
  text += std::to_string(instruction.micro_batch);
  if (instruction.op == OpCode::SendActivationRecvGradient ||
      instruction.op == OpCode::SendGradientRecvActivation) {
    text += ", peer ";
    text += std::to_string(instruction.peer_micro_batch);
  }
  text += ')';
  return text;
}

namespace {

enum class Channel { Activation, Gradient };

// One half of a communication instruction: a send or a receive on the link
// between two adjacent stages.
struct Transfer {
  Channel channel;
  bool is_send;
  int micro_batch;
  int neighbour;  // the stage at the other end
  bool matched = false;
};

struct StageState {
  size_t position = 0;  // index of the current instruction
  bool posted = false;  // preconditions checked and transfers posted
  std::vector<Transfer> transfers;
  std::vector<int> loaded, forwarded, backwarded;
  std::vector<int> activation_received, gradient_received, activation_sent, gradient_sent;
  bool reduced = false, stepped = false;
};

class ScheduleSimulator {
 public:
  explicit ScheduleSimulator(const PipelineSchedule& schedule)
      : schedule_(schedule), stages_(schedule.stages.size()) {
    const size_t m = static_cast<size_t>(std::max(schedule.num_micro_batches, 0));
    for (StageState& state : stages_)
      for (auto* counts :
           {&state.loaded, &state.forwarded, &state.backwarded, &state.activation_received,
            &state.gradient_received, &state.activation_sent, &state.gradient_sent})
        counts->assign(m, 0);
  }

  std::optional<std::string> run() {
    const int p = static_cast<int>(stages_.size());
    if (p != schedule_.num_stages || p < 1 || schedule_.num_micro_batches < 1)
      return "schedule has " + std::to_string(p) + " streams for num_stages " +
             std::to_string(schedule_.num_stages) + " and num_micro_batches " +
             std::to_string(schedule_.num_micro_batches) + "; need one stream per stage, m >= 1";
    for (bool progress = true; progress && !problem_;) {
      progress = false;
      for (int s = 0; s < p && !problem_; ++s) progress |= advance(s);
    }
    if (problem_) return problem_;
    return check_finished();
  }

 private:
  int last_stage() const { return static_cast<int>(stages_.size()) - 1; }
  bool finished(int s) const { return stages_[s].position >= schedule_.stages[s].size(); }
  const PipelineInstruction& current(int s) const {
    return schedule_.stages[s][stages_[s].position];
  }
  std::string where(int s) const {
    return "stage " + std::to_string(s) + " instruction " + std::to_string(stages_[s].position) +
           " " + format_instruction(current(s));
  }
  void report(int s, const std::string& problem) {
    if (!problem_) problem_ = where(s) + ": " + problem;
  }
  bool in_range(int mb) const { return mb >= 0 && mb < schedule_.num_micro_batches; }

  // Runs stage s as far as it can; true if it made any progress.
  bool advance(int s) {
    bool progress = false;
    while (!finished(s) && !problem_) {
      StageState& state = stages_[s];
      if (!state.posted && !post(s)) return progress;
      bool complete = true;
      for (Transfer& transfer : state.transfers) {
        if (!transfer.matched) {
          try_match(s, transfer);
          if (problem_) return progress;
          progress |= transfer.matched;
        }
        complete &= transfer.matched;
      }
      if (!complete) return progress;
      state.position++;
      state.posted = false;
      state.transfers.clear();
      progress = true;
    }
    return progress;
  }

  // Matches transfer (posted by stage s) with the complementary half of the
  // neighbour's current instruction, if that instruction has one.
  void try_match(int s, Transfer& transfer) {
    const int n = transfer.neighbour;
    if (finished(n) || (!stages_[n].posted && !post(n))) return;
    for (Transfer& other : stages_[n].transfers) {
      if (other.matched || other.channel != transfer.channel || other.is_send == transfer.is_send ||
          other.neighbour != s)
        continue;
      if (other.micro_batch != transfer.micro_batch) {
        report(s, "messages matched out of order: it meets stage " + std::to_string(n) + " " +
                      format_instruction(current(n)) + " on the " +
                      (transfer.channel == Channel::Activation ? "activation" : "gradient") +
                      " link, micro-batch " + std::to_string(transfer.micro_batch) + " vs " +
                      std::to_string(other.micro_batch));
        return;
      }
      transfer.matched = other.matched = true;
      Transfer& receive = transfer.is_send ? other : transfer;
      StageState& receiver = stages_[transfer.is_send ? n : s];
      auto& received = receive.channel == Channel::Activation ? receiver.activation_received
                                                              : receiver.gradient_received;
      received[receive.micro_batch]++;
      return;
    }
  }

  // Checks the preconditions of stage s's current instruction, applies a local op's
  // effects or posts a communication op's transfers. False on a problem.
  bool post(int s) {
    StageState& state = stages_[s];
    const PipelineInstruction& ins = current(s);
    const int mb = ins.micro_batch;
    const bool combined = ins.op == OpCode::SendActivationRecvGradient ||
                          ins.op == OpCode::SendGradientRecvActivation;
    const bool step_level = ins.op == OpCode::ReduceGradients || ins.op == OpCode::OptimizerStep;
    auto fail = [&](const std::string& problem) {
      report(s, problem);
      return false;
    };
    if (state.stepped) return fail("comes after OptimizerStep, which must be last");
    if (!step_level && !in_range(mb))
      return fail("micro_batch out of range 0.." + std::to_string(schedule_.num_micro_batches - 1));
    if (combined && !in_range(ins.peer_micro_batch)) return fail("peer_micro_batch out of range");
    const bool to_previous = ins.op == OpCode::RecvActivation || ins.op == OpCode::SendGradient ||
                             ins.op == OpCode::SendGradientRecvActivation;
    const bool to_next = ins.op == OpCode::SendActivation || ins.op == OpCode::RecvGradient ||
                         ins.op == OpCode::SendActivationRecvGradient;
    if (to_previous && s == 0) return fail("stage 0 has no previous stage");
    if (to_next && s == last_stage()) return fail("the last stage has no next stage");
    const bool loads_data = s == 0 || s == last_stage();
    auto post_transfer = [&](Channel channel, bool is_send, int micro_batch) {
      const bool towards_next = (channel == Channel::Activation) == is_send;
      state.transfers.push_back({channel, is_send, micro_batch, towards_next ? s + 1 : s - 1});
    };
    switch (ins.op) {
      case OpCode::LoadMicroBatch:
        if (!loads_data) return fail("this stage holds neither the embedding nor the head");
        if (state.loaded[mb]++) return fail("micro-batch loaded more than once");
        break;
      case OpCode::Forward:
        if (state.forwarded[mb]) return fail("micro-batch forwarded more than once");
        if (loads_data && !state.loaded[mb]) return fail("forward before its LoadMicroBatch");
        if (s > 0 && !state.activation_received[mb])
          return fail("forward before its activation was received");
        state.forwarded[mb]++;
        break;
      case OpCode::Backward:
        if (!state.forwarded[mb]) return fail("backward before its forward");
        if (state.backwarded[mb]) return fail("micro-batch backwarded more than once");
        if (s < last_stage() && !state.gradient_received[mb])
          return fail("backward before its gradient was received");
        state.backwarded[mb]++;
        break;
      case OpCode::ReduceGradients:
        if (state.reduced) return fail("ReduceGradients appears more than once");
        for (int k = 0; k < schedule_.num_micro_batches; ++k)
          if (!state.backwarded[k])
            return fail("ReduceGradients before micro-batch " + std::to_string(k) +
                        " was backwarded");
        state.reduced = true;
        break;
      case OpCode::OptimizerStep:
        if (!state.reduced) return fail("OptimizerStep before ReduceGradients");
        state.stepped = true;
        break;
      default:
        break;
    }
    const bool sends_activation =
        ins.op == OpCode::SendActivation || ins.op == OpCode::SendActivationRecvGradient;
    const bool sends_gradient =
        ins.op == OpCode::SendGradient || ins.op == OpCode::SendGradientRecvActivation;
    if (sends_activation) {
      if (!state.forwarded[mb]) return fail("sends an activation before its forward");
      if (state.activation_sent[mb]++) return fail("activation sent more than once");
      post_transfer(Channel::Activation, true, mb);
    }
    if (sends_gradient) {
      if (!state.backwarded[mb]) return fail("sends a gradient before its backward");
      if (state.gradient_sent[mb]++) return fail("gradient sent more than once");
      post_transfer(Channel::Gradient, true, mb);
    }
    const int received_mb = combined ? ins.peer_micro_batch : mb;
    if (ins.op == OpCode::RecvActivation || ins.op == OpCode::SendGradientRecvActivation) {
      if (state.activation_received[received_mb])
        return fail("activation of micro-batch " + std::to_string(received_mb) +
                    " received more than once");
      post_transfer(Channel::Activation, false, received_mb);
    }
    if (ins.op == OpCode::RecvGradient || ins.op == OpCode::SendActivationRecvGradient) {
      if (state.gradient_received[received_mb])
        return fail("gradient of micro-batch " + std::to_string(received_mb) +
                    " received more than once");
      post_transfer(Channel::Gradient, false, received_mb);
    }
    state.posted = true;
    return true;
  }

  std::optional<std::string> check_finished() {
    const int p = static_cast<int>(stages_.size());
    std::string blocked;
    std::optional<std::string> unmatched;
    for (int s = 0; s < p; ++s) {
      if (finished(s)) {
        blocked += "\n  stage " + std::to_string(s) + ": finished";
        continue;
      }
      blocked += "\n  " + where(s) + " (blocked)";
      for (const Transfer& transfer : stages_[s].transfers)
        if (!transfer.matched && finished(transfer.neighbour) && !unmatched)
          unmatched = "unmatched " + std::string(transfer.is_send ? "send" : "receive") + ": " +
                      where(s) + " waits on stage " + std::to_string(transfer.neighbour) +
                      ", which has finished its stream";
    }
    if (unmatched) return *unmatched + blocked;
    if (blocked.find("(blocked)") != std::string::npos) return "deadlock:" + blocked;
    for (int s = 0; s < p; ++s) {
      const StageState& state = stages_[s];
      for (int mb = 0; mb < schedule_.num_micro_batches; ++mb)
        if (!state.forwarded[mb] || !state.backwarded[mb])
          return "stage " + std::to_string(s) + ": micro-batch " + std::to_string(mb) +
                 " is never " + (state.forwarded[mb] ? "backwarded" : "forwarded");
      if (!state.reduced || !state.stepped)
        return "stage " + std::to_string(s) + ": stream must end with ReduceGradients then " +
               "OptimizerStep";
    }
    return std::nullopt;
  }

  const PipelineSchedule& schedule_;
  std::vector<StageState> stages_;
  std::optional<std::string> problem_;
};

}  // namespace

std::optional<std::string> verify_schedule(const PipelineSchedule& schedule) {
  return ScheduleSimulator(schedule).run();
}

}  // namespace paraplan
