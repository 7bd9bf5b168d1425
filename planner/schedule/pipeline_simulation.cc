// pipeline_simulation.cc: a step's instruction streams played out in time
// with shared cores (model in pipeline_simulation.h).
#include "planner/schedule/pipeline_simulation.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

// The ends an instruction of stage s posts: (message, is the sending end).
struct Ends {
  int count = 0;
  std::pair<size_t, bool> end[2];
};

Ends ends(const PipelineInstruction& in, int rank, const PipelineLayout& layout,
          const MessageTable& table) {
  const int s = layout.virtual_stage(rank, in.chunk);
  const auto activation = [&](int micro_batch, int sender) {
    return table.index(false, micro_batch, sender);
  };
  const auto gradient = [&](int micro_batch, int sender) {
    return table.index(true, micro_batch, sender);
  };
  switch (in.op) {
    case OpCode::SendActivation:
      return {1, {{activation(in.micro_batch, s), true}, {}}};
    case OpCode::RecvActivation:
      return {1, {{activation(in.micro_batch, s - 1), false}, {}}};
    case OpCode::SendGradient:
      return {1, {{gradient(in.micro_batch, s), true}, {}}};
    case OpCode::RecvGradient:
      return {1, {{gradient(in.micro_batch, s + 1), false}, {}}};
    case OpCode::SendActivationRecvGradient:
      return {
          2,
          {{activation(in.micro_batch, s), true}, {gradient(in.peer_micro_batch, s + 1), false}}};
    case OpCode::SendGradientRecvActivation:
      return {
          2,
          {{gradient(in.micro_batch, s), true}, {activation(in.peer_micro_batch, s - 1), false}}};
    case OpCode::LoadMicroBatch:
    case OpCode::Forward:
    case OpCode::Backward:
    case OpCode::ReduceGradients:
    case OpCode::OptimizerStep:
    case OpCode::BackwardInput:
    case OpCode::BackwardWeight:
      return {};
  }
  return {};  // an op outside the enum: refused where plans are read
}

