// transfer_order.cc: the pairwise check of a plan's pipeline transfers
// (transfer_order.h).
#include "runtime/pipeline/transfer_order.h"

#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "schema/pipeline_layout.h"

namespace paraplan {

namespace {

using schema::OpCode;

struct Message {
  bool activation = true;  // else a gradient
  int from_virtual_stage = 0, micro_batch = 0;
  // Where the posting rank's stream has it, for the message.
  int instruction = 0;
  OpCode op = OpCode::SendActivation;

  bool same_as(const Message& other) const {
    return activation == other.activation && from_virtual_stage == other.from_virtual_stage &&
           micro_batch == other.micro_batch;
  }
  std::string what() const {
    return std::string(activation ? "the activation" : "the gradient") + " of virtual stage " +
           std::to_string(from_virtual_stage) + ", micro-batch " + std::to_string(micro_batch);
  }
  std::string where(int rank) const {
    return "pipeline rank " + std::to_string(rank) + "'s instruction " +
           std::to_string(instruction) + " (" + opcode_name(op) + ")";
  }
};

// Messages posted between each ordered pair of pipeline ranks (from, to):
// what `from` sends, and what `to` receives, each in posting order.
struct Links {
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;
};

// A link between two chunks of one rank (ZB-V's turn) is a local copy, no
// message: left out.
void post(Links& links, const PipelineLayout& layout, int rank, int index,
          const schema::Instruction& instruction) {
  const int stage = layout.virtual_stage(rank, instruction.chunk());
  const int last = layout.last_virtual_stage();
  const auto send = [&](bool activation, int micro_batch) {
    if (activation ? stage == last : stage == 0) return;  // the ends send nothing that way
    const int to = layout.rank_of(activation ? stage + 1 : stage - 1);
    if (to == rank) return;
    links.sent[{rank, to}].push_back({activation, stage, micro_batch, index, instruction.op()});
  };
  const auto receive = [&](bool activation, int micro_batch) {
    if (activation ? stage == 0 : stage == last) return;
    const int sender = activation ? stage - 1 : stage + 1, from = layout.rank_of(sender);
    if (from == rank) return;
    links.received[{from, rank}].push_back(
        {activation, sender, micro_batch, index, instruction.op()});
  };
  const int m = instruction.micro_batch();
  switch (instruction.op()) {
    case OpCode::SendActivation:
      send(true, m);
      break;
    case OpCode::RecvActivation:
      receive(true, m);
      break;
    case OpCode::SendGradient:
      send(false, m);
      break;
    case OpCode::RecvGradient:
      receive(false, m);
      break;
    case OpCode::LoadMicroBatch:
    case OpCode::Forward:
    case OpCode::Backward:
    case OpCode::ReduceGradients:
    case OpCode::OptimizerStep:
    case OpCode::BackwardInput:
    case OpCode::BackwardWeight:
      break;
  }
}

}  // namespace

void check_transfer_order(const schema::Schedule& schedule, const std::string& plan_name) {
  const int p = static_cast<int>(schedule.stages()->size());
  const PipelineLayout layout = PipelineLayout::of(schedule.kind(), p, schedule.virtual_stages());
  Links links;
  for (int rank = 0; rank < p; ++rank) {
    const auto* stream = schedule.stages()->Get(rank)->instructions();
    for (int i = 0; stream && i < static_cast<int>(stream->size()); ++i)
      post(links, layout, rank, i, *stream->Get(i));
  }
  const auto refuse = [&](const std::string& problem) {
    throw std::invalid_argument(plan_name + ": schedule: " + problem +
                                "; matched by posting order (NCCL) the transfers would swap "
                                "buffers. Was the plan edited by hand? Make it again with "
                                "`paraplan plan`");
  };
  // Every link on both sides (a link one side never posts on is empty there).
  for (const auto& [link, received] : links.received) links.sent[link];
  for (const auto& [link, sent] : links.sent) {
    const auto [from, to] = link;
    const std::vector<Message>& received = links.received[link];
    for (size_t k = 0; k < std::min(sent.size(), received.size()); ++k) {
      if (sent[k].same_as(received[k])) continue;
      refuse(sent[k].where(from) + " sends " + sent[k].what() + " as its message " +
             std::to_string(k + 1) + " to rank " + std::to_string(to) + ", but " +
             received[k].where(to) + " receives " + received[k].what() + " there");
    }
    if (sent.size() != received.size())
      refuse("pipeline rank " + std::to_string(from) + " sends " + std::to_string(sent.size()) +
             " message(s) to rank " + std::to_string(to) + ", which receives " +
             std::to_string(received.size()) + " from it");
  }
}

}  // namespace paraplan
