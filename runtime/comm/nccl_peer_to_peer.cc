// nccl_peer_to_peer.cc: NcclPeerToPeer, pipeline transfers over NCCL: posted
// halves over a two-rank link per direction between ring neighbours (made and
// warmed at start-up), paired send_receive over those links too (the world
// communicator for other peers), host buffers over the host peers.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/nccl_check.h"
#include "runtime/comm/nccl_communicator.h"
#include "runtime/comm/watchdog.h"

namespace paraplan {

namespace {

using nccl_check::Memory;
using nccl_check::memory_of;
using nccl_check::nccl_type_of;
using nccl_check::NcclGroup;

}  // namespace

NcclPeerToPeer::NcclPeerToPeer(NcclCommunicator& world, std::unique_ptr<PeerToPeer> host_peers,
                               const PipelineRing& ring)
    : world_(world), host_peers_(std::move(host_peers)) {
  if (!host_peers_) throw std::invalid_argument("NcclPeerToPeer: the host peers are null");
  make_links(ring);
}

void NcclPeerToPeer::make_links(const PipelineRing& ring) {
  // Edge e joins pipeline ranks e and e + 1 (mod p); a ring of 2 has one.
  // Three rounds in which no rank is in two edges: even edges, odd edges and
  // the wrap-around edge of an odd ring. Each round is two world-wide splits
  // (one per direction); then only a link's two ranks make its NCCL
  // communicator, so the pairs of a round start at once.
  const int p = ring.size;  // the same on every rank: all make the same splits
  if (p < 2) return;
  const int edges = p == 2 ? 1 : p;
  const auto round_of = [p](int edge) { return p % 2 == 1 && edge == p - 1 ? 2 : edge % 2; };
  const int down_edge = ring.index < edges ? ring.index : -1;  // to pipeline rank index + 1
  const int up_edge = ring.index > 0 || p > 2 ? (ring.index + p - 1) % p : -1;
  const int me = world_.rank();
  for (int round = 0; round < 3; ++round) {
    int edge = -1, neighbour = -1;
    bool lower = false;  // this rank is the edge's pipeline rank e (not e + 1)
    if (down_edge >= 0 && round_of(down_edge) == round) {
      edge = down_edge, neighbour = ring.next, lower = true;
    } else if (up_edge >= 0 && round_of(up_edge) == round) {
      edge = up_edge, neighbour = ring.previous;
    }
    for (const bool downward : {true, false}) {
      const bool sends = downward == lower;
      const int color = edge < 0 ? MpiCommunicator::kNotInGroup : ring.ring * p + edge;
      std::string name = "pipeline link " + std::to_string(sends ? me : neighbour) + "->" +
                         std::to_string(sends ? neighbour : me);
      std::unique_ptr<MpiCommunicator> pair =
          world_.host_group().split(color, sends ? 0 : 1, std::move(name));
      if (!pair) continue;
      links_.push_back(std::make_unique<NcclCommunicator>(std::move(pair), world_.compute_stream_));
      (sends ? send_links_ : receive_links_)[neighbour] = links_.back().get();
      warm(*links_.back(), sends);
    }
  }
}

void NcclPeerToPeer::warm(NcclCommunicator& link, bool sends) {
  // A link's first transfer sets up its connection and holds the host until
  // the peer's first operation on it; in the middle of a step that stalled
  // the pipeline. Here both ranks are making the link (no rank is in two
  // links of a round), so one element each way costs a round trip once.
  const std::string& group = link.name();
  const char* operation = "warming the link";
  Watchdog::Guard guard({operation, 1, "floats", &link.where_});
  // What the connection takes (NCCL allocates it on this first use).
  const int64_t free_before = nccl_check::free_device_bytes(group, operation);
  void* scratch = nullptr;
  PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaMalloc(&scratch, sizeof(float)));
  try {
    PARAPLAN_COMM_CUDA_CHECK(group, operation,
                             cudaMemsetAsync(scratch, 0, sizeof(float), link.comm_stream_));
    // The sender is the link's rank 0.
    PARAPLAN_NCCL_CHECK(group, operation, link.comm_,
                        sends
                            ? ncclSend(scratch, 1, ncclFloat32, 1, link.comm_, link.comm_stream_)
                            : ncclRecv(scratch, 1, ncclFloat32, 0, link.comm_, link.comm_stream_));
    PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaStreamSynchronize(link.comm_stream_));
  } catch (...) {
    link.failed_ = true;
    cudaFree(scratch);
    throw;
  }
  PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaFree(scratch));
  link.device_bytes_ +=
      std::max<int64_t>(0, free_before - nccl_check::free_device_bytes(group, operation));
}

