// schedule_verify.cc: the verifier that runs all pipeline ranks' streams
// together (every chunk of every rank) under the posted transfer model
// (schedule.h), and the in-flight counts the memory model shares with it.
#include <algorithm>
#include <set>
#include <string>

#include "planner/schedule/schedule.h"

namespace paraplan {

using schema::OpCode;

namespace {

enum class Channel { Activation, Gradient };

// One half of a communication instruction: a send or a receive on the link
// between two adjacent virtual stages.
struct Transfer {
  Channel channel;
  bool is_send;
  int micro_batch;
  int chunk;                  // this rank's chunk
  int peer_rank, peer_chunk;  // the other end
  bool matched = false;
  size_t instruction = 0;  // the index of the instruction that posted it
};

// Per chunk of a rank, per micro-batch.
struct ChunkState {
  std::vector<int> loaded, forwarded, input_done, weight_done, split;
  std::vector<int> activation_received, gradient_received, activation_sent, gradient_sent;
};

struct RankState {
  size_t position = 0;  // index of the current instruction
  // Every transfer posted and not yet matched, in posting order.
  std::vector<Transfer> transfers;
  std::vector<ChunkState> chunks;
  int in_flight = 0;
  bool reduced = false, stepped = false;
};

std::string describe(const Transfer& t) {
  return std::string(t.channel == Channel::Activation ? "activation" : "gradient") +
         " of micro-batch " + std::to_string(t.micro_batch) + " (chunk " +
         std::to_string(t.is_send ? t.chunk : t.peer_chunk) + " to chunk " +
         std::to_string(t.is_send ? t.peer_chunk : t.chunk) + ")";
}

class ScheduleSimulator {
 public:
  explicit ScheduleSimulator(const PipelineSchedule& schedule)
      : schedule_(schedule),
        p_(static_cast<int>(schedule.stages.size())),
        v_(std::max(schedule.virtual_stages, 1)),
        layout_(PipelineLayout::of(schedule.kind, p_, v_)),
        ranks_(schedule.stages.size()) {
    const size_t m = static_cast<size_t>(std::max(schedule.num_micro_batches, 0));
    for (RankState& state : ranks_) {
      state.chunks.resize(v_);
      for (ChunkState& chunk : state.chunks)
        for (auto* counts : {&chunk.loaded, &chunk.forwarded, &chunk.input_done, &chunk.weight_done,
                             &chunk.split, &chunk.activation_received, &chunk.gradient_received,
                             &chunk.activation_sent, &chunk.gradient_sent})
          counts->assign(m, 0);
    }
  }

  std::optional<std::string> run() {
    if (p_ != schedule_.num_stages || p_ < 1 || schedule_.num_micro_batches < 1)
      return "schedule has " + std::to_string(p_) + " streams for num_stages " +
             std::to_string(schedule_.num_stages) + " and num_micro_batches " +
             std::to_string(schedule_.num_micro_batches) + "; need one stream per stage, m >= 1";
    if (schedule_.virtual_stages < 1)
      return "virtual_stages " + std::to_string(schedule_.virtual_stages) + " must be >= 1";
    if (v_ > 1 && p_ < 2)
      return "virtual_stages " + std::to_string(v_) + " needs at least 2 pipeline stages";
    for (int s = 0; s < p_; ++s)
      bounds_.push_back(in_flight_bound(schedule_.kind, p_, schedule_.num_micro_batches, v_, s));
    for (bool progress = true; progress && !problem_;) {
      progress = false;
      for (int s = 0; s < p_ && !problem_; ++s) progress |= advance(s);
    }
    if (problem_) return problem_;
    return check_finished();
  }

 private:
  int last_virtual_stage() const { return p_ * v_ - 1; }
  bool finished(int s) const { return ranks_[s].position >= schedule_.stages[s].size(); }
  const PipelineInstruction& current(int s) const {
    return schedule_.stages[s][ranks_[s].position];
  }
  std::string where(int s) const {
    return "stage " + std::to_string(s) + " instruction " + std::to_string(ranks_[s].position) +
           " " + format_instruction(current(s));
  }
  std::string chunk_text(int chunk) const {
    return v_ > 1 ? " (chunk " + std::to_string(chunk) + ")" : "";
  }
  void report(int s, const std::string& problem) {
    if (!problem_) problem_ = where(s) + ": " + problem;
  }
  bool in_range(int mb) const { return mb >= 0 && mb < schedule_.num_micro_batches; }

