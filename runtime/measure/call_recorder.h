// call_recorder.h: replay's view of one process group: a Communicator that
// forwards every call, adds its wall time to a running total (so an
// instruction's collectives can be taken out of its compute) and, while
// recording, keeps each call's duration, so that after the run the group can
// split them into transfer and waiting for peers (wait_attribution.h).
#pragma once

#include <memory>
#include <vector>

#include "runtime/comm/forwarding_communicator.h"
#include "runtime/measure/wait_attribution.h"

namespace paraplan {

class RecordingCommunicator final : public ForwardingCommunicator {
 public:
  // seconds: the running total it adds to; recording: whether calls are kept
  // now (the measured steps). Both must outlive this.
  RecordingCommunicator(std::unique_ptr<Communicator> inner, double* seconds, const bool* recording)
      : ForwardingCommunicator(std::move(inner)), seconds_(seconds), recording_(recording) {}

  // Collective over the group: its members' recorded calls matched one to one,
  // this member's total transfer and wait. Throws if the members recorded
  // different numbers of calls (they must make the same calls).
  TransferAndWait split_recorded_calls();

 protected:
  void intercept(const CommunicatorCall& call, ForwardedCall forward) override;

 private:
  double* seconds_;
  const bool* recording_;
  std::vector<double> durations_;
  std::vector<bool> synchronizing_;
};

// Replaces `group` (when not null) by a RecordingCommunicator around it and
// returns it (null for a null group).
RecordingCommunicator* record_communicator(std::unique_ptr<Communicator>& group, double* seconds,
                                           const bool* recording);

}  // namespace paraplan
