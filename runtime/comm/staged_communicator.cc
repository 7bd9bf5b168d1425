// staged_communicator.cc: StagedCommunicator and StagedPeerToPeer (device ->
// host staging -> host communicator -> device), and the staging memory.
#include "runtime/comm/staged_communicator.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace paraplan {

namespace {

std::shared_ptr<HostStaging> own_staging_unless_shared(std::shared_ptr<HostStaging> staging,
                                                       kernels::Ops& ops) {
  return staging ? std::move(staging) : std::make_shared<HostStaging>(ops);
}

// count elements of element_bytes each as bytes, refusing a count whose size
// overflows.
size_t bytes_of(size_t count, size_t element_bytes, const char* what) {
  if (count > SIZE_MAX / element_bytes)
    throw std::length_error(std::string(what) + ": " + std::to_string(count) +
                            " elements do not fit in memory");
  return count * element_bytes;
}

}  // namespace

// ---------------------------------------------------------------- HostStaging

HostStaging::~HostStaging() {
  if (memory_ != nullptr) ops_.deallocate_host(memory_);
}

char* HostStaging::reserve(size_t bytes) {
  if (bytes <= capacity_bytes_ && memory_ != nullptr) return memory_;
  // Nothing is kept: the old contents were a finished call's.
  if (memory_ != nullptr) ops_.deallocate_host(memory_);
  memory_ = nullptr;
  capacity_bytes_ = 0;
  memory_ = static_cast<char*>(ops_.allocate_host(bytes));
  capacity_bytes_ = bytes;
  return memory_;
}

// ---------------------------------------------------------------- StagedCommunicator

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host_group, kernels::Ops& ops,
                                       std::shared_ptr<HostStaging> staging)
    : host_group_(std::move(host_group)),
      ops_(ops),
      staging_(own_staging_unless_shared(std::move(staging), ops)) {
  if (!host_group_) throw std::invalid_argument("StagedCommunicator: the host group is null");
}

template <typename Reduce>
void StagedCommunicator::all_reduce_staged(void* data, size_t count, size_t element_bytes,
                                           Reduce&& reduce) {
  if (count == 0 || size() == 1) return;  // as the host group would: nothing to combine
  const size_t bytes = bytes_of(count, element_bytes, "all_reduce");
  char* host = staging_->reserve(bytes);
  ops_.copy_to_host(host, data, bytes);
  reduce(host);
  ops_.copy_from_host(data, host, bytes);
}

void StagedCommunicator::all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) {
  all_reduce_staged(data, count, kernels::dtype_bytes(dtype),
                    [&](char* host) { host_group_->all_reduce(host, count, dtype, op); });
}

void StagedCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  all_reduce_staged(data, count, sizeof(double), [&](char* host) {
    host_group_->all_reduce(reinterpret_cast<double*>(host), count, op);
  });
}

void StagedCommunicator::reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                        kernels::DType dtype) {
  if (chunk_count == 0) return;
  const size_t element_bytes = kernels::dtype_bytes(dtype);
  const size_t chunk_bytes = bytes_of(chunk_count, element_bytes, "reduce_scatter");
  if (size() == 1) {
    if (send != receive) ops_.copy(receive, send, chunk_bytes);
    return;
  }
  const size_t members = static_cast<size_t>(size());
  const size_t send_bytes = bytes_of(chunk_count * members, element_bytes, "reduce_scatter");
  // [every member's chunk | this member's reduced chunk]
  char* host_send = staging_->reserve(send_bytes + chunk_bytes);
  char* host_receive = host_send + send_bytes;
  ops_.copy_to_host(host_send, send, send_bytes);
  host_group_->reduce_scatter(host_send, host_receive, chunk_count, dtype);
  ops_.copy_from_host(receive, host_receive, chunk_bytes);
}

void StagedCommunicator::all_gather(const void* send, void* receive, size_t chunk_count,
                                    kernels::DType dtype) {
  if (chunk_count == 0) return;
  const size_t element_bytes = kernels::dtype_bytes(dtype);
  const size_t chunk_bytes = bytes_of(chunk_count, element_bytes, "all_gather");
  if (size() == 1) {
    if (send != receive) ops_.copy(receive, send, chunk_bytes);
    return;
  }
  const size_t members = static_cast<size_t>(size());
  const size_t gathered_bytes = bytes_of(chunk_count * members, element_bytes, "all_gather");
  char* host = staging_->reserve(gathered_bytes);
  char* host_mine = host + static_cast<size_t>(rank()) * chunk_bytes;
  // Staged in place (the host group's MPI_IN_PLACE form): send may itself be
  // receive + rank * chunk_count, and it is read before receive is written.
  ops_.copy_to_host(host_mine, send, chunk_bytes);
  host_group_->all_gather(host_mine, host, chunk_count, dtype);
  ops_.copy_from_host(receive, host, gathered_bytes);
}

