// pipeline_simulation.cc: a step's instruction streams played out in time
// with shared cores (model in pipeline_simulation.h).
#include "planner/schedule/pipeline_simulation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace paraplan {

namespace {

using schema::OpCode;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Message {
  double sent = -1, received = -1;  // when each end was posted
  double seconds = 0;
  double done() const { return std::max(sent, received) + seconds; }
  bool posted() const { return sent >= 0 && received >= 0; }
};

// A step's messages in one flat table: the activation (or gradient) of a
// micro-batch sent by a virtual stage (pipeline_layout.h), at
// ((gradient x m) + micro-batch) x (p x v) + sender. Looking one up costs an
// index, not a tree walk: the simulation looks up every message at every
// event of its stage.
class MessageTable {
 public:
  MessageTable(int micro_batches, int virtual_stages)
      : micro_batches_(micro_batches),
        virtual_stages_(virtual_stages),
        messages_(2 * static_cast<size_t>(micro_batches) * virtual_stages) {}
  size_t index(bool gradient, int micro_batch, int sender) const {
    if (micro_batch < 0 || micro_batch >= micro_batches_ || sender < 0 || sender >= virtual_stages_)
      throw std::invalid_argument("simulate_step: a transfer of micro-batch " +
                                  std::to_string(micro_batch) + " from virtual stage " +
                                  std::to_string(sender) + " is outside the schedule");
    return (static_cast<size_t>(gradient) * micro_batches_ + micro_batch) * virtual_stages_ +
           sender;
  }
  Message& operator[](size_t index) { return messages_[index]; }

 private:
  int micro_batches_, virtual_stages_;
  std::vector<Message> messages_;
};

// The end a transfer instruction of stage s posts.
struct End {
  size_t message;
  bool sending;
};

std::optional<End> end_of(const PipelineInstruction& in, int rank, const PipelineLayout& layout,
                          const MessageTable& table) {
  const std::optional<StreamMessage> message = message_of(layout, rank, in);
  if (!message) return std::nullopt;
  return End{table.index(!message->activation, message->micro_batch, message->from_virtual_stage),
             message->is_send};
}

// The messages an instruction of stage s must find done before it starts. A Forward its activation,
// a Backward / BackwardInput its output gradient and its chunk's last input-gradient send (it
// writes that buffer again), as does a RecvGradient into the chunk's one buffer (per_slot false:
// stream_check.h), ReduceGradients every send of the stage. Appends them to `needs`
// (cleared first); returns whether the first is the message the op received (its copy, on shared
// cores, is the op's work).
bool posted_needs(const PipelineInstruction& in, int rank, const PipelineLayout& layout,
                  const MessageTable& table, const std::vector<size_t>& sent,
                  const std::vector<int64_t>& last_gradient_sent, const std::vector<bool>& per_slot,
                  std::vector<size_t>& needs) {
  const int s = layout.virtual_stage(rank, in.chunk), last = layout.last_virtual_stage();
  needs.clear();
  switch (in.op) {
    case OpCode::Forward:
      if (s > 0) needs.push_back(table.index(false, in.micro_batch, s - 1));
      return s > 0;
    case OpCode::Backward:
    case OpCode::BackwardInput:
      if (s < last) needs.push_back(table.index(true, in.micro_batch, s + 1));
      if (last_gradient_sent[in.chunk] >= 0)
        needs.push_back(static_cast<size_t>(last_gradient_sent[in.chunk]));
      return s < last;
    case OpCode::ReduceGradients:
      needs = sent;
      return false;
    case OpCode::RecvGradient:
      if (!per_slot[in.chunk] && last_gradient_sent[in.chunk] >= 0)
        needs.push_back(static_cast<size_t>(last_gradient_sent[in.chunk]));
      return false;
    case OpCode::LoadMicroBatch:
    case OpCode::SendActivation:
    case OpCode::RecvActivation:
    case OpCode::SendGradient:
    case OpCode::GatherParameters:
    case OpCode::ReleaseParameters:
    case OpCode::ReduceScatterGradients:
    case OpCode::OptimizerStep:
    case OpCode::BackwardWeight:
      return false;
  }
  return false;  // an op outside the enum: refused where plans are read
}

enum class Phase { kStart, kCompute, kCollective, kGroupWait, kTransfer, kBarrier, kDone };

struct StageState {
  size_t next = 0;  // instruction index
  Phase phase = Phase::kStart;
  OpCode op = OpCode::LoadMicroBatch;
  double remaining = 0;          // work (kCompute, kCollective)
  double collectives_after = 0;  // the collectives' work following the compute
  double waits_after = 0;        // the group waits following the collectives (wall)
  double wait_until = 0;         // kGroupWait
  double compute_started = 0;
  std::vector<size_t> waiting;  // kTransfer: message indices
  // The messages the stage sent, and per chunk the last input gradient it
  // sent (-1: none), which its next backward overwrites.
  std::vector<size_t> sent;
  std::vector<int64_t> last_gradient_sent;
  std::vector<bool> per_slot;  // per chunk: received gradients get a buffer per slot
  double forward = 0, backward = 0, optimizer = 0, finished = 0;
  double transfer_work = 0;  // shared cores: the copies of its messages
};

bool working(const StageState& st) {
  return st.phase == Phase::kCompute || st.phase == Phase::kCollective;
}

// Whether a send goes to another chunk of its own rank (ZB-V's turn): a local
// copy, no link time.
bool local_send(const PipelineInstruction& in, int rank, const PipelineLayout& layout) {
  const bool activation = in.op == OpCode::SendActivation;
  return (activation || in.op == OpCode::SendGradient) &&
         layout.local_neighbour(rank, in.chunk, activation) >= 0;
}

// Each stage's speed (of a dedicated core's) at a moment. On devices of
// their own, 1. On shared cores, rank j of stage s (the node's rank s x
// ranks_per_stage + j) stays on core (that rank) mod the cores, as Linux
// keeps a busy process on the core it runs on rather than move it to one
// that falls idle (4 pipeline stages on 2 cores took as long bound to the
// cores, two each, as unbound); a core is shared by its working ranks, and a
// stage goes at its slowest rank's pace. Where every stage's ranks cover the
// cores evenly, this is the cores shared by all working ranks alike. Built
// once per step: update() allocates nothing.
class StageRates {
 public:
  StageRates(int stages, int ranks_per_stage, double cores)
      : ranks_per_stage_(ranks_per_stage),
        shared_(cores > 0),
        core_count_(std::max(1, static_cast<int>(std::lround(cores)))),
        core_speed_(cores / core_count_),  // a measured 1.9 cores: two at 0.95
        ranks_on_(core_count_),
        rates_(stages, 1.0) {}

