// watched_communicator.h: wraps every communicator and the pipeline peers of a
// rank so that each blocking call is registered with the Watchdog
// (watchdog.h): a collective or transfer that does not complete within the
// collective timeout ends the job with a message naming the rank, the group,
// the operation and its size ("all_reduce of 3072 floats", "... of 3072
// bf16 elements"), instead of hanging.
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
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  void all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void reduce_scatter(const void* send, void* receive, size_t chunk_count,
                      kernels::DType dtype) override;
  void all_gather(const void* send, void* receive, size_t chunk_count,
                  kernels::DType dtype) override;
  void broadcast(void* data, size_t count, kernels::DType dtype, int root) override;
  void barrier() override;
  void start_all_reduce(void* data, size_t count, kernels::DType dtype) override;
  void start_reduce_scatter(const void* send, void* receive, size_t chunk_count,
                            kernels::DType dtype) override;
  void start_all_gather(const void* send, void* receive, size_t chunk_count,
                        kernels::DType dtype) override;
  void wait_pending() override;

 private:
  std::unique_ptr<Communicator> inner_;
  std::string where_;  // " on group 'data' (rank 1 of 2)", for the watchdog's message
};

class WatchedPeerToPeer final : public PeerToPeer {
 public:
  WatchedPeerToPeer(std::unique_ptr<PeerToPeer> inner, int world_rank);
  void send_receive(const void* send, size_t send_count, int send_to, void* receive,
                    size_t receive_count, int receive_from, kernels::DType dtype) override;

 private:
  std::unique_ptr<PeerToPeer> inner_;
  std::string where_;  // " on world rank 3"
};

// Wraps every group of `groups` and its peers.
void watch_process_groups(ProcessGroups& groups);

}  // namespace paraplan
