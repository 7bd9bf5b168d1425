// stream_play.cc: questions 2 and 3 of stream_check.h, all ranks' streams
// together: what each transfer instruction moves, every link's messages in
// posting order, and the streams played out under posted transfers.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "schema/plan_io.h"
#include "schema/stream_check.h"

namespace paraplan {

using schema::OpCode;

std::optional<StreamMessage> message_of(const PipelineLayout& layout, int rank,
                                        const StreamOp& op) {
  bool activation = true, is_send = true;
  switch (op.op) {
    case OpCode::SendActivation:
      break;
    case OpCode::RecvActivation:
      is_send = false;
      break;
    case OpCode::SendGradient:
      activation = false;
      break;
    case OpCode::RecvGradient:
      activation = false, is_send = false;
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
      return std::nullopt;
  }
  if (op.chunk < 0 || op.chunk >= layout.chunks()) return std::nullopt;
  const int stage = layout.virtual_stage(rank, op.chunk);
  // Activations go to the next virtual stage, gradients to the previous one.
  const bool towards_next = activation == is_send;
  const int other = towards_next ? stage + 1 : stage - 1;
  if (other < 0 || other > layout.last_virtual_stage()) return std::nullopt;
  StreamMessage message;
  message.activation = activation, message.is_send = is_send, message.micro_batch = op.micro_batch;
  message.from_virtual_stage = is_send ? stage : other;
  message.to_virtual_stage = is_send ? other : stage;
  message.local = layout.rank_of(other) == rank;
  return message;
}

std::vector<bool> output_gradient_per_slot(int num_chunks, const StreamOps& stream) {
  std::vector<bool> per_slot(num_chunks, false);
  for (size_t i = 0; i < stream.size(); ++i) {
    const StreamOp& op = stream[i];
    if (op.op != OpCode::RecvGradient || op.chunk < 0 || op.chunk >= num_chunks) continue;
    const bool at_consumer =
        i + 1 < stream.size() && stream[i + 1].chunk == op.chunk &&
        stream[i + 1].micro_batch == op.micro_batch &&
        (stream[i + 1].op == OpCode::Backward || stream[i + 1].op == OpCode::BackwardInput);
    if (!at_consumer) per_slot[op.chunk] = true;
  }
  return per_slot;
}

std::string stream_op_text(const StreamOp& op) {
  std::string text = schema::EnumNameOpCode(op.op);
  const bool step_level = op.op == OpCode::ReduceGradients || op.op == OpCode::OptimizerStep;
  if (step_level && op.micro_batch < 0) return text;
  text += '(' + std::to_string(op.micro_batch);
  if (op.chunk != 0) text += ", chunk " + std::to_string(op.chunk);
  return text + ')';
}

namespace {

// One message on a link, where its posting rank's stream has it.
struct Posted {
  StreamMessage message;
  int instruction = 0;
  OpCode op = OpCode::SendActivation;

