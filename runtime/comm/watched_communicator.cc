// watched_communicator.cc: Watchdog registration around communicator calls.
#include "runtime/comm/watched_communicator.h"

#include "runtime/comm/watchdog.h"

namespace paraplan {

WatchedCommunicator::WatchedCommunicator(std::unique_ptr<Communicator> inner,
                                         std::vector<int> world_ranks)
    : ForwardingCommunicator(std::move(inner)),
      where_(" on group '" + name() + "' (rank " + std::to_string(rank()) + " of " +
             std::to_string(size()) + ")"),
      group_id_(Watchdog::instance().register_group(name(), std::move(world_ranks))) {}

void WatchedCommunicator::intercept(const CommunicatorCall& call, ForwardedCall forward) {
  Watchdog::Guard guard(
      {call.operation, call.count, call.unit, &where_, -1, -1, group_id_, ++operations_});
  forward();
}

WatchedPeerToPeer::WatchedPeerToPeer(std::unique_ptr<PeerToPeer> inner, int world_rank)
    : ForwardingPeerToPeer(std::move(inner)),
      where_(" on world rank " + std::to_string(world_rank)) {}

void WatchedPeerToPeer::intercept(const TransferCall& call, ForwardedCall forward) {
  Watchdog::Guard guard(
      {call.operation, call.count, call.unit, &where_, call.send_to, call.receive_from});
  forward();
}

}  // namespace paraplan