  const std::vector<double>& update(const std::vector<StageState>& state) {
    if (!shared_) return rates_;
    const int p = static_cast<int>(state.size());
    std::fill(ranks_on_.begin(), ranks_on_.end(), 0);
    for (int s = 0; s < p; ++s)
      if (working(state[s]))
        for (int j = 0; j < ranks_per_stage_; ++j) ++ranks_on_[core_of(s, j)];
    for (int s = 0; s < p; ++s) {
      rates_[s] = 1.0;
      if (!working(state[s])) continue;
      for (int j = 0; j < ranks_per_stage_; ++j)
        rates_[s] = std::min(rates_[s], core_speed_ / ranks_on_[core_of(s, j)]);
    }
    return rates_;
  }

 private:
  int core_of(int s, int j) const { return (s * ranks_per_stage_ + j) % core_count_; }

  int ranks_per_stage_;
  bool shared_;
  int core_count_;
  double core_speed_;
  std::vector<int> ranks_on_;
  std::vector<double> rates_;
};

}  // namespace

namespace {

// One step played out event by event: each stage's state, the messages
// between them, and the clock. simulate_step's machinery, its parts named.
class StepSimulation {
 public:
  StepSimulation(const PipelineSchedule& schedule, const std::vector<SimulatedStageInput>& inputs,
                 int ranks_per_stage, double cores)
      : schedule_(schedule),
        inputs_(inputs),
        p_(schedule.num_stages),
        m_(schedule.num_micro_batches),
        v_(std::max(schedule.virtual_stages, 1)),
        state_(p_),
        messages_(m_, p_ * v_),
        layout_(PipelineLayout::of(schedule.kind, p_, v_)),
        shared_cores_(cores > 0),
        stage_rates_(p_, ranks_per_stage, cores) {
    for (int s = 0; s < p_; ++s) {
      state_[s].last_gradient_sent.assign(v_, -1);
      state_[s].per_slot = output_gradient_per_slot(v_, schedule.stages[s]);
    }
  }

  SimulatedStep run() {
    for (int guard = 0;; ++guard) {
      if (guard > 100 * (m_ + p_) * p_ + 1000)
        throw std::logic_error("simulate_step: the schedule does not finish");
      start_instructions();
      bool done = true;
      for (const StageState& st : state_) done = done && st.phase == Phase::kDone;
      if (done) break;
      const std::vector<double>& rates = stage_rates_.update(state_);
      const double next = next_event(rates);
      if (next == kInfinity) throw std::logic_error("simulate_step: every stage is blocked");
      advance_to(next, rates);
    }
    return result();
  }

