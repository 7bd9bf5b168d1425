// watched_communicator.h: wraps a communicator or the pipeline peers so that
// each blocking call is registered with the Watchdog (watchdog.h): a collective
// or transfer that does not complete within the collective timeout ends the
// job with a message naming the rank, the group, the operation and its size
// ("all_reduce of 3072 floats", "... of 3072 bf16 elements"), instead of
// hanging. parallel/parallel_state.h wraps every group of a rank.
//
// Work a device communicator queues without blocking (NCCL on a stream) is
// registered by that communicator itself, with an event probe; the host call
// around it returns at once and is harmless to watch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/forwarding_communicator.h"

namespace paraplan {

class WatchedCommunicator final : public ForwardingCommunicator {
 public:
  // world_ranks: the members' world ranks in group rank order, registered
  // with the watchdog so that the launcher can name a member that has not
  // arrived in a collective (empty when unknown).
  explicit WatchedCommunicator(std::unique_ptr<Communicator> inner,
                               std::vector<int> world_ranks = {});

 protected:
  void intercept(const CommunicatorCall& call, ForwardedCall forward) override;

 private:
  std::string where_;        // " on group 'data' (rank 1 of 2)", for the watchdog's message
  int group_id_ = -1;        // the watchdog's
  uint64_t operations_ = 0;  // entered on this group so far
};

class WatchedPeerToPeer final : public ForwardingPeerToPeer {
 public:
  WatchedPeerToPeer(std::unique_ptr<PeerToPeer> inner, int world_rank);

 protected:
  void intercept(const TransferCall& call, ForwardedCall forward) override;

 private:
  std::string where_;  // " on world rank 3"
};

}  // namespace paraplan
