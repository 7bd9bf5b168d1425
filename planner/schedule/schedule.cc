// schedule.cc: 1F1B and GPipe instruction streams, the dispatch over schedule
// kinds, and instruction text. (Interleaved, ZB-H1, ZB-V, DualPipe-V:
// schedule_placement.cc;
// the verifier: schedule_verify.cc.)
#include "planner/schedule/schedule.h"

#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "schema/plan_io.h"

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

std::shared_ptr<const PipelineSchedule> shared_schedule(schema::ScheduleKind kind, int num_stages,
                                                        int num_micro_batches, int virtual_stages) {
  using Key = std::tuple<schema::ScheduleKind, int, int, int>;
  using Shared = std::shared_future<std::shared_ptr<const PipelineSchedule>>;
  static std::mutex mutex;
  static std::deque<std::pair<Key, Shared>> kept;  // oldest first
  const Key key{kind, num_stages, num_micro_batches, virtual_stages};
  // Set only by the thread that makes the shape (a promise allocates).
  std::optional<std::promise<std::shared_ptr<const PipelineSchedule>>> made;
  Shared schedule;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [shape, kept_schedule] : kept)
      if (shape == key) schedule = kept_schedule;
    // Made outside the lock, once: the search's threads ask for the same
    // shapes at about the same time, and the later ones wait for the first.
    if (!schedule.valid()) {
      schedule = made.emplace().get_future().share();
      kept.emplace_back(key, schedule);
      if (kept.size() > static_cast<size_t>(kSharedSchedules)) kept.pop_front();
    }
  }
  if (made) {
    try {
      made->set_value(std::make_shared<const PipelineSchedule>(
          generate_schedule(kind, num_stages, num_micro_batches, virtual_stages)));
    } catch (...) {
      made->set_exception(std::current_exception());  // the same shape fails the same way
    }
  }
  return schedule.get();
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
  if (instruction.chunk != 0) text += ", chunk " + std::to_string(instruction.chunk);
  text += ')';
  return text;
}

}  // namespace paraplan