 private:
  // Starts instructions (and finishes those taking no time) until every
  // stage is busy, blocked or done.
  void start_instructions() {
    bool moved = true;
    while (moved) {
      moved = false;
      for (int s = 0; s < p_; ++s) {
        moved |= unblock(s);
        if (state_[s].phase != Phase::kStart) continue;
        moved |= start_next(s);
      }
    }
  }

  // A stage waiting for its transfers or the optimizer's barrier goes on
  // once they are done; true if it moved.
  bool unblock(int s) {
    StageState& st = state_[s];
    const SimulatedStageInput& in = inputs_[s];
    bool moved = false;
    if (st.phase == Phase::kTransfer) {
      bool complete = true;
      for (const size_t key : st.waiting)
        complete = complete && messages_[key].posted() &&
                   (shared_cores_ || messages_[key].done() <= now_ + kEpsilon);
      if (complete) st.phase = Phase::kStart, st.waiting.clear(), moved = true;
    }
    if (st.phase == Phase::kBarrier) {
      bool all = true;
      for (const StageState& other : state_)
        all = all && (other.phase == Phase::kBarrier || other.op == OpCode::OptimizerStep);
      if (!all) return moved;
      st.phase = Phase::kCompute, st.remaining = in.optimizer_work, st.collectives_after = 0;
      st.compute_started = now_, moved = true;
    }
    return moved;
  }

  // Stage s (at kStart) takes its next instruction; true if it moved.
  bool start_next(int s) {
    StageState& st = state_[s];
    const SimulatedStageInput& in = inputs_[s];
    if (st.next == schedule_.stages[s].size()) {
      st.phase = Phase::kDone, st.finished = now_;
      return false;
    }
    const PipelineInstruction& instruction = schedule_.stages[s][st.next++];
    st.op = instruction.op;
    st.waits_after = 0;
    double receive_copies = 0;  // shared cores: the receiving end's copy
    const bool receives = posted_needs(instruction, s, layout_, messages_, st.sent,
                                       st.last_gradient_sent, st.per_slot, needs_);
    pending_.clear();
    for (const size_t key : needs_) {
      const Message& message = messages_[key];
      if (!message.posted() || (!shared_cores_ && message.done() > now_ + kEpsilon))
        pending_.push_back(key);
    }
    if (!pending_.empty()) {
      // Back to this instruction once its transfers are done.
      --st.next;
      st.waiting.assign(pending_.begin(), pending_.end()), st.phase = Phase::kTransfer;
      return true;
    }
    if (shared_cores_ && receives) receive_copies = messages_[needs_[0]].seconds;
    switch (instruction.op) {
      case OpCode::Forward:
      case OpCode::Backward:
      case OpCode::BackwardInput:
      case OpCode::BackwardWeight:
        start_compute(st, in, instruction.op, receive_copies);
        break;
      case OpCode::ReduceGradients:
        st.phase = Phase::kCollective, st.remaining = in.reduction_work;
        break;
      case OpCode::OptimizerStep:
        st.phase = Phase::kBarrier;
        break;
      case OpCode::LoadMicroBatch:
      case OpCode::GatherParameters:  // (not in the streams the planner simulates)
      case OpCode::ReleaseParameters:
      case OpCode::ReduceScatterGradients:
        break;  // no time: stays at kStart for the next instruction
      case OpCode::SendActivation:
      case OpCode::RecvActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
        post_transfer(s, instruction);
        break;
    }
    return true;
  }

  void start_compute(StageState& st, const SimulatedStageInput& in, OpCode op,
                     double receive_copies) {
    const bool forward = op == OpCode::Forward;
    const double share = op == OpCode::BackwardInput    ? 1 - in.weight_fraction
                         : op == OpCode::BackwardWeight ? in.weight_fraction
                                                        : 1.0;
    st.phase = Phase::kCompute, st.compute_started = now_;
    st.remaining = (forward ? in.forward_work : in.backward_work) * share / v_;
    // The tensor-parallel all-reduces go with the input gradient.
    st.collectives_after = (forward                        ? in.forward_collectives
                            : op == OpCode::BackwardWeight ? 0
                                                           : in.backward_collectives) /
                           v_;
    st.waits_after = (forward                        ? in.forward_group_waits
                      : op == OpCode::BackwardWeight ? 0
                                                     : in.backward_group_waits) /
                     v_;
    st.collectives_after += receive_copies, st.transfer_work += receive_copies;
  }

  // A transfer instruction posts its end and goes on; a send goes at once
  // (with shared cores, the sender's copy is work).
  void post_transfer(int s, const PipelineInstruction& instruction) {
    StageState& st = state_[s];
    const std::optional<End> end = end_of(instruction, s, layout_, messages_);
    const double link_seconds = local_send(instruction, s, layout_) ? 0 : inputs_[s].p2p_seconds;
    Message& message = messages_[end->message];
    (end->sending ? message.sent : message.received) = now_;
    if (!end->sending) return;
    message.seconds = link_seconds;
    st.sent.push_back(end->message);
    if (instruction.op == OpCode::SendGradient)
      st.last_gradient_sent[instruction.chunk] = static_cast<int64_t>(end->message);
    if (shared_cores_)  // the sending end's copy, at once
      st.phase = Phase::kCollective, st.remaining = link_seconds, st.transfer_work += link_seconds;
  }