  bool same_as(const Posted& other) const {
    return message.activation == other.message.activation &&
           message.from_virtual_stage == other.message.from_virtual_stage &&
           message.micro_batch == other.message.micro_batch;
  }
  std::string what() const {
    return std::string(message.activation ? "the activation" : "the gradient") +
           " of virtual stage " + std::to_string(message.from_virtual_stage) + ", micro-batch " +
           std::to_string(message.micro_batch);
  }
  std::string where(int rank) const {
    return "pipeline rank " + std::to_string(rank) + "'s instruction " +
           std::to_string(instruction) + " (" + opcode_name(op) + ")";
  }
};

// The ranks at the two ends of a message posted by `rank`: (sender, receiver).
std::pair<int, int> link_of(const PipelineLayout& layout, int rank, const StreamMessage& message) {
  const int peer =
      layout.rank_of(message.is_send ? message.to_virtual_stage : message.from_virtual_stage);
  return message.is_send ? std::make_pair(rank, peer) : std::make_pair(peer, rank);
}

}  // namespace

std::optional<std::string> check_link_order(const PipelineLayout& layout,
                                            const std::vector<StreamOps>& streams) {
  // Per ordered pair of ranks (from, to): what `from` sends and what `to`
  // receives, each in posting order. Local hand-offs are no message.
  std::map<std::pair<int, int>, std::vector<Posted>> sent, received;
  for (int rank = 0; rank < static_cast<int>(streams.size()); ++rank)
    for (int i = 0; i < static_cast<int>(streams[rank].size()); ++i) {
      const std::optional<StreamMessage> message = message_of(layout, rank, streams[rank][i]);
      if (!message || message->local) continue;
      (message->is_send ? sent : received)[link_of(layout, rank, *message)].push_back(
          {*message, i, streams[rank][i].op});
    }
  for (const auto& [link, messages] : received) sent[link];  // a link posted on one side only
  for (const auto& [link, sends] : sent) {
    const auto [from, to] = link;
    const std::vector<Posted>& receives = received[link];
    for (size_t k = 0; k < std::min(sends.size(), receives.size()); ++k)
      if (!sends[k].same_as(receives[k]))
        return sends[k].where(from) + " sends " + sends[k].what() + " as its message " +
               std::to_string(k + 1) + " to rank " + std::to_string(to) + ", but " +
               receives[k].where(to) + " receives " + receives[k].what() + " there";
    if (sends.size() != receives.size())
      return "pipeline rank " + std::to_string(from) + " sends " + std::to_string(sends.size()) +
             " message(s) to rank " + std::to_string(to) + ", which receives " +
             std::to_string(receives.size()) + " from it";
  }
  return std::nullopt;
}

namespace {

// A message's place on its link: the link, and its position there (the
// k-th message sent over it meets the k-th received: check_link_order).
struct LinkPlace {
  int link = -1;
  int64_t position = 0;
  bool is_send = false;  // the end this rank posts
};

// What each instruction of each rank posts or waits for, worked out once.
struct PlayPlan {
  // Per rank, per instruction: the place it posts (Send / Recv over a link).
  std::vector<std::vector<LinkPlace>> posts;
  // Per rank, per instruction: the places whose other end must have posted
  // (a compute op's input; a backward's chunk's last input-gradient send;
  // every send for ReduceGradients), and whether each is a send of its own.
  std::vector<std::vector<std::vector<std::pair<LinkPlace, bool>>>> waits;
  int links = 0;
};

PlayPlan plan_play(const PipelineLayout& layout, const std::vector<StreamOps>& streams) {
  const int p = static_cast<int>(streams.size());
  PlayPlan play;
  std::map<std::pair<int, int>, int> link_ids;
  std::vector<int64_t> sent, received;  // per link, posted so far by its two ends
  for (int rank = 0; rank < p; ++rank) {
    const StreamOps& stream = streams[rank];
    play.posts.emplace_back(stream.size());
    play.waits.emplace_back(stream.size());
    // This rank's receives by (activation, producer, micro-batch); per chunk
    // its last input-gradient send; all its sends.
    std::map<std::tuple<bool, int, int>, LinkPlace> receives;
    std::vector<LinkPlace> last_gradient_send(layout.chunks()), sends;
    const std::vector<bool> per_slot = output_gradient_per_slot(layout.chunks(), stream);
    for (size_t i = 0; i < stream.size(); ++i) {
      const StreamOp& op = stream[i];
      const std::optional<StreamMessage> message = message_of(layout, rank, op);
      // A gradient received into the chunk's one buffer waits for the input
      // gradient in it to have gone out.
      if (message && !message->activation && !message->is_send && !per_slot[op.chunk] &&
          last_gradient_send[op.chunk].link >= 0)
        play.waits[rank][i].push_back({last_gradient_send[op.chunk], true});
      if (message && !message->local) {
        const auto [id, inserted] = link_ids.emplace(link_of(layout, rank, *message), play.links);
        if (inserted) ++play.links, sent.push_back(0), received.push_back(0);
        LinkPlace place{id->second, message->is_send ? sent[id->second]++ : received[id->second]++,
                        message->is_send};
        play.posts[rank][i] = place;
        if (!message->is_send) {
          receives[{message->activation, message->from_virtual_stage, message->micro_batch}] =
              place;
        } else {
          sends.push_back(place);
          if (!message->activation) last_gradient_send[op.chunk] = place;
        }
        continue;
      }
      auto& waits = play.waits[rank][i];
      const bool forward = op.op == OpCode::Forward;
      const bool backward = op.op == OpCode::Backward || op.op == OpCode::BackwardInput;
      if ((forward || backward) && op.chunk >= 0 && op.chunk < layout.chunks()) {
        const int stage = layout.virtual_stage(rank, op.chunk);
        const auto input =
            receives.find({forward, forward ? stage - 1 : stage + 1, op.micro_batch});
        if (input != receives.end()) waits.push_back({input->second, false});
        if (backward && last_gradient_send[op.chunk].link >= 0)
          waits.push_back({last_gradient_send[op.chunk], true});
      }
      if (op.op == OpCode::ReduceGradients)
        for (const LinkPlace& send : sends) waits.push_back({send, true});
    }
  }
  return play;
}

}  // namespace

std::optional<StreamStall> find_stream_stall(const PipelineLayout& layout,
                                             const std::vector<StreamOps>& streams) {
  const PlayPlan play = plan_play(layout, streams);
  const int p = static_cast<int>(streams.size());
  std::vector<int64_t> sent(play.links, 0), received(play.links, 0);
  StreamStall stall{std::vector<size_t>(p, 0)};
  // A wait is over once the other end has posted its half.
  const auto ready = [&](const std::vector<std::pair<LinkPlace, bool>>& waits) {
    for (const auto& [place, own_send] : waits)
      if ((own_send ? received : sent)[place.link] <= place.position) return false;
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int rank = 0; rank < p; ++rank) {
      size_t& at = stall.stopped_at[rank];
      while (at < streams[rank].size() && ready(play.waits[rank][at])) {
        const LinkPlace& posts = play.posts[rank][at];
        if (posts.link >= 0) ++(posts.is_send ? sent : received)[posts.link];
        ++at, progress = true;
      }
    }
  }
  for (int rank = 0; rank < p; ++rank)
    if (stall.stopped_at[rank] < streams[rank].size()) return stall;
  return std::nullopt;
}

std::vector<std::string> stall_lines(const StreamStall& stall,
                                     const std::vector<StreamOps>& streams) {
  std::vector<std::string> lines;
  for (size_t rank = 0; rank < stall.stopped_at.size(); ++rank) {
    const size_t at = stall.stopped_at[rank];
    lines.push_back(at == streams[rank].size()
                        ? "stage " + std::to_string(rank) + ": finished"
                        : "stage " + std::to_string(rank) + " instruction " + std::to_string(at) +
                              " " + stream_op_text(streams[rank][at]) + " (blocked)");
  }
  return lines;
}

std::optional<std::string> check_streams_finish(const PipelineLayout& layout,
                                                const std::vector<StreamOps>& streams) {
  const std::optional<StreamStall> stall = find_stream_stall(layout, streams);
  if (!stall) return std::nullopt;
  std::string text = "deadlock:";
  for (const std::string& line : stall_lines(*stall, streams)) text += "\n  " + line;
  return text;
}

}  // namespace paraplan
