// dependency_bound.cc: dependency_bound_step (pipeline_simulation.h), a
// posted schedule played out on devices of their own in time linear in its
// ops: what the cost model's bubbles come from.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "planner/schedule/pipeline_simulation.h"

namespace paraplan {

using schema::OpCode;

namespace {

// A compute op's time (a chunk's op does 1 / v of the rank's); -1 for the
// others.
double compute_seconds(OpCode op, double forward, double backward, double weight_fraction, int v) {
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
    case OpCode::ReduceGradients:
    case OpCode::GatherParameters:
    case OpCode::ReleaseParameters:
    case OpCode::ReduceScatterGradients:
    case OpCode::OptimizerStep:
      return -1.0;  // not compute
  }
  return -1.0;  // an op outside the enum: not compute
}

// When each message's ends were posted (-1: not yet), as simulate_step's
// MessageTable: the activation or gradient of a micro-batch by its sender.
struct Posts {
  double sent = -1, received = -1;
};
class PostTable {
 public:
  PostTable(int micro_batches, int virtual_stages)
      : m_(micro_batches),
        stages_(virtual_stages),
        posts_(2 * static_cast<size_t>(micro_batches) * virtual_stages) {}
  size_t index(bool gradient, int micro_batch, int sender) const {
    if (micro_batch < 0 || micro_batch >= m_ || sender < 0 || sender >= stages_)
      throw std::invalid_argument("dependency_bound_step: a transfer of micro-batch " +
                                  std::to_string(micro_batch) + " from virtual stage " +
                                  std::to_string(sender) + " is outside the schedule");
    return (static_cast<size_t>(gradient) * m_ + micro_batch) * stages_ + sender;
  }
  Posts& operator[](size_t index) { return posts_[index]; }

 private:
  int m_, stages_;
  std::vector<Posts> posts_;
};

}  // namespace

double dependency_bound_step(const PipelineSchedule& schedule, double forward, double backward,
                             double weight_fraction) {
  const int p = schedule.num_stages, m = schedule.num_micro_batches;
  const int v = std::max(schedule.virtual_stages, 1);
  const PipelineLayout layout = schedule.layout();
  const int last = layout.last_virtual_stage();
  PostTable messages(m, layout.num_virtual_stages());
  // Per rank and chunk, the last input gradient sent: its next backward
  // writes that buffer again, so waits until the peer has received it.
  std::vector<std::vector<int64_t>> last_gradient_sent(p, std::vector<int64_t>(v, -1));
  // Per rank and chunk, whether received gradients get a buffer per slot;
  // else a receive into the one buffer waits for that send too.
  std::vector<std::vector<bool>> per_slot;
  for (int r = 0; r < p; ++r) per_slot.push_back(output_gradient_per_slot(v, schedule.stages[r]));
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
  // Posts the end a Send or Recv stands for, when rank r's stream reaches
  // it; false where a receive must wait (woken when the peer posts it).
  // Loads, the reduction and the step take no time here.
  const auto post_transfer = [&](const PipelineInstruction& in, int r, int vs, int mb) {
    const std::optional<StreamMessage> message = message_of(layout, r, in);
    if (!message) return true;
    const bool gradient = !message->activation;
    if (message->is_send) {
      const size_t key = messages.index(gradient, mb, vs);
      messages[key].sent = free_at[r];
      if (gradient) last_gradient_sent[r][in.chunk] = static_cast<int64_t>(key);
      wake(layout.rank_of(message->to_virtual_stage));
      return true;
    }
    const int sender = message->from_virtual_stage;
    double posted = free_at[r];
    if (gradient && !per_slot[r][in.chunk] && last_gradient_sent[r][in.chunk] >= 0) {
      const Posts& out = messages[static_cast<size_t>(last_gradient_sent[r][in.chunk])];
      if (out.sent < 0 || out.received < 0) return false;
      posted = std::max({posted, out.sent, out.received});
    }
    messages[messages.index(gradient, mb, sender)].received = posted;
    wake(layout.rank_of(sender));
    return true;
  };
  while (!waking.empty()) {
    const int r = waking.back();
    waking.pop_back();
    awake[r] = 0;
    const InstructionStream& stream = schedule.stages[r];
    for (; next[r] < stream.size(); ++next[r]) {
      const PipelineInstruction& in = stream[next[r]];
      const int vs = layout.virtual_stage(r, in.chunk), mb = in.micro_batch;
      const double d = compute_seconds(in.op, forward, backward, weight_fraction, v);
      if (d < 0) {
        if (!post_transfer(in, r, vs, mb)) break;
        continue;
      }
      double ready = free_at[r];
      bool blocked = false;
      const auto needs = [&](size_t key) {
        const Posts& posts = messages[key];
        if (posts.sent < 0 || posts.received < 0) blocked = true;
        ready = std::max({ready, posts.sent, posts.received});
      };
      const bool input = in.op == OpCode::Backward || in.op == OpCode::BackwardInput;
      if (in.op == OpCode::Forward && vs > 0) needs(messages.index(false, mb, vs - 1));
      if (input && vs < last) needs(messages.index(true, mb, vs + 1));
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