  // Runs stage s as far as it can; true if it made any progress. Every Send
  // / Recv posts and moves on; what consumes a transfer waits for it
  // (waits_for_transfer).
  bool advance(int s) {
    bool progress = false;
    RankState& state = ranks_[s];
    while (!finished(s) && !problem_) {
      match_open(s);
      if (problem_ || waits_for_transfer(s)) break;
      const size_t open = state.transfers.size();
      if (!post(s)) break;
      for (size_t i = open; i < state.transfers.size(); ++i)
        if (state.transfers[i].peer_rank != s) match_open(state.transfers[i].peer_rank);
      state.position++;
      progress = true;
    }
    return progress;
  }

  // Matches rank s's open transfers with its neighbours', each link's in
  // posting order, and forgets the matched ones.
  void match_open(int s) {
    RankState& state = ranks_[s];
    for (size_t i = 0; i < state.transfers.size() && !problem_; ++i)
      if (!state.transfers[i].matched && !waits_behind(state, i)) try_match(s, state.transfers[i]);
    for (const int r : {s, (s + 1) % p_, (s + p_ - 1) % p_}) {
      std::vector<Transfer>& open = ranks_[r].transfers;
      open.erase(
          std::remove_if(open.begin(), open.end(), [](const Transfer& t) { return t.matched; }),
          open.end());
    }
  }

  // Whether rank s's current instruction must wait for a posted transfer: a
  // compute op for the receive bringing its input, a backward for the
  // chunk's last input-gradient send, ReduceGradients for every send. A
  // consumer whose receive was never posted is left to post() to refuse.
  bool waits_for_transfer(int s) const {
    const PipelineInstruction& ins = current(s);
    for (const Transfer& t : ranks_[s].transfers) {
      if (ins.op == OpCode::ReduceGradients && t.is_send) return true;
      if (t.chunk != ins.chunk) continue;
      const bool backward = ins.op == OpCode::Backward || ins.op == OpCode::BackwardInput;
      if (ins.op == OpCode::Forward && !t.is_send && t.channel == Channel::Activation &&
          t.micro_batch == ins.micro_batch)
        return true;
      if (backward && t.channel == Channel::Gradient &&
          (t.is_send || t.micro_batch == ins.micro_batch))
        return true;
    }
    return false;
  }

  // Messages between two ranks match in the order posted: transfer i waits
  // while an earlier one goes the same way.
  static bool waits_behind(const RankState& state, size_t i) {
    const Transfer& t = state.transfers[i];
    for (size_t k = 0; k < i; ++k) {
      const Transfer& e = state.transfers[k];
      if (!e.matched && e.peer_rank == t.peer_rank && e.is_send == t.is_send) return true;
    }
    return false;
  }

  // Matches transfer (posted by stage s) with the first unmatched transfer the
  // neighbour posted the other way between the two.
  void try_match(int s, Transfer& transfer) {
    const int n = transfer.peer_rank;
    for (Transfer& other : ranks_[n].transfers) {
      if (other.matched || other.is_send == transfer.is_send || other.peer_rank != s) continue;
      if (other.channel != transfer.channel || other.micro_batch != transfer.micro_batch ||
          other.chunk != transfer.peer_chunk || other.peer_chunk != transfer.chunk) {
        // Named by the instructions that posted them, long past perhaps.
        const auto posted_by = [this](int rank, const Transfer& t) {
          return "stage " + std::to_string(rank) + " instruction " + std::to_string(t.instruction) +
                 " " + format_instruction(schedule_.stages[rank][t.instruction]);
        };
        if (!problem_)
          problem_ = posted_by(s, transfer) + ": messages matched out of order: its " +
                     describe(transfer) + " meets " + posted_by(n, other) + "'s " + describe(other);
        return;
      }
      transfer.matched = other.matched = true;
      const Transfer& receive = transfer.is_send ? other : transfer;
      ChunkState& receiver = ranks_[transfer.is_send ? n : s].chunks[receive.chunk];
      auto& received = receive.channel == Channel::Activation ? receiver.activation_received
                                                              : receiver.gradient_received;
      received[receive.micro_batch]++;
      return;
    }
  }