// Posted transfers: the messages an instruction of stage s must find done
// before it starts. A Forward its activation, a Backward / BackwardInput its
// output gradient and its chunk's last input-gradient send (it writes that
// buffer again), ReduceGradients every send of the stage.
// Appends them to `needs` (cleared first); returns whether the first is the
// message the op received (its copy, on shared cores, is the op's work).
bool posted_needs(const PipelineInstruction& in, int rank, const PipelineLayout& layout,
                  const MessageTable& table, const std::vector<size_t>& sent,
                  const std::vector<int64_t>& last_gradient_sent, std::vector<size_t>& needs) {
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
    case OpCode::LoadMicroBatch:
    case OpCode::SendActivation:
    case OpCode::RecvActivation:
    case OpCode::SendGradient:
    case OpCode::RecvGradient:
    case OpCode::SendActivationRecvGradient:
    case OpCode::SendGradientRecvActivation:
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
  // Posted transfers: the messages the stage sent, and per chunk the last
  // input gradient it sent (-1: none), which its next backward overwrites.
  std::vector<size_t> sent;
  std::vector<int64_t> last_gradient_sent;
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

SimulatedStep simulate_step(const PipelineSchedule& schedule,
                            const std::vector<SimulatedStageInput>& inputs, int ranks_per_stage,
                            double cores) {
  const int p = schedule.num_stages, m = schedule.num_micro_batches;
  const int v = std::max(schedule.virtual_stages, 1);
  if (static_cast<int>(inputs.size()) != p || static_cast<int>(schedule.stages.size()) != p)
    throw std::invalid_argument("simulate_step: one input per pipeline stage needed");
  std::vector<StageState> state(p);
  for (StageState& st : state) st.last_gradient_sent.assign(v, -1);
  MessageTable messages(m, p * v);
  const PipelineLayout layout = PipelineLayout::of(schedule.kind, p, v);
  const bool posted = schedule.transfers == schema::Transfers::Posted;
  std::vector<size_t> needs, pending;  // posted transfers: scratch, reused per instruction
  double now = 0;
  const double epsilon = 1e-12;
  const bool shared_cores = cores > 0;
  StageRates stage_rates(p, ranks_per_stage, cores);

  // Starts instructions (and finishes those taking no time) until every stage
  // is busy, blocked or done.
  auto start_instructions = [&] {
    bool moved = true;
    while (moved) {
      moved = false;
      for (int s = 0; s < p; ++s) {
        StageState& st = state[s];
        const SimulatedStageInput& in = inputs[s];
        if (st.phase == Phase::kTransfer && shared_cores && !posted) {
          // Once every message is posted at both ends, each end copies it:
          // work, like the collectives.
          bool posted = true;
          double copies = 0;
          for (const size_t key : st.waiting)
            posted = posted && messages[key].posted(), copies += messages[key].seconds;
          if (posted) {
            st.phase = Phase::kCollective, st.remaining = copies, st.transfer_work += copies;
            st.waiting.clear(), moved = true;
          }
        } else if (st.phase == Phase::kTransfer) {
          bool complete = true;
          for (const size_t key : st.waiting)
            complete = complete && messages[key].posted() &&
                       (shared_cores || messages[key].done() <= now + epsilon);
          if (complete) st.phase = Phase::kStart, st.waiting.clear(), moved = true;
        }
        if (st.phase == Phase::kBarrier) {
          bool all = true;
          for (const StageState& other : state)
            all = all && (other.phase == Phase::kBarrier || other.op == OpCode::OptimizerStep);
          if (!all) continue;
          st.phase = Phase::kCompute, st.remaining = in.optimizer_work, st.collectives_after = 0;
          st.compute_started = now, moved = true;
        }
        if (st.phase != Phase::kStart) continue;
        if (st.next == schedule.stages[s].size()) {
          st.phase = Phase::kDone, st.finished = now;
          continue;
        }
        const PipelineInstruction& instruction = schedule.stages[s][st.next++];
        st.op = instruction.op;
        st.waits_after = 0;
        moved = true;
        double receive_copies = 0;  // shared cores: the receiving end's copy
        if (posted) {
          const bool receives =
              posted_needs(instruction, s, layout, messages, st.sent, st.last_gradient_sent, needs);
          pending.clear();
          for (const size_t key : needs) {
            const Message& message = messages[key];
            if (!message.posted() || (!shared_cores && message.done() > now + epsilon))
              pending.push_back(key);
          }
          if (!pending.empty()) {
            // Back to this instruction once its transfers are done.
            --st.next;
            st.waiting.assign(pending.begin(), pending.end()), st.phase = Phase::kTransfer;
            continue;
          }
          if (shared_cores && receives) receive_copies = messages[needs[0]].seconds;
        }
        switch (instruction.op) {
          case OpCode::Forward:
          case OpCode::Backward:
          case OpCode::BackwardInput:
          case OpCode::BackwardWeight: {
            const bool forward = instruction.op == OpCode::Forward;
            const double share = instruction.op == OpCode::BackwardInput    ? 1 - in.weight_fraction
                                 : instruction.op == OpCode::BackwardWeight ? in.weight_fraction
                                                                            : 1.0;
            st.phase = Phase::kCompute, st.compute_started = now;
            st.remaining = (forward ? in.forward_work : in.backward_work) * share / v;
            // The tensor-parallel all-reduces go with the input gradient.
            st.collectives_after =
                (forward                                    ? in.forward_collectives
                 : instruction.op == OpCode::BackwardWeight ? 0
                                                            : in.backward_collectives) /
                v;
            st.waits_after =
                (forward                                    ? in.forward_group_waits
                 : instruction.op == OpCode::BackwardWeight ? 0
                                                            : in.backward_group_waits) /
                v;
            st.collectives_after += receive_copies, st.transfer_work += receive_copies;
            break;
          }
          case OpCode::ReduceGradients:
            st.phase = Phase::kCollective, st.remaining = in.reduction_work;
            break;
          case OpCode::OptimizerStep:
            st.phase = Phase::kBarrier;
            break;
          case OpCode::LoadMicroBatch:
            break;  // no time: stays at kStart for the next instruction
          case OpCode::SendActivation:
          case OpCode::RecvActivation:
          case OpCode::SendGradient:
          case OpCode::RecvGradient:
          case OpCode::SendActivationRecvGradient:
          case OpCode::SendGradientRecvActivation:
            const Ends posted_ends = ends(instruction, s, layout, messages);
            const double link_seconds = local_send(instruction, s, layout) ? 0 : in.p2p_seconds;
            for (int e = 0; e < posted_ends.count; ++e) {
              const auto& [key, sending] = posted_ends.end[e];
              Message& message = messages[key];
              (sending ? message.sent : message.received) = now;
              if (sending) message.seconds = link_seconds;
              if (!posted) {
                st.waiting.push_back(key);
                continue;
              }
              if (!sending) continue;
              st.sent.push_back(key);
              if (instruction.op == OpCode::SendGradient)
                st.last_gradient_sent[instruction.chunk] = static_cast<int64_t>(key);
              if (shared_cores)  // the sending end's copy, at once
                st.phase = Phase::kCollective, st.remaining = link_seconds,
                st.transfer_work += link_seconds;
            }
            if (!posted) st.phase = Phase::kTransfer;
            break;
        }
      }
    }
  };

  for (int guard = 0;; ++guard) {
    if (guard > 100 * (m + p) * p + 1000)
      throw std::logic_error("simulate_step: the schedule does not finish");
    start_instructions();
    bool done = true;
    for (const StageState& st : state) done = done && st.phase == Phase::kDone;
    if (done) break;
    const std::vector<double>& rates = stage_rates.update(state);
    double next = kInfinity;
    for (int s = 0; s < p; ++s) {
      const StageState& st = state[s];
      const double rate = rates[s];
      if (st.phase == Phase::kCompute) next = std::min(next, now + st.remaining / rate);
      if (st.phase == Phase::kCollective) next = std::min(next, now + st.remaining / rate);
      if (st.phase == Phase::kGroupWait) next = std::min(next, st.wait_until);
      if (st.phase == Phase::kTransfer)
        for (const size_t key : st.waiting)
          // (One already done may wait beside one not yet posted.)
          if (messages[key].posted() && messages[key].done() > now)
            next = std::min(next, messages[key].done());
    }
    if (next == kInfinity) throw std::logic_error("simulate_step: every stage is blocked");
    const double elapsed = next - now;
    now = next;
    for (int s = 0; s < p; ++s) {
      StageState& st = state[s];
      const double rate = rates[s];
      if (st.phase == Phase::kCompute) {
        st.remaining -= elapsed * rate;
        if (st.remaining > epsilon * std::max(1.0, now)) continue;
        const double wall = now - st.compute_started;
        (st.op == OpCode::Forward         ? st.forward
         : st.op == OpCode::OptimizerStep ? st.optimizer
                                          : st.backward) += wall;
        st.phase = Phase::kCollective, st.remaining = st.collectives_after;
      } else if (st.phase == Phase::kCollective) {
        st.remaining -= elapsed * rate;
      }
      if (st.phase == Phase::kCollective && st.remaining <= epsilon * std::max(1.0, now)) {
        st.phase = st.waits_after > 0 ? Phase::kGroupWait : Phase::kStart;
        st.wait_until = now + st.waits_after, st.waits_after = 0;
      } else if (st.phase == Phase::kGroupWait && st.wait_until <= now + epsilon) {
        st.phase = Phase::kStart;
      }
    }
  }

  SimulatedStep step;
  for (const StageState& st : state) step.step_seconds = std::max(step.step_seconds, st.finished);
  for (int s = 0; s < p; ++s) {
    const StageState& st = state[s];
    const SimulatedStageInput& in = inputs[s];
    SimulatedStage stage;
    stage.forward_wall = st.forward / m;
    stage.backward_wall = st.backward / m;
    stage.optimizer_wall = st.optimizer;
    if (shared_cores) {
      stage.transfer_seconds = st.transfer_work;
    } else {
      for (const PipelineInstruction& instruction : schedule.stages[s]) {
        const Ends posted = ends(instruction, s, layout, messages);
        const bool local = local_send(instruction, s, layout);
        for (int e = 0; e < posted.count; ++e)
          stage.transfer_seconds += posted.end[e].second && !local ? in.p2p_seconds : 0;
      }
    }
    // (The group waits are waiting.)
    const double busy = m * (in.forward_work + in.backward_work + in.forward_collectives +
                             in.backward_collectives) +
                        stage.transfer_seconds + in.reduction_work + in.optimizer_work;
    stage.waiting_seconds = std::max(0.0, step.step_seconds - busy);
    step.stages.push_back(stage);
  }
  return step;
}

double dependency_bound_step(const PipelineSchedule& schedule, double forward, double backward,
                             double weight_fraction) {
  if (schedule.transfers != schema::Transfers::Posted)
    throw std::invalid_argument("dependency_bound_step: the schedule's transfers are not posted");
  const int p = schedule.num_stages, m = schedule.num_micro_batches;
  const int v = std::max(schedule.virtual_stages, 1);
  const PipelineLayout layout = schedule.layout();
  const int stages = layout.num_virtual_stages(), last = layout.last_virtual_stage();
  const auto duration = [&](OpCode op) {
    switch (op) {
      case OpCode::Forward:
        return forward / v;
      case OpCode::Backward:
        return backward / v;
      case OpCode::BackwardInput:
        return backward * (1 - weight_fraction) / v;
      case OpCode::BackwardWeight:
        return backward * weight_fraction / v;
      case OpCode::LoadMicroBatch:
      case OpCode::SendActivation:
      case OpCode::RecvActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
      case OpCode::SendActivationRecvGradient:
      case OpCode::SendGradientRecvActivation:
      case OpCode::ReduceGradients:
      case OpCode::OptimizerStep:
        return -1.0;  // not compute
    }
    return -1.0;  // an op outside the enum: not compute
  };
  // When each message's ends were posted (-1: not yet), as simulate_step's
  // MessageTable: the activation or gradient of a micro-batch by its sender.
  struct Posts {
    double sent = -1, received = -1;
  };
  std::vector<Posts> messages(2 * static_cast<size_t>(m) * stages);
  const auto index = [&](bool gradient, int micro_batch, int sender) {
    if (micro_batch < 0 || micro_batch >= m || sender < 0 || sender > last)
      throw std::invalid_argument("dependency_bound_step: a transfer of micro-batch " +
                                  std::to_string(micro_batch) + " from virtual stage " +
                                  std::to_string(sender) + " is outside the schedule");
    return (static_cast<size_t>(gradient) * m + micro_batch) * stages + sender;
  };
  // Per rank and chunk, the last input gradient sent: its next backward
  // writes that buffer again, so waits until the peer has received it.
  std::vector<std::vector<int64_t>> last_gradient_sent(p, std::vector<int64_t>(v, -1));
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  // Ranks to advance: each runs its stream until a compute op finds an input
  // not yet posted at both ends; posting an end wakes the rank at the other.
  std::vector<int> waking(p);
  std::vector<char> awake(p, 1);
  for (int r = 0; r < p; ++r) waking[r] = p - 1 - r;
  const auto wake = [&](int rank) {
    if (!awake[rank]) awake[rank] = 1, waking.push_back(rank);
  };
  while (!waking.empty()) {
    const int r = waking.back();
    waking.pop_back();
    awake[r] = 0;
    const InstructionStream& stream = schedule.stages[r];
    for (; next[r] < stream.size(); ++next[r]) {
      const PipelineInstruction& in = stream[next[r]];
      const int vs = layout.virtual_stage(r, in.chunk), mb = in.micro_batch;
      // A transfer only posts its end, when the stream reaches it.
      if (in.op == OpCode::SendActivation || in.op == OpCode::SendGradient) {
        const bool gradient = in.op == OpCode::SendGradient;
        const size_t key = index(gradient, mb, vs);
        messages[key].sent = free_at[r];
        if (gradient) last_gradient_sent[r][in.chunk] = static_cast<int64_t>(key);
        wake(layout.rank_of(gradient ? vs - 1 : vs + 1));
        continue;
      }
      if (in.op == OpCode::RecvActivation || in.op == OpCode::RecvGradient) {
        const bool gradient = in.op == OpCode::RecvGradient;
        const int sender = gradient ? vs + 1 : vs - 1;
        messages[index(gradient, mb, sender)].received = free_at[r];
        wake(layout.rank_of(sender));
        continue;
      }
      const double d = duration(in.op);
      if (d < 0) continue;  // loads, the reduction and the step: no time here
      double ready = free_at[r];
      bool blocked = false;
      const auto needs = [&](size_t key) {
        const Posts& posts = messages[key];
        if (posts.sent < 0 || posts.received < 0) blocked = true;
        ready = std::max({ready, posts.sent, posts.received});
      };
      const bool input = in.op == OpCode::Backward || in.op == OpCode::BackwardInput;
      if (in.op == OpCode::Forward && vs > 0) needs(index(false, mb, vs - 1));
      if (input && vs < last) needs(index(true, mb, vs + 1));
      if (input && last_gradient_sent[r][in.chunk] >= 0)
        needs(static_cast<size_t>(last_gradient_sent[r][in.chunk]));
      if (blocked) break;
      free_at[r] = ready + d;
    }
  }
  for (int r = 0; r < p; ++r)
    if (next[r] < schedule.stages[r].size())
      throw std::logic_error("dependency_bound_step: rank " + std::to_string(r) +
                             "'s compute waits for a transfer that never comes (instruction " +
                             std::to_string(next[r]) + ")");
  return *std::max_element(free_at.begin(), free_at.end());
}

}  // namespace paraplan
