// watched_communicator.h: wraps every communicator and the pipeline peers of a
// rank so that each blocking call is registered with the Watchdog
// (watchdog.h): a collective or transfer that does not complete within the
// collective timeout ends the job with a message naming the rank, the group,
// the operation and its size, instead of hanging.
//
// Work a device communicator queues without blocking (NCCL on a stream) is
// registered by that communicator itself, with an event probe; the host call
// around it returns at once and is harmless to watch.
#pragma once

#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace paraplan {

class WatchedCommunicator final : public Communicator {
 public:
  explicit WatchedCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  void all_reduce(float* data, size_t count, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void reduce_scatter(const float* send, float* receive, size_t chunk_count) override;
  void all_gather(const float* send, float* receive, size_t chunk_count) override;
  void broadcast(float* data, size_t count, int root) override;
  void barrier() override;
  void start_all_reduce(float* data, size_t count) override;
  void start_reduce_scatter(const float* send, float* receive, size_t chunk_count) override;
  void start_all_gather(const float* send, float* receive, size_t chunk_count) override;
  void wait_pending() override;

 private:
  std::unique_ptr<Communicator> inner_;
  std::string where_;  // " on group 'data' (rank 1 of 2)", for the watchdog's message
};

class WatchedPeerToPeer final : public PeerToPeer {
 public:
  WatchedPeerToPeer(std::unique_ptr<PeerToPeer> inner, int world_rank);
  void send_receive(const float* send, size_t send_count, int send_to, float* receive,
                    size_t receive_count, int receive_from) override;

 private:
  std::unique_ptr<PeerToPeer> inner_;
  std::string where_;  // " on world rank 3"
};

// Wraps every group of `groups` and its peers.
void watch_process_groups(ProcessGroups& groups);

}  // namespace paraplan