  // Checks the preconditions of stage s's current instruction, applies a local op's
  // effects or posts a communication op's transfers. False on a problem.
  bool post(int s) {
    RankState& state = ranks_[s];
    const PipelineInstruction& ins = current(s);
    const int mb = ins.micro_batch;
    const bool step_level = ins.op == OpCode::ReduceGradients || ins.op == OpCode::OptimizerStep;
    auto fail = [&](const std::string& problem) {
      report(s, problem);
      return false;
    };
    if (state.stepped) return fail("comes after OptimizerStep, which must be last");
    if (ins.chunk < 0 || ins.chunk >= v_)
      return fail("chunk out of range 0.." + std::to_string(v_ - 1));
    if (!step_level && !in_range(mb))
      return fail("micro_batch out of range 0.." + std::to_string(schedule_.num_micro_batches - 1));
    const int vs = layout_.virtual_stage(s, ins.chunk);
    const bool to_previous = ins.op == OpCode::RecvActivation || ins.op == OpCode::SendGradient;
    const bool to_next = ins.op == OpCode::SendActivation || ins.op == OpCode::RecvGradient;
    const std::string stage_word = v_ > 1 ? "virtual stage" : "stage";
    if (to_previous && vs == 0) return fail(stage_word + " 0 has no previous stage");
    if (to_next && vs == last_virtual_stage())
      return fail("the last " + stage_word + " has no next stage");
    const bool loads_data = vs == 0 || vs == last_virtual_stage();
    const bool has_next = vs < last_virtual_stage();
    ChunkState& chunk = state.chunks[ins.chunk];
    auto post_transfer = [&](Channel channel, bool is_send, int micro_batch) {
      const bool towards_next = (channel == Channel::Activation) == is_send;
      const int peer = towards_next ? vs + 1 : vs - 1;
      state.transfers.push_back({channel, is_send, micro_batch, ins.chunk, layout_.rank_of(peer),
                                 layout_.chunk_of(peer), false, state.position});
    };
    const bool input_gradient = ins.op == OpCode::Backward || ins.op == OpCode::BackwardInput;
    const bool weight_gradient = ins.op == OpCode::Backward || ins.op == OpCode::BackwardWeight;
    if (input_gradient || weight_gradient) {
      const int mode = ins.op == OpCode::Backward ? 1 : 2;
      if (chunk.split[mb] && chunk.split[mb] != mode)
        return fail("micro-batch mixes Backward with BackwardInput/BackwardWeight");
      chunk.split[mb] = mode;
    }
    if (input_gradient) {
      if (!chunk.forwarded[mb]) return fail("backward before its forward");
      if (chunk.input_done[mb]) return fail("micro-batch backwarded more than once");
      if (has_next && !chunk.gradient_received[mb])
        return fail("backward before its gradient's receive was posted");
      chunk.input_done[mb]++;
    }
    if (ins.op == OpCode::BackwardWeight) {
      if (!chunk.input_done[mb]) return fail("BackwardWeight before its BackwardInput");
      if (chunk.weight_done[mb]) return fail("micro-batch's BackwardWeight more than once");
    }
    if (weight_gradient) {
      chunk.weight_done[mb]++;
      state.in_flight--;
    }
    switch (ins.op) {
      case OpCode::LoadMicroBatch:
        if (!loads_data)
          return fail(std::string(v_ > 1 ? "this chunk" : "this stage") +
                      " holds neither the embedding nor the head");
        if (chunk.loaded[mb]++) return fail("micro-batch loaded more than once");
        break;
      case OpCode::Forward: {
        if (chunk.forwarded[mb]) return fail("micro-batch forwarded more than once");
        if (loads_data && !chunk.loaded[mb]) return fail("forward before its LoadMicroBatch");
        if (vs > 0 && !chunk.activation_received[mb])
          return fail("forward before its activation's receive was posted");
        chunk.forwarded[mb]++;
        const int bound = bounds_[s];
        if (++state.in_flight > bound)
          return fail(std::to_string(state.in_flight) +
                      " micro-batches in flight, above the bound of " + std::to_string(bound) +
                      " the memory model assumes for " +
                      schema::EnumNameScheduleKind(schedule_.kind) + " on this stage");
        break;
      }
      case OpCode::ReduceGradients:
        if (state.reduced) return fail("ReduceGradients appears more than once");
        for (int c = 0; c < v_; ++c)
          for (int k = 0; k < schedule_.num_micro_batches; ++k)
            if (!state.chunks[c].weight_done[k])
              return fail("ReduceGradients before micro-batch " + std::to_string(k) +
                          chunk_text(c) + " was backwarded" +
                          (state.chunks[c].split[k] == 2 ? " (its BackwardWeight)" : ""));
        state.reduced = true;
        break;
      case OpCode::OptimizerStep:
        if (!state.reduced) return fail("OptimizerStep before ReduceGradients");
        state.stepped = true;
        break;
      case OpCode::Backward:
      case OpCode::SendActivation:
      case OpCode::RecvActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
      case OpCode::BackwardInput:
      case OpCode::BackwardWeight:
        break;
    }
    if (ins.op == OpCode::SendActivation) {
      if (!chunk.forwarded[mb]) return fail("sends an activation before its forward");
      if (chunk.activation_sent[mb]++) return fail("activation sent more than once");
      post_transfer(Channel::Activation, true, mb);
    }
    if (ins.op == OpCode::SendGradient) {
      if (!chunk.input_done[mb]) return fail("sends a gradient before its backward");
      if (chunk.gradient_sent[mb]++) return fail("gradient sent more than once");
      post_transfer(Channel::Gradient, true, mb);
    }
    if (ins.op == OpCode::RecvActivation) {
      if (chunk.activation_received[mb])
        return fail("activation of micro-batch " + std::to_string(mb) + " received more than once");
      post_transfer(Channel::Activation, false, mb);
    }
    if (ins.op == OpCode::RecvGradient) {
      if (chunk.gradient_received[mb])
        return fail("gradient of micro-batch " + std::to_string(mb) + " received more than once");
      post_transfer(Channel::Gradient, false, mb);
    }
    return true;
  }

