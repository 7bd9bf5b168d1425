// timed_communicator.cc: wall-time accounting around a Communicator.
#include "runtime/comm/timed_communicator.h"

#include <chrono>

namespace paraplan {

void TimedCommunicator::intercept(const CommunicatorCall&, ForwardedCall forward) {
  const auto start = std::chrono::steady_clock::now();
  forward();
  *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void time_communicator(std::unique_ptr<Communicator>& group, double* seconds) {
  if (group) group = std::make_unique<TimedCommunicator>(std::move(group), seconds);
}

}  // namespace paraplan
