// timed_communicator.h: a Communicator that forwards to another and adds the
// wall time of every call to a counter, so replay can split an instruction's
// time into compute and the collectives inside it (the tensor-parallel
// all-reduces of a forward, the ZeRO-1 all-gather of an optimizer step).
// Deferred calls count the host time they block (all of it for MPI, the launch
// for NCCL) and the wait.
#pragma once

#include <memory>

#include "runtime/comm/forwarding_communicator.h"

namespace paraplan {

class TimedCommunicator final : public ForwardingCommunicator {
 public:
  // Adds seconds spent in each call to *seconds (which must outlive this).
  TimedCommunicator(std::unique_ptr<Communicator> inner, double* seconds)
      : ForwardingCommunicator(std::move(inner)), seconds_(seconds) {}

 protected:
  void intercept(const CommunicatorCall& call, ForwardedCall forward) override;

 private:
  double* seconds_;
};

// Replaces `group` (when not null) by a TimedCommunicator around it.
void time_communicator(std::unique_ptr<Communicator>& group, double* seconds);

}  // namespace paraplan