  std::optional<std::string> check_finished() {
    std::string blocked;
    std::optional<std::string> unmatched;
    for (int s = 0; s < p_; ++s) {
      if (finished(s)) {
        blocked += "\n  stage " + std::to_string(s) + ": finished";
        continue;
      }
      blocked += "\n  " + where(s) + " (blocked)";
    }
    for (int s = 0; s < p_ && !unmatched; ++s)
      for (const Transfer& transfer : ranks_[s].transfers)
        if (!transfer.matched && finished(transfer.peer_rank)) {
          unmatched = "unmatched " + std::string(transfer.is_send ? "send" : "receive") +
                      " of stage " + std::to_string(s) + ": the " + describe(transfer) +
                      " with stage " + std::to_string(transfer.peer_rank) +
                      ", which has finished its stream";
          break;
        }
    if (unmatched) return *unmatched + blocked;
    if (blocked.find("(blocked)") != std::string::npos) return "deadlock:" + blocked;
    for (int s = 0; s < p_; ++s) {
      const RankState& state = ranks_[s];
      for (int c = 0; c < v_; ++c) {
        const ChunkState& chunk = state.chunks[c];
        for (int mb = 0; mb < schedule_.num_micro_batches; ++mb) {
          const char* never = !chunk.forwarded[mb]     ? "forwarded"
                              : !chunk.input_done[mb]  ? "backwarded"
                              : !chunk.weight_done[mb] ? "given its BackwardWeight"
                                                       : nullptr;
          if (never)
            return "stage " + std::to_string(s) + ": micro-batch " + std::to_string(mb) +
                   chunk_text(c) + " is never " + never;
        }
      }
      if (!state.reduced || !state.stepped)
        return "stage " + std::to_string(s) + ": stream must end with ReduceGradients then " +
               "OptimizerStep";
    }
    return std::nullopt;
  }

