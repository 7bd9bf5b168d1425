// call_recorder.h: replay's view of one process group: a Communicator that
// forwards every call, adds its wall time and the process's CPU time in it to
// running totals (so an instruction's collectives can be taken out of its
// compute) and, while recording, keeps each call's duration and work, so that
// after the run the group can split them into transfer and waiting for peers
// (wait_attribution.h). A CPU rank's work in a call is the CPU time it got
// (shared-memory MPI copies and reduces on the caller's core; a rank that
// another has taken the core from, or that sleeps between polls, is waiting). On a device, NCCL
// returns once a call is queued, so while recording the device is synchronized before the call (the
// compute queued before it is not its time) and after it (its transfer is).
#pragma once

#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/forwarding_communicator.h"
#include "runtime/measure/wait_attribution.h"

namespace paraplan {

class RecordingCommunicator final : public ForwardingCommunicator {
 public:
  // The running totals it adds to, and whether calls are kept now (the
  // measured steps). All must outlive this.
  struct Totals {
    double* seconds;
    double* cpu_seconds;
    const bool* recording;
    // The device's ops, synchronized around each recorded call; null on the
    // CPU backend (calls return when they are done).
    kernels::Ops* device = nullptr;
  };
  RecordingCommunicator(std::unique_ptr<Communicator> inner, Totals totals)
      : ForwardingCommunicator(std::move(inner)), totals_(totals) {}

  // Collective over the group: its members' recorded calls matched one to one,
  // this member's total transfer and wait. Throws if the members recorded
  // different numbers of calls (they must make the same calls).
  TransferAndWait split_recorded_calls();
  size_t recorded_calls() const { return durations_.size(); }

 protected:
  void intercept(const CommunicatorCall& call, ForwardedCall forward) override;

 private:
  Totals totals_;
  std::vector<double> durations_;
  std::vector<double> work_;  // per call: CPU time on the CPU backend, else the duration
  std::vector<bool> synchronizing_;
};

// Replaces `group` (when not null) by a RecordingCommunicator around it and
// returns it (null for a null group).
RecordingCommunicator* record_communicator(std::unique_ptr<Communicator>& group,
                                           RecordingCommunicator::Totals totals);

}  // namespace paraplan
