// call_recorder.cc: replay's recording communicator (call_recorder.h).
#include "runtime/measure/call_recorder.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/measure/span_clock.h"

namespace paraplan {

void RecordingCommunicator::intercept(const CommunicatorCall& call, ForwardedCall forward) {
  kernels::Ops* device = *totals_.recording ? totals_.device : nullptr;
  if (device) device->synchronize();
  SpanClock span;
  forward();
  if (device) device->synchronize();
  span.stop();
  *totals_.cpu_seconds += span.cpu();
  const double seconds = span.wall();
  *totals_.seconds += seconds;
  if (!*totals_.recording) return;
  durations_.push_back(seconds);
  // A CPU rank copies and reduces on its core: its work in the call is the
  // CPU time it got; a device's is the whole synchronized call.
  work_.push_back(totals_.device ? seconds : span.work());
  // Collecting deferred operations does not wait for the group's other
  // members to arrive: none of it is waiting for a peer by this rule.
  synchronizing_.push_back(std::strcmp(call.operation, "wait for pending operations") != 0);
}

TransferAndWait RecordingCommunicator::split_recorded_calls() {
  Communicator& group = inner();
  double counts[2] = {static_cast<double>(durations_.size()),
                      -static_cast<double>(durations_.size())};
  group.all_reduce(counts, 2, ReduceOp::kMax);
  if (counts[0] != -counts[1])
    throw std::runtime_error("replay: the members of group '" + name() +
                             "' made different numbers of calls (" +
                             std::to_string(static_cast<long long>(-counts[1])) + " to " +
                             std::to_string(static_cast<long long>(counts[0])) +
                             "); waits cannot be told from transfers");
  // The least work any member did in each call (the last to arrive waited
  // for nobody), as the maximum of the negated values.
  std::vector<double> shortest(work_.size());
  for (size_t i = 0; i < work_.size(); ++i) shortest[i] = -work_[i];
  if (!shortest.empty()) group.all_reduce(shortest.data(), shortest.size(), ReduceOp::kMax);
  for (double& value : shortest) value = -value;
  return split_collective_calls(durations_, shortest, synchronizing_);
}

RecordingCommunicator* record_communicator(std::unique_ptr<Communicator>& group,
                                           RecordingCommunicator::Totals totals) {
  if (!group) return nullptr;
  auto recorder = std::make_unique<RecordingCommunicator>(std::move(group), totals);
  RecordingCommunicator* pointer = recorder.get();
  group = std::move(recorder);
  return pointer;
}

}  // namespace paraplan