  // When the next stage finishes its work, wait or transfer.
  double next_event(const std::vector<double>& rates) {
    double next = kInfinity;
    for (int s = 0; s < p_; ++s) {
      const StageState& st = state_[s];
      const double rate = rates[s];
      if (st.phase == Phase::kCompute) next = std::min(next, now_ + st.remaining / rate);
      if (st.phase == Phase::kCollective) next = std::min(next, now_ + st.remaining / rate);
      if (st.phase == Phase::kGroupWait) next = std::min(next, st.wait_until);
      if (st.phase == Phase::kTransfer)
        for (const size_t key : st.waiting)
          // (One already done may wait beside one not yet posted.)
          if (messages_[key].posted() && messages_[key].done() > now_)
            next = std::min(next, messages_[key].done());
    }
    return next;
  }

  // The clock to `next`: work done at each stage's rate, phases ended.
  void advance_to(double next, const std::vector<double>& rates) {
    const double elapsed = next - now_;
    now_ = next;
    for (int s = 0; s < p_; ++s) {
      StageState& st = state_[s];
      const double rate = rates[s];
      if (st.phase == Phase::kCompute) {
        st.remaining -= elapsed * rate;
        if (st.remaining > kEpsilon * std::max(1.0, now_)) continue;
        const double wall = now_ - st.compute_started;
        (st.op == OpCode::Forward         ? st.forward
         : st.op == OpCode::OptimizerStep ? st.optimizer
                                          : st.backward) += wall;
        st.phase = Phase::kCollective, st.remaining = st.collectives_after;
      } else if (st.phase == Phase::kCollective) {
        st.remaining -= elapsed * rate;
      }
      if (st.phase == Phase::kCollective && st.remaining <= kEpsilon * std::max(1.0, now_)) {
        st.phase = st.waits_after > 0 ? Phase::kGroupWait : Phase::kStart;
        st.wait_until = now_ + st.waits_after, st.waits_after = 0;
      } else if (st.phase == Phase::kGroupWait && st.wait_until <= now_ + kEpsilon) {
        st.phase = Phase::kStart;
      }
    }
  }

  SimulatedStep result() {
    SimulatedStep step;
    for (const StageState& st : state_)
      step.step_seconds = std::max(step.step_seconds, st.finished);
    for (int s = 0; s < p_; ++s) {
      const StageState& st = state_[s];
      const SimulatedStageInput& in = inputs_[s];
      SimulatedStage stage;
      stage.forward_wall = st.forward / m_;
      stage.backward_wall = st.backward / m_;
      stage.optimizer_wall = st.optimizer;
      if (shared_cores_) {
        stage.transfer_seconds = st.transfer_work;
      } else {
        for (const PipelineInstruction& instruction : schedule_.stages[s]) {
          const std::optional<End> end = end_of(instruction, s, layout_, messages_);
          if (end && end->sending && !local_send(instruction, s, layout_))
            stage.transfer_seconds += in.p2p_seconds;
        }
      }
      // (The group waits are waiting.)
      const double busy = m_ * (in.forward_work + in.backward_work + in.forward_collectives +
                                in.backward_collectives) +
                          stage.transfer_seconds + in.reduction_work + in.optimizer_work;
      stage.waiting_seconds = std::max(0.0, step.step_seconds - busy);
      step.stages.push_back(stage);
    }
    return step;
  }

  static constexpr double kEpsilon = 1e-12;
  const PipelineSchedule& schedule_;
  const std::vector<SimulatedStageInput>& inputs_;
  const int p_, m_, v_;
  std::vector<StageState> state_;
  MessageTable messages_;
  const PipelineLayout layout_;
  const bool shared_cores_;
  StageRates stage_rates_;
  std::vector<size_t> needs_, pending_;  // scratch, reused per instruction
  double now_ = 0;
};

}  // namespace

SimulatedStep simulate_step(const PipelineSchedule& schedule,
                            const std::vector<SimulatedStageInput>& inputs, int ranks_per_stage,
                            double cores) {
  if (static_cast<int>(inputs.size()) != schedule.num_stages ||
      static_cast<int>(schedule.stages.size()) != schedule.num_stages)
    throw std::invalid_argument("simulate_step: one input per pipeline stage needed");
  return StepSimulation(schedule, inputs, ranks_per_stage, cores).run();
}

}  // namespace paraplan
