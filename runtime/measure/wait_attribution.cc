// wait_attribution.cc: waits and transfers of collectives and pipeline
// transfers (rule in wait_attribution.h).
#include "runtime/measure/wait_attribution.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "plan_generated.h"
#include "schema/pipeline_layout.h"

namespace paraplan {

TransferAndWait split_collective_calls(const std::vector<double>& durations,
                                       const std::vector<double>& group_least_work,
                                       const std::vector<bool>& synchronizing) {
  if (durations.size() != group_least_work.size() || durations.size() != synchronizing.size())
    throw std::logic_error("split_collective_calls: the lists differ in length");
  TransferAndWait split;
  for (size_t i = 0; i < durations.size(); ++i) {
    const double transfer =
        synchronizing[i] ? std::clamp(group_least_work[i], 0.0, durations[i]) : durations[i];
    split.transfer += transfer;
    split.wait += durations[i] - transfer;
  }
  return split;
}

namespace {

using schema::OpCode;

// What a transfer instruction moves: an activation or a gradient, sent or
// received, of one micro-batch.
enum class Message { kSendActivation, kReceiveActivation, kSendGradient, kReceiveGradient };

// What a transfer instruction carries; nullopt for any other op.
std::optional<Message> message_of(const TransferRecord& record) {
  switch (static_cast<OpCode>(record.op)) {
    case OpCode::SendActivation:
      return Message::kSendActivation;
    case OpCode::RecvActivation:
      return Message::kReceiveActivation;
    case OpCode::SendGradient:
      return Message::kSendGradient;
    case OpCode::RecvGradient:
      return Message::kReceiveGradient;
    case OpCode::LoadMicroBatch:
    case OpCode::Forward:
    case OpCode::Backward:
    case OpCode::ReduceGradients:
    case OpCode::OptimizerStep:
    case OpCode::BackwardInput:
    case OpCode::BackwardWeight:
      return std::nullopt;
  }
  return std::nullopt;  // a record of no op
}

// The other end of a message, and which neighbour holds it (+1 next stage).
std::pair<Message, int> other_end(Message message) {
  switch (message) {
    case Message::kSendActivation:
      return {Message::kReceiveActivation, +1};
    case Message::kReceiveActivation:
      return {Message::kSendActivation, -1};
    case Message::kSendGradient:
      return {Message::kReceiveGradient, -1};
    case Message::kReceiveGradient:
      return {Message::kSendGradient, +1};
  }
  return {message, 0};
}

}  // namespace

std::vector<TransferAndWait> split_pipeline_transfers(
    const std::vector<std::vector<TransferRecord>>& ranks, int pipeline_parallel, int data_parallel,
    int tensor_parallel, int virtual_stages, bool v_shape) {
  const int stage_ranks = data_parallel * tensor_parallel;
  const PipelineLayout layout(pipeline_parallel, virtual_stages, v_shape);
  const int virtual_count = layout.num_virtual_stages();
  // Per rank: (step, chunk, message, micro-batch) -> the work of the
  // instruction carrying it.
  using Key = std::tuple<int, int, Message, int>;
  std::vector<std::map<Key, double>> carriers(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r)
    for (const TransferRecord& record : ranks[r])
      if (const std::optional<Message> message = message_of(record))
        carriers[r][{record.step, record.chunk, *message, record.micro_batch}] = record.work;

  std::vector<TransferAndWait> split(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int stage = static_cast<int>(r) / stage_ranks;
    for (const TransferRecord& record : ranks[r]) {
      double transfer = record.work;
      if (const std::optional<Message> message = message_of(record)) {
        // The neighbour virtual stage holding the other end, and its rank.
        const auto [end, direction] = other_end(*message);
        const int peer_virtual = layout.virtual_stage(stage, record.chunk) + direction;
        const int peer_stage =
            peer_virtual >= 0 && peer_virtual < virtual_count ? layout.rank_of(peer_virtual) : -1;
        const size_t peer = r + static_cast<size_t>((peer_stage - stage) * stage_ranks);
        if (peer_stage >= 0 && peer < ranks.size()) {
          const auto found = carriers[peer].find(
              {record.step, layout.chunk_of(peer_virtual), end, record.micro_batch});
          if (found != carriers[peer].end()) transfer = std::min(transfer, found->second);
        }
      }
      transfer = std::clamp(transfer, 0.0, record.seconds);
      split[r].transfer += transfer;
      split[r].wait += record.seconds - transfer;
    }
  }
  return split;
}

}  // namespace paraplan
