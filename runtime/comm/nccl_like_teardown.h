// nccl_like_teardown.h: NCCL's teardown on the CPU, for the failure tests.
// ncclCommDestroy and the stream synchronization before it wait for this
// rank's queued transfers, which wait for peers; when the rank failed with
// its peers waiting for transfers it will never post, neither returns. A
// rank must therefore end the job before its communicators are destroyed
// (runtime/train/trainer.cc), never by unwinding through them.
//
// With PARAPLAN_TEST_NCCL_TEARDOWN=1 the trainer wraps every process group in
// this stand-in: destroyed while an exception unwinds (the rank failed), it blocks
// for good, as NCCL would. A run that ends normally destroys it at once.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <thread>

#include "runtime/comm/forwarding_communicator.h"

namespace paraplan {

class NcclLikeTeardownCommunicator final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  ~NcclLikeTeardownCommunicator() override {
    while (std::uncaught_exceptions() > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
};

}  // namespace paraplan