std::vector<std::pair<std::string, std::function<int64_t()>>> NcclPeerToPeer::link_device_bytes()
    const {
  std::vector<std::pair<std::string, std::function<int64_t()>>> bytes;
  for (const std::unique_ptr<NcclCommunicator>& link : links_) {
    const NcclCommunicator* made = link.get();
    bytes.emplace_back(link->name(), [made] { return made->device_bytes(); });
  }
  return bytes;
}

void NcclPeerToPeer::send_receive(const void* send, size_t send_count, int send_to, void* receive,
                                  size_t receive_count, int receive_from, kernels::DType dtype,
                                  int tag) {
  for (const int peer : {send_to, receive_from}) {
    if (peer < -1 || peer >= world_.size())
      throw std::invalid_argument("send_receive: peer " + std::to_string(peer) +
                                  " is not a world rank; valid: -1 (none) or 0.." +
                                  std::to_string(world_.size() - 1));
  }
  const std::string transfer = "send_receive";
  // Each half goes by its own buffer's memory; the peer passes the same kind.
  const bool send_on_device = send_to >= 0 && memory_of(send, "peers", transfer) == Memory::kDevice;
  const bool receive_on_device =
      receive_from >= 0 && memory_of(receive, "peers", transfer) == Memory::kDevice;
  // A ring neighbour's half goes over its link, connected at start-up: on the
  // world communicator NCCL would connect p2p buffers of its own mid-run
  // (evaluation's transfers). Each half by itself: the peer's matching half
  // finds the same link. Queued first: the host half below may block.
  const bool send_linked = send_on_device && send_links_.count(send_to) > 0;
  const bool receive_linked = receive_on_device && receive_links_.count(receive_from) > 0;
  const Posted sent =
      send_linked ? post(send, nullptr, send_count, send_to, dtype, tag, nullptr, 0) : 0;
  const Posted received =
      receive_linked ? post(nullptr, receive, receive_count, receive_from, dtype, tag, nullptr, 0)
                     : 0;
  const bool send_on_world = send_on_device && !send_linked;
  const bool receive_on_world = receive_on_device && !receive_linked;
  if (send_on_world || receive_on_world) {
    world_.enqueue(
        {"pipeline send_receive",
         (send_on_world ? send_count : 0) + (receive_on_world ? receive_count : 0),
         elements_unit(dtype), &world_.where_, send_on_world ? send_to : -1,
         receive_on_world ? receive_from : -1},
        [&] {
          const std::string& group = world_.name();
          ncclComm_t comm = world_.comm_;
          cudaStream_t stream = world_.comm_stream_;
          const ncclDataType_t type = nccl_type_of(dtype);
          NcclGroup nccl_group(group, transfer, comm);
          if (send_on_world)
            PARAPLAN_NCCL_CHECK(group, transfer, comm,
                                ncclSend(send, send_count, type, send_to, comm, stream));
          if (receive_on_world)
            PARAPLAN_NCCL_CHECK(group, transfer, comm,
                                ncclRecv(receive, receive_count, type, receive_from, comm, stream));
          nccl_group.end();
        },
        NcclCommunicator::Completion::kComputeWaits);
  }
  // The compute queued after this waits for both (events, no host wait).
  if (sent != 0) wait(sent);
  if (received != 0) wait(received);
  const bool send_on_host = send_to >= 0 && !send_on_device;
  const bool receive_on_host = receive_from >= 0 && !receive_on_device;
  if (send_on_host || receive_on_host) {
    host_peers_->send_receive(send_on_host ? send : nullptr, send_on_host ? send_count : 0,
                              send_on_host ? send_to : -1, receive_on_host ? receive : nullptr,
                              receive_on_host ? receive_count : 0,
                              receive_on_host ? receive_from : -1, dtype, tag);
  }
}

