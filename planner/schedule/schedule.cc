// schedule.cc: 1F1B's and GPipe's compute orders and their lowering at the
// consumers, the schedules shared between the search's threads, and
// instruction text. (Interleaved, ZB-H1, ZB-V, DualPipe-V:
// schedule_placement.cc;
// the verifier: schedule_verify.cc.)
#include "planner/schedule/schedule.h"

#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "schema/plan_io.h"

namespace paraplan {

using schema::OpCode;

namespace {

void check_sizes(int num_stages, int num_micro_batches) {
  if (num_stages < 1 || num_micro_batches < 1)
    throw std::invalid_argument("pipeline schedule: num_stages (" + std::to_string(num_stages) +
                                ") and num_micro_batches (" + std::to_string(num_micro_batches) +
                                ") must both be >= 1");
}

}  // namespace

PipelineSchedule lower_at_consumers(schema::ScheduleKind kind, int num_stages,
                                    int num_micro_batches,
                                    const std::vector<InstructionStream>& compute_orders) {
  check_sizes(num_stages, num_micro_batches);
  if (compute_orders.size() != static_cast<size_t>(num_stages))
    throw std::invalid_argument("lower_at_consumers: one compute order per rank needed");
  PipelineSchedule schedule{kind, num_stages, num_micro_batches, {}, 1};
  for (int rank = 0; rank < num_stages; ++rank) {
    const bool has_previous = rank > 0, has_next = rank < num_stages - 1;
    const bool loads_data = !has_previous || !has_next;
    InstructionStream stream;
    const auto add = [&stream](OpCode op, int micro_batch) {
      stream.push_back({op, micro_batch, 0});
    };
    for (const PipelineInstruction& compute : compute_orders[rank]) {
      const int mb = compute.micro_batch;
      switch (compute.op) {
        case OpCode::Forward:
          if (has_previous) add(OpCode::RecvActivation, mb);
          if (loads_data) add(OpCode::LoadMicroBatch, mb);
          add(OpCode::Forward, mb);
          if (has_next) add(OpCode::SendActivation, mb);
          break;
        case OpCode::Backward:
        case OpCode::BackwardInput:
          // The last stage's gradient comes from its own loss.
          if (has_next) add(OpCode::RecvGradient, mb);
          add(compute.op, mb);
          if (has_previous) add(OpCode::SendGradient, mb);
          break;
        case OpCode::BackwardWeight:
          add(compute.op, mb);
          break;
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
          throw std::invalid_argument(std::string("lower_at_consumers: ") +
                                      schema::EnumNameOpCode(compute.op) +
                                      " in a compute order (Forward, Backward, BackwardInput, "
                                      "BackwardWeight only)");
      }
    }
    add(OpCode::ReduceGradients, -1);
    add(OpCode::OptimizerStep, -1);
    schedule.stages.push_back(std::move(stream));
  }
  return schedule;
}

PipelineSchedule generate_one_forward_one_backward(int num_stages, int num_micro_batches) {
  check_sizes(num_stages, num_micro_batches);
  const int m = num_micro_batches;
  std::vector<InstructionStream> orders(num_stages);
  for (int rank = 0; rank < num_stages; ++rank) {
    InstructionStream& order = orders[rank];
    const int warmup = std::min(num_stages - rank - 1, m);
    for (int mb = 0; mb < warmup; ++mb) order.push_back({OpCode::Forward, mb});
    for (int i = 0; i < m - warmup; ++i) {
      order.push_back({OpCode::Forward, warmup + i});
      order.push_back({OpCode::Backward, i});
    }
    for (int mb = m - warmup; mb < m; ++mb) order.push_back({OpCode::Backward, mb});
  }
  return lower_at_consumers(schema::ScheduleKind::OneForwardOneBackward, num_stages, m, orders);
}

PipelineSchedule generate_gpipe(int num_stages, int num_micro_batches) {
  check_sizes(num_stages, num_micro_batches);
  InstructionStream order;
  for (int mb = 0; mb < num_micro_batches; ++mb) order.push_back({OpCode::Forward, mb});
  for (int mb = 0; mb < num_micro_batches; ++mb) order.push_back({OpCode::Backward, mb});
  return lower_at_consumers(schema::ScheduleKind::GPipe, num_stages, num_micro_batches,
                            std::vector<InstructionStream>(num_stages, order));
}

namespace {

size_t instruction_count(const PipelineSchedule& schedule) {
  size_t count = 0;
  for (const InstructionStream& stream : schedule.stages) count += stream.size();
  return count;
}

}  // namespace

std::shared_ptr<const PipelineSchedule> shared_schedule(schema::ScheduleKind kind, int num_stages,
                                                        int num_micro_batches, int virtual_stages) {
  using Key = std::tuple<schema::ScheduleKind, int, int, int>;
  using Shared = std::shared_future<std::shared_ptr<const PipelineSchedule>>;
  struct Kept {
    Key key;
    Shared schedule;
    size_t instructions = 0;  // 0 while it is being made
  };
  static std::mutex mutex;
  static std::list<Kept> kept;  // least recently asked for first
  static size_t kept_instructions = 0;
  const Key key{kind, num_stages, num_micro_batches, virtual_stages};
  // Set only by the thread that makes the shape (a promise allocates).
  std::optional<std::promise<std::shared_ptr<const PipelineSchedule>>> made;
  Shared schedule;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (auto it = kept.begin(); it != kept.end(); ++it)
      if (it->key == key) {
        schedule = it->schedule;
        kept.splice(kept.end(), kept, it);
        break;
      }
    // Made outside the lock, once: the search's threads ask for the same
    // shapes at about the same time, and the later ones wait for the first.
    if (!schedule.valid()) {
      schedule = made.emplace().get_future().share();
      kept.push_back({key, schedule});
    }
  }
  if (!made) return schedule.get();
  size_t instructions = 0;
  try {
    auto generated = std::make_shared<const PipelineSchedule>(
        generate_schedule(kind, num_stages, num_micro_batches, virtual_stages));
    instructions = std::max<size_t>(instruction_count(*generated), 1);
    made->set_value(std::move(generated));
  } catch (...) {
    made->set_exception(std::current_exception());  // the same shape fails the same way
    instructions = 1;
  }
  const std::lock_guard<std::mutex> lock(mutex);
  for (Kept& entry : kept)
    if (entry.key == key && entry.instructions == 0) {
      entry.instructions = instructions;
      kept_instructions += instructions;
      break;
    }
  // Over the budget: the least recent shapes go, down to the one just made
  // (the shapes still being made cost nothing yet and stay).
  for (auto it = kept.begin();
       kept_instructions > kSharedScheduleInstructions && it != kept.end() && it->key != key;) {
    if (it->instructions == 0) {
      ++it;
      continue;
    }
    kept_instructions -= it->instructions;
    it = kept.erase(it);
  }
  return schedule.get();
}

std::string format_instruction(const PipelineInstruction& instruction) {
  return stream_op_text(instruction);
}

}  // namespace paraplan
