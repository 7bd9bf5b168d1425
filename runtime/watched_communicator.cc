// watched_communicator.cc: Watchdog registration around communicator calls.
#include "runtime/watched_communicator.h"

#include "runtime/watchdog.h"

namespace paraplan {

WatchedCommunicator::WatchedCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)),
      where_(" on group '" + inner_->name() + "' (rank " + std::to_string(inner_->rank()) + " of " +
             std::to_string(inner_->size()) + ")") {}

void WatchedCommunicator::all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) {
  Watchdog::Guard guard({"all_reduce", count, elements_unit(dtype), &where_});
  inner_->all_reduce(data, count, dtype, op);
}
void WatchedCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  Watchdog::Guard guard({"all_reduce", count, "doubles", &where_});
  inner_->all_reduce(data, count, op);
}
void WatchedCommunicator::reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                         kernels::DType dtype) {
  Watchdog::Guard guard({"reduce_scatter", chunk_count, elements_per_rank_unit(dtype), &where_});
  inner_->reduce_scatter(send, receive, chunk_count, dtype);
}
void WatchedCommunicator::all_gather(const void* send, void* receive, size_t chunk_count,
                                     kernels::DType dtype) {
  Watchdog::Guard guard({"all_gather", chunk_count, elements_per_rank_unit(dtype), &where_});
  inner_->all_gather(send, receive, chunk_count, dtype);
}
void WatchedCommunicator::broadcast(void* data, size_t count, kernels::DType dtype, int root) {
  Watchdog::Guard guard({"broadcast", count, elements_unit(dtype), &where_});
  inner_->broadcast(data, count, dtype, root);
}
void WatchedCommunicator::barrier() {
  Watchdog::Guard guard({"barrier", 0, "", &where_});
  inner_->barrier();
}
void WatchedCommunicator::start_all_reduce(void* data, size_t count, kernels::DType dtype) {
  Watchdog::Guard guard({"all_reduce (gradient bucket)", count, elements_unit(dtype), &where_});
  inner_->start_all_reduce(data, count, dtype);
}
void WatchedCommunicator::start_reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                               kernels::DType dtype) {
  Watchdog::Guard guard(
      {"reduce_scatter (gradient bucket)", chunk_count, elements_per_rank_unit(dtype), &where_});
  inner_->start_reduce_scatter(send, receive, chunk_count, dtype);
}
void WatchedCommunicator::start_all_gather(const void* send, void* receive, size_t chunk_count,
                                           kernels::DType dtype) {
  Watchdog::Guard guard(
      {"all_gather (parameters)", chunk_count, elements_per_rank_unit(dtype), &where_});
  inner_->start_all_gather(send, receive, chunk_count, dtype);
}
void WatchedCommunicator::wait_pending() {
  Watchdog::Guard guard({"wait for pending operations", 0, "", &where_});
  inner_->wait_pending();
}

WatchedPeerToPeer::WatchedPeerToPeer(std::unique_ptr<PeerToPeer> inner, int world_rank)
    : inner_(std::move(inner)), where_(" on world rank " + std::to_string(world_rank)) {}

void WatchedPeerToPeer::send_receive(const void* send, size_t send_count, int send_to,
                                     void* receive, size_t receive_count, int receive_from,
                                     kernels::DType dtype) {
  const char* operation = send_to >= 0 && receive_from >= 0 ? "pipeline send and receive"
                          : send_to >= 0                    ? "pipeline send"
                                                            : "pipeline receive";
  Watchdog::Guard guard({operation,
                         (send_to >= 0 ? send_count : 0) + (receive_from >= 0 ? receive_count : 0),
                         elements_unit(dtype), &where_, send_to, receive_from});
  inner_->send_receive(send, send_count, send_to, receive, receive_count, receive_from, dtype);
}

void watch_process_groups(ProcessGroups& groups) {
  for (std::unique_ptr<Communicator>* group :
       {&groups.world, &groups.tensor, &groups.data, &groups.zero, &groups.zero_replicas,
        &groups.embedding})
    if (*group) *group = std::make_unique<WatchedCommunicator>(std::move(*group));
  if (groups.peers)
    groups.peers = std::make_unique<WatchedPeerToPeer>(std::move(groups.peers), groups.world_rank);
}

}  // namespace paraplan