  const PipelineSchedule& schedule_;
  int p_, v_;
  PipelineLayout layout_;
  std::vector<RankState> ranks_;
  std::vector<int> bounds_;  // in_flight_bound per rank
  std::optional<std::string> problem_;
};

// Walks a rank's stream, calling visit(activations, weight_pending) per chunk
// after each compute op: micro-batches forwarded but not yet through
// Backward / BackwardInput, and through BackwardInput but not BackwardWeight.
template <typename Visit>
void walk_in_flight(const PipelineSchedule& schedule, int pipeline_rank, Visit visit) {
  const int v = std::max(schedule.virtual_stages, 1);
  std::vector<int> activations(v, 0), weight_pending(v, 0);
  for (const PipelineInstruction& ins : schedule.stages.at(pipeline_rank)) {
    if (ins.chunk < 0 || ins.chunk >= v) continue;
    switch (ins.op) {
      case OpCode::Forward:
        activations[ins.chunk]++;
        break;
      case OpCode::Backward:
        activations[ins.chunk]--;
        break;
      case OpCode::BackwardInput:
        activations[ins.chunk]--;
        weight_pending[ins.chunk]++;
        break;
      case OpCode::BackwardWeight:
        weight_pending[ins.chunk]--;
        break;
      case OpCode::LoadMicroBatch:
      case OpCode::SendActivation:
      case OpCode::RecvActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
      case OpCode::ReduceGradients:
      case OpCode::OptimizerStep:
        continue;
    }
    visit(activations, weight_pending);
  }
}

}  // namespace

std::optional<std::string> verify_schedule(const PipelineSchedule& schedule) {
  return ScheduleSimulator(schedule).run();
}

std::vector<int> max_in_flight(const PipelineSchedule& schedule, int pipeline_rank) {
  std::vector<int> peak(std::max(schedule.virtual_stages, 1), 0);
  walk_in_flight(schedule, pipeline_rank,
                 [&](const std::vector<int>& activations, const std::vector<int>& pending) {
                   for (size_t c = 0; c < peak.size(); ++c)
                     peak[c] = std::max(peak[c], activations[c] + pending[c]);
                 });
  return peak;
}

std::vector<int> max_slots_held(const PipelineSchedule& schedule, int pipeline_rank) {
  const int v = std::max(schedule.virtual_stages, 1);
  std::vector<std::set<int>> held(v);
  std::vector<int> peak(v, 0);
  for (const PipelineInstruction& ins : schedule.stages.at(pipeline_rank)) {
    if (ins.chunk < 0 || ins.chunk >= v) continue;
    std::set<int>& chunk = held[ins.chunk];
    switch (ins.op) {
      case OpCode::LoadMicroBatch:
      case OpCode::RecvActivation:
      case OpCode::Forward:
        chunk.insert(ins.micro_batch);
        break;
      case OpCode::Backward:
      case OpCode::BackwardWeight:
        chunk.erase(ins.micro_batch);
        break;
      case OpCode::SendActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
      case OpCode::ReduceGradients:
      case OpCode::OptimizerStep:
      case OpCode::BackwardInput:
        break;
    }
    peak[ins.chunk] = std::max(peak[ins.chunk], static_cast<int>(chunk.size()));
  }
  return peak;
}

std::vector<int> max_weight_pending(const PipelineSchedule& schedule, int pipeline_rank) {
  std::vector<int> peak(std::max(schedule.virtual_stages, 1), 0);
  walk_in_flight(schedule, pipeline_rank,
                 [&](const std::vector<int>&, const std::vector<int>& pending) {
                   for (size_t c = 0; c < peak.size(); ++c) peak[c] = std::max(peak[c], pending[c]);
                 });
  return peak;
}

double peak_in_flight_bytes(const PipelineSchedule& schedule, int pipeline_rank,
                            const std::vector<double>& activation_bytes,
                            const std::vector<double>& weight_pending_bytes) {
  double peak = 0;
  walk_in_flight(schedule, pipeline_rank,
                 [&](const std::vector<int>& activations, const std::vector<int>& pending) {
                   double bytes = 0;
                   for (size_t c = 0; c < activations.size(); ++c)
                     bytes += activations[c] * activation_bytes.at(c) +
                              pending[c] * weight_pending_bytes.at(c);
                   peak = std::max(peak, bytes);
                 });
  return peak;
}

}  // namespace paraplan
