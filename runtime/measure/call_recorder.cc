// call_recorder.cc: replay's recording communicator (call_recorder.h).
#include "runtime/measure/call_recorder.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>

namespace paraplan {

void RecordingCommunicator::intercept(const CommunicatorCall& call, ForwardedCall forward) {
  kernels::Ops* device = *totals_.recording ? totals_.device : nullptr;
  if (device) device->synchronize();
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  forward();
  if (device) device->synchronize();
  // The CPU clock read inside the wall-clock span (replay.cc says why).
  const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  *totals_.cpu_seconds += cpu;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  *totals_.seconds += seconds;
  if (!*totals_.recording) return;
  durations_.push_back(seconds);
  // A CPU rank copies and reduces on its core: its work in the call is the
  // CPU time it got; a device's is the whole synchronized call.
  work_.push_back(totals_.device ? seconds : std::clamp(cpu, 0.0, seconds));
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
