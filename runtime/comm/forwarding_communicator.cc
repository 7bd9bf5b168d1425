// forwarding_communicator.cc: each operation described once and forwarded.
#include "runtime/comm/forwarding_communicator.h"

namespace paraplan {

ForwardingCommunicator::ForwardingCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)) {}

void ForwardingCommunicator::all_reduce(void* data, size_t count, kernels::DType dtype,
                                        ReduceOp op) {
  intercept({"all_reduce", count, elements_unit(dtype)},
            [&] { inner_->all_reduce(data, count, dtype, op); });
}
void ForwardingCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  intercept({"all_reduce", count, "doubles"}, [&] { inner_->all_reduce(data, count, op); });
}
void ForwardingCommunicator::reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                            kernels::DType dtype) {
  intercept({"reduce_scatter", chunk_count, elements_per_rank_unit(dtype)},
            [&] { inner_->reduce_scatter(send, receive, chunk_count, dtype); });
}
void ForwardingCommunicator::all_gather(const void* send, void* receive, size_t chunk_count,
                                        kernels::DType dtype) {
  intercept({"all_gather", chunk_count, elements_per_rank_unit(dtype)},
            [&] { inner_->all_gather(send, receive, chunk_count, dtype); });
}
void ForwardingCommunicator::broadcast(void* data, size_t count, kernels::DType dtype, int root) {
  intercept({"broadcast", count, elements_unit(dtype)},
            [&] { inner_->broadcast(data, count, dtype, root); });
}
void ForwardingCommunicator::barrier() {
  intercept({"barrier", 0, ""}, [&] { inner_->barrier(); });
}
void ForwardingCommunicator::start_all_reduce(void* data, size_t count, kernels::DType dtype) {
  intercept({"all_reduce (gradient bucket)", count, elements_unit(dtype)},
            [&] { inner_->start_all_reduce(data, count, dtype); });
}
void ForwardingCommunicator::start_reduce_scatter(const void* send, void* receive,
                                                  size_t chunk_count, kernels::DType dtype) {
  intercept({"reduce_scatter (gradient bucket)", chunk_count, elements_per_rank_unit(dtype)},
            [&] { inner_->start_reduce_scatter(send, receive, chunk_count, dtype); });
}
void ForwardingCommunicator::start_all_gather(const void* send, void* receive, size_t chunk_count,
                                              kernels::DType dtype) {
  intercept({"all_gather (parameters)", chunk_count, elements_per_rank_unit(dtype)},
            [&] { inner_->start_all_gather(send, receive, chunk_count, dtype); });
}
void ForwardingCommunicator::wait_pending() {
  intercept({"wait for pending operations", 0, ""}, [&] { inner_->wait_pending(); });
}
void ForwardingCommunicator::wait_started_before(uint64_t mark) {
  intercept({"wait for pending operations", 0, ""}, [&] { inner_->wait_started_before(mark); });
}

void ForwardingPeerToPeer::send_receive(const void* send, size_t send_count, int send_to,
                                        void* receive, size_t receive_count, int receive_from,
                                        kernels::DType dtype, int tag) {
  const char* operation = send_to >= 0 && receive_from >= 0 ? "pipeline send and receive"
                          : send_to >= 0                    ? "pipeline send"
                                                            : "pipeline receive";
  const size_t count = (send_to >= 0 ? send_count : 0) + (receive_from >= 0 ? receive_count : 0);
  intercept({operation, count, elements_unit(dtype), send_to, receive_from}, [&] {
    inner_->send_receive(send, send_count, send_to, receive, receive_count, receive_from, dtype,
                         tag);
  });
}

PeerToPeer::Posted ForwardingPeerToPeer::post_send(const void* data, size_t count, int to,
                                                   kernels::DType dtype, int tag) {
  Posted id = 0;
  const TransferCall call{"pipeline send (posted)", count, elements_unit(dtype), to, -1};
  intercept(call, [&] { id = inner_->post_send(data, count, to, dtype, tag); });
  posted_.emplace_back(id,
                       TransferCall{"pipeline wait for a posted send", count, call.unit, to, -1});
  return id;
}

PeerToPeer::Posted ForwardingPeerToPeer::post_receive(void* data, size_t count, int from,
                                                      kernels::DType dtype, int tag,
                                                      void* buffer_free, Posted after_send) {
  Posted id = 0;
  TransferCall call{"pipeline receive (posted)", count, elements_unit(dtype), -1, from};
  // It may wait for that send first (MPI finishes it): a stall there is the send's.
  if (after_send != 0)
    for (const auto& [posted, waits_for] : posted_)
      if (posted == after_send) call = waits_for;
  intercept(call, [&] {
    id = inner_->post_receive(data, count, from, dtype, tag, buffer_free, after_send);
  });
  posted_.emplace_back(id, TransferCall{"pipeline wait for a posted receive", count,
                                        elements_unit(dtype), -1, from});
  return id;
}

void ForwardingPeerToPeer::wait(Posted transfer) {
  TransferCall call{"pipeline wait for a posted transfer", 0, "", -1, -1};
  for (auto it = posted_.begin(); it != posted_.end(); ++it)
    if (it->first == transfer) {
      call = it->second;
      posted_.erase(it);
      break;
    }
  intercept(call, [&] { inner_->wait(transfer); });
}

}  // namespace paraplan