void StagedCommunicator::broadcast(void* data, size_t count, kernels::DType dtype, int root) {
  if (root < 0 || root >= size())
    throw std::invalid_argument("broadcast on group '" + name() + "': root " +
                                std::to_string(root) + " is not a member; valid: 0.." +
                                std::to_string(size() - 1));
  if (count == 0 || size() == 1) return;
  const size_t bytes = bytes_of(count, kernels::dtype_bytes(dtype), "broadcast");
  char* host = staging_->reserve(bytes);
  if (rank() == root) ops_.copy_to_host(host, data, bytes);  // the others' copies are overwritten
  host_group_->broadcast(host, count, dtype, root);
  if (rank() != root) ops_.copy_from_host(data, host, bytes);
}

void StagedCommunicator::barrier() {
  ops_.synchronize();
  host_group_->barrier();
}

// ---------------------------------------------------------------- StagedPeerToPeer

StagedPeerToPeer::StagedPeerToPeer(std::unique_ptr<PeerToPeer> host_peers, kernels::Ops& ops,
                                   std::shared_ptr<HostStaging> staging)
    : host_peers_(std::move(host_peers)),
      ops_(ops),
      staging_(own_staging_unless_shared(std::move(staging), ops)) {
  if (!host_peers_) throw std::invalid_argument("StagedPeerToPeer: the host peers are null");
}

void StagedPeerToPeer::send_receive(const void* send, size_t send_count, int send_to, void* receive,
                                    size_t receive_count, int receive_from, kernels::DType dtype,
                                    int tag) {
  const size_t element_bytes = kernels::dtype_bytes(dtype);
  // A skipped half (peer -1) stages nothing; its count goes to the host peers
  // as given, which ignore it.
  const size_t send_bytes = send_to >= 0 ? bytes_of(send_count, element_bytes, "send_receive") : 0;
  const size_t receive_bytes =
      receive_from >= 0 ? bytes_of(receive_count, element_bytes, "send_receive") : 0;
  // [outgoing message | incoming message]
  char* host = staging_->reserve(send_bytes + receive_bytes);
  char* host_send = send_to >= 0 ? host : nullptr;
  char* host_receive = receive_from >= 0 ? host + send_bytes : nullptr;
  if (send_bytes > 0) ops_.copy_to_host(host_send, send, send_bytes);
  host_peers_->send_receive(host_send, send_count, send_to, host_receive, receive_count,
                            receive_from, dtype, tag);
  if (receive_bytes > 0) ops_.copy_from_host(receive, host_receive, receive_bytes);
}

std::vector<char> StagedPeerToPeer::take_buffer(size_t bytes) {
  std::vector<char> buffer;
  if (!spare_.empty()) {
    buffer = std::move(spare_.back());
    spare_.pop_back();
  }
  buffer.resize(bytes);  // a reused buffer of this size allocates nothing
  return buffer;
}

PeerToPeer::Posted StagedPeerToPeer::post_send(const void* data, size_t count, int to,
                                               kernels::DType dtype, int tag) {
  const size_t bytes = bytes_of(count, kernels::dtype_bytes(dtype), "post_send");
  PostedTransfer posted{0, take_buffer(bytes), nullptr};
  if (bytes > 0) ops_.copy_to_host(posted.host.data(), data, bytes);
  posted.id = host_peers_->post_send(posted.host.data(), count, to, dtype, tag);
  posted_.push_back(std::move(posted));
  return posted_.back().id;
}

// buffer_free is not needed: the copy into `data` is queued at the wait, after
// every op queued before it; nor after_send: a send's data was copied out
// when it was posted.
PeerToPeer::Posted StagedPeerToPeer::post_receive(void* data, size_t count, int from,
                                                  kernels::DType dtype, int tag,
                                                  void* /*buffer_free*/, Posted /*after_send*/) {
  const size_t bytes = bytes_of(count, kernels::dtype_bytes(dtype), "post_receive");
  PostedTransfer posted{0, take_buffer(bytes), data};
  posted.id = host_peers_->post_receive(posted.host.data(), count, from, dtype, tag);
  posted_.push_back(std::move(posted));
  return posted_.back().id;
}

void StagedPeerToPeer::wait(Posted transfer) {
  const auto it = find_posted(posted_, transfer);
  PostedTransfer posted = std::move(*it);
  posted_.erase(it);
  host_peers_->wait(transfer);
  if (posted.device != nullptr && !posted.host.empty())
    ops_.copy_from_host(posted.device, posted.host.data(), posted.host.size());
  spare_.push_back(std::move(posted.host));
}

}  // namespace paraplan
