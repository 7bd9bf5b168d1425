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
#include "schema/stream_check.h"

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

// What a transfer record moves (schema/stream_check.h); nullopt for any
// other op, or a record outside the layout.
std::optional<StreamMessage> record_message(const PipelineLayout& layout, int stage,
                                            const TransferRecord& record) {
  if (record.chunk < 0 || record.chunk >= layout.chunks()) return std::nullopt;
  return message_of(layout, stage,
                    {static_cast<schema::OpCode>(record.op), record.micro_batch, record.chunk});
}

}  // namespace

std::vector<TransferAndWait> split_pipeline_transfers(
    const std::vector<std::vector<TransferRecord>>& ranks, int pipeline_parallel, int data_parallel,
    int tensor_parallel, int virtual_stages, bool v_shape) {
  const int stage_ranks = data_parallel * tensor_parallel;
  const PipelineLayout layout(pipeline_parallel, virtual_stages, v_shape);
  // Per rank: (step, activation, producer, micro-batch, sending end) -> the
  // work of the instruction carrying that end: the same message's two ends
  // differ only in the last.
  using Key = std::tuple<int, bool, int, int, bool>;
  const auto key = [](const TransferRecord& record, const StreamMessage& message, bool sending) {
    return Key{record.step, message.activation, message.from_virtual_stage, message.micro_batch,
               sending};
  };
  std::vector<std::map<Key, double>> carriers(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r)
    for (const TransferRecord& record : ranks[r])
      if (const auto message = record_message(layout, static_cast<int>(r) / stage_ranks, record))
        carriers[r][key(record, *message, message->is_send)] = record.work;

  std::vector<TransferAndWait> split(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int stage = static_cast<int>(r) / stage_ranks;
    for (const TransferRecord& record : ranks[r]) {
      double transfer = record.work;
      if (const auto message = record_message(layout, stage, record)) {
        // The rank holding the other end: the same replica of the peer stage.
        const int peer_stage = layout.rank_of(message->is_send ? message->to_virtual_stage
                                                               : message->from_virtual_stage);
        const size_t peer = r + static_cast<size_t>((peer_stage - stage) * stage_ranks);
        if (peer < ranks.size()) {
          const auto found = carriers[peer].find(key(record, *message, !message->is_send));
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