PeerToPeer::Posted NcclPeerToPeer::post(const void* send, void* receive, size_t count, int peer,
                                        kernels::DType dtype, int tag, void* buffer_free,
                                        Posted after_send) {
  const bool sending = send != nullptr;
  const char* operation = sending ? "post_send" : "post_receive";
  if (peer < 0 || peer >= world_.size())
    throw std::invalid_argument(std::string(operation) + ": peer " + std::to_string(peer) +
                                " is not a world rank; valid: 0.." +
                                std::to_string(world_.size() - 1));
  // The send whose buffer this receive writes (it shares the receive's kind
  // of memory: the same buffer).
  const PostedTransfer* earlier_send =
      after_send != 0 ? &*find_posted(posted_, after_send) : nullptr;
  PostedTransfer posted{next_id_++, nullptr, 0};
  if (memory_of(sending ? send : receive, "peers", operation) == Memory::kHost) {
    posted.host_id = sending ? host_peers_->post_send(send, count, peer, dtype, tag)
                             : host_peers_->post_receive(receive, count, peer, dtype, tag, nullptr,
                                                         earlier_send ? earlier_send->host_id : 0);
    posted_.push_back(posted);
    return posted.id;
  }
  // The link of that direction (the sender is its rank 0); a peer outside
  // the ring goes over the world communicator, behind its other work.
  auto& links = sending ? send_links_ : receive_links_;
  const auto found = links.find(peer);
  NcclCommunicator& lane = found != links.end() ? *found->second : world_;
  const int lane_peer = found != links.end() ? (sending ? 1 : 0) : peer;
  const std::string& group = lane.name();
  // On the send's own lane: the receive waits for the send, not for the
  // compute queued after it (enqueue below adds the buffer_free wait).
  if (earlier_send != nullptr && earlier_send->done != nullptr)
    PARAPLAN_COMM_CUDA_CHECK(group, operation,
                             cudaStreamWaitEvent(lane.comm_stream_, earlier_send->done, 0));
  lane.enqueue(
      {sending ? "pipeline send (posted)" : "pipeline receive (posted)", count,
       elements_unit(dtype), &lane.where_, sending ? peer : -1, sending ? -1 : peer},
      [&] {
        ncclComm_t comm = lane.comm_;
        const ncclDataType_t type = nccl_type_of(dtype);
        if (sending)
          PARAPLAN_NCCL_CHECK(group, operation, comm,
                              ncclSend(send, count, type, lane_peer, comm, lane.comm_stream_));
        else
          PARAPLAN_NCCL_CHECK(group, operation, comm,
                              ncclRecv(receive, count, type, lane_peer, comm, lane.comm_stream_));
      },
      NcclCommunicator::Completion::kDeferred,
      sending ? nullptr : static_cast<CUevent_st*>(buffer_free));
  if (spare_events_.empty()) {
    cudaEvent_t event = nullptr;
    PARAPLAN_COMM_CUDA_CHECK(group, operation,
                             cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    spare_events_.push_back(event);
  }
  posted.done = spare_events_.back();
  spare_events_.pop_back();
  PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaEventRecord(posted.done, lane.comm_stream_));
  posted_.push_back(posted);
  return posted.id;
}

PeerToPeer::Posted NcclPeerToPeer::post_send(const void* data, size_t count, int to,
                                             kernels::DType dtype, int tag) {
  if (data == nullptr) throw std::invalid_argument("post_send: no buffer");
  return post(data, nullptr, count, to, dtype, tag, nullptr, 0);
}

PeerToPeer::Posted NcclPeerToPeer::post_receive(void* data, size_t count, int from,
                                                kernels::DType dtype, int tag, void* buffer_free,
                                                Posted after_send) {
  if (data == nullptr) throw std::invalid_argument("post_receive: no buffer");
  return post(nullptr, data, count, from, dtype, tag, buffer_free, after_send);
}

void NcclPeerToPeer::wait(Posted transfer) {
  const auto it = find_posted(posted_, transfer);
  const PostedTransfer posted = *it;
  posted_.erase(it);
  if (posted.done == nullptr) {
    host_peers_->wait(posted.host_id);
    return;
  }
  // The event's state is taken now, so it may be recorded again at once.
  PARAPLAN_COMM_CUDA_CHECK(world_.name(), "wait (posted transfer)",
                           cudaStreamWaitEvent(world_.compute_stream_, posted.done, 0));
  spare_events_.push_back(posted.done);
}

NcclPeerToPeer::~NcclPeerToPeer() {
  for (const PostedTransfer& posted : posted_)
    if (posted.done != nullptr) cudaEventDestroy(posted.done);
  for (CUevent_st* event : spare_events_) cudaEventDestroy(event);
  send_links_.clear();
  receive_links_.clear();
  while (!links_.empty()) links_.pop_back();  // the last made first, on every rank
}

}  // namespace paraplan
