// nccl_communicator.h: NCCL on device buffers, one NCCL communicator per group
// of the plan, for runs with one GPU per rank. Compiled only when CUDA and NCCL
// are found (PARAPLAN_HAVE_NCCL); this header names no CUDA or NCCL header, so
// CUDA-free code (transport.cc) can include it.
//
// Contract (beyond communicator.h):
// - Device buffers go over NCCL on the communicator's own stream, ordered with
//   the ops' compute stream by events: an operation starts after the compute
//   work queued before it. Blocking calls make the compute stream wait for the
//   result (the host does not wait, except in barrier); start_* calls do not,
//   and wait_pending() makes the compute stream wait for everything started.
// - Host buffers (a loss, a gradient norm, a checkpoint's tensors) go over the
//   wrapped MPI communicator, as MpiCommunicator would move them. Every member
//   must pass the same kind of memory to a call; a call mixing device and host
//   buffers is refused.
// - Every queued operation registers with the Watchdog until its "done" event
//   completes; NCCL initialisation holds a Guard, and the host-blocking calls
//   (MPI for host buffers, barrier) are watched by the WatchedCommunicator
//   rank_state.cc wraps around every group.
// - Results: every member gets the same bits (each element is reduced once
//   and the result sent to all), and runs repeat bitwise while NCCL picks the
//   same algorithm and protocol for a count (NCCL_ALGO / NCCL_PROTO pin them);
//   they are not MpiCommunicator's bits (another summation order), and
//   ncclMax need not propagate NaN as MpiCommunicator's kMax does. bf16 goes
//   as ncclBfloat16: NCCL reduces it with its own rounding of partial sums, so
//   a bf16 sum need not be MpiCommunicator's fp32 rank-order sum rounded once.
// - Errors throw std::runtime_error naming the group, the operation and NCCL's
//   (or CUDA's) error string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/watchdog.h"

// The types behind ncclComm_t, cudaStream_t and cudaEvent_t.
struct ncclComm;
struct CUstream_st;
struct CUevent_st;

namespace paraplan {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over host_group's members: its rank 0 makes the NCCL unique id
  // and broadcasts it over host_group's MPI communicator, then every member
  // joins (ncclCommInitRank) on the current CUDA device. compute_stream is the
  // cudaStream_t the ops run on (Ops::stream()). host_group is kept for host
  // buffers and the barrier.
  NcclCommunicator(std::unique_ptr<MpiCommunicator> host_group, void* compute_stream);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_group_->rank(); }
  int size() const override { return host_group_->size(); }
  const std::string& name() const override { return host_group_->name(); }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  void all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  // send holds size() chunks; receive may be send + rank() * chunk_count (in place).
  void reduce_scatter(const void* send, void* receive, size_t chunk_count,
                      kernels::DType dtype) override;
  void all_gather(const void* send, void* receive, size_t chunk_count,
                  kernels::DType dtype) override;
  void broadcast(void* data, size_t count, kernels::DType dtype, int root) override;
  // Waits (on the host) for this rank's queued device work, then an MPI barrier.
  void barrier() override;

  void start_all_reduce(void* data, size_t count, kernels::DType dtype) override;
  void start_reduce_scatter(const void* send, void* receive, size_t chunk_count,
                            kernels::DType dtype) override;
  void start_all_gather(const void* send, void* receive, size_t chunk_count,
                        kernels::DType dtype) override;
  void wait_pending() override;
  uint64_t started_mark() override { return started_; }
  void wait_started_before(uint64_t mark) override;

  MpiCommunicator& host_group() { return *host_group_; }
  // The device memory NCCL took for this communicator: free device memory
  // (cudaMemGetInfo) before ncclCommInitRank less after it, plus the same
  // around each operation of a kind and size not queued before (NCCL
  // connects an algorithm's buffers in the first call that needs it:
  // NCCL_RUNTIME_CONNECT, the default since 2.22; a pipeline link's are
  // connected by its warm exchange). The whole device's: exact while this
  // process is the GPU's only user and the host allocates nothing meanwhile.
  // Read it after the first step for the whole.
  int64_t device_bytes() const { return device_bytes_; }

 private:
  friend class NcclPeerToPeer;
  enum class Completion { kComputeWaits, kDeferred };

  // The elements a device all-reduce sums: a storage dtype, or doubles (the
  // host-side statistics, which may also sit on the device).
  enum class Element { kFloat32, kBFloat16, kFloat64 };
  void all_reduce_on(void* data, size_t count, Element element, ReduceOp op, Completion completion);
  void reduce_scatter_on(const void* send, void* receive, size_t chunk_count, kernels::DType dtype,
                         Completion completion);
  void all_gather_on(const void* send, void* receive, size_t chunk_count, kernels::DType dtype,
                     Completion completion);
  // Queues `launch` (NCCL calls on comm_stream_) after the compute stream's
  // work so far (or, given `after`, only after that event of it), records its
  // done event and registers it with the watchdog as `name`; kComputeWaits
  // also makes the compute stream wait for it.
  void enqueue(const Watchdog::OperationName& operation_name, const std::function<void()>& launch,
               Completion completion, CUevent_st* after = nullptr);
  // Hands the events of finished operations back and closes their watchdog entries.
  void retire_finished();
  // Frees what was created; never throws (destructor, failed constructor).
  void release();

  struct InFlight {
    CUevent_st* done;
    uint64_t watchdog_ticket;
    uint64_t sequence;  // started_ when it was queued: 0, 1, ...
  };

  std::unique_ptr<MpiCommunicator> host_group_;
  std::string where_;  // " on group 'data' (rank 1 of 2)", for the watchdog's messages
  int device_ = 0;
  ncclComm* comm_ = nullptr;
  CUstream_st* compute_stream_ = nullptr;
  CUstream_st* comm_stream_ = nullptr;
  CUevent_st* compute_ready_ = nullptr;  // re-recorded before every operation
  std::deque<InFlight> in_flight_;       // oldest first
  uint64_t started_ = 0;                 // operations queued so far
  std::vector<CUevent_st*> spare_events_;
  bool failed_ = false;  // an operation threw: the destructor aborts instead of waiting
  int64_t device_bytes_ = 0;
  // The (operation, unit, count) queued so far: a new one is measured
  // (device_bytes), at two cudaMemGetInfo calls; a step's repeats are not.
  std::set<std::tuple<const void*, const void*, size_t>> measured_;
};

// This rank's place in the ring of its pipeline's ranks (pipeline rank r
// next to r + 1 and r - 1, mod p), for the per-link communicators.
struct PipelineRing {
  int index = 0, size = 1;       // pipeline rank and size
  int ring = 0;                  // which pipeline (its data and tensor coordinates)
  int next = -1, previous = -1;  // world ranks of pipeline ranks index + 1, index - 1 (mod size)
};

// Pipeline transfers over NCCL.
// - Paired (send_receive): a ring neighbour's half over its link (below),
//   any other peer's on the world communicator, ncclSend and ncclRecv in one
//   ncclGroupStart/End (a -1 peer skips that half); ordered with the compute
//   stream like a blocking collective. (On the world NCCL would connect p2p
//   buffers of its own at the first transfer, mid-run.)
// - Posted halves: each direction between two ring neighbours has its own
//   two-rank communicator and stream (a link), so a link's transfers wait for
//   no other link's. A send starts after the compute queued before it (which
//   wrote its data); a receive only after its buffer_free mark (the last
//   compute that read its buffer), so it lands while later compute runs;
//   given after_send, also after that send's own completion event. An
//   NCCL transfer occupies its stream until the peer's half arrives: on one
//   shared stream, a receive waited behind every send posted before it.
// Host buffers (a checkpoint's tensors) go over host_peers (MpiPeerToPeer);
// each half is routed by its own buffer, so both sides of a transfer must pass
// the same kind of memory.
class NcclPeerToPeer final : public PeerToPeer {
 public:
  // world must outlive this (ProcessGroups destroys peers before world).
  // Collective over world: every rank makes the links of its ring (at most
  // four: to and from each neighbour) in the same order of splits.
  NcclPeerToPeer(NcclCommunicator& world, std::unique_ptr<PeerToPeer> host_peers,
                 const PipelineRing& ring = {});

  void send_receive(const void* send, size_t send_count, int send_to, void* receive,
                    size_t receive_count, int receive_from, kernels::DType dtype,
                    int tag = 0) override;

  // Posted halves on device buffers: the ncclSend / ncclRecv is queued on
  // the communication stream after the compute queued so far (which wrote a
  // send's data, and last read a receive's buffer) and the host returns; the
  // compute stream does not wait. wait() makes the compute queued after it
  // wait for the transfer (an event, no host synchronization). Host buffers
  // go to host_peers.
  Posted post_send(const void* data, size_t count, int to, kernels::DType dtype,
                   int tag = 0) override;
  Posted post_receive(void* data, size_t count, int from, kernels::DType dtype, int tag = 0,
                      void* buffer_free = nullptr, Posted after_send = 0) override;
  void wait(Posted transfer) override;
  ~NcclPeerToPeer() override;

  // Each link's name and its device_bytes() (read when called), in the
  // order made; valid while this lives.
  std::vector<std::pair<std::string, std::function<int64_t()>>> link_device_bytes() const;

 private:
  struct PostedTransfer {
    Posted id = 0;
    CUevent_st* done = nullptr;  // on the communication stream; null: on the host
    Posted host_id = 0;
  };
  Posted post(const void* send, void* receive, size_t count, int peer, kernels::DType dtype,
              int tag, void* buffer_free, Posted after_send);
  void make_links(const PipelineRing& ring);
  // One element over a new link (sends: this rank is its sender), so its
  // connection is set up now and not at the first transfer of a step.
  static void warm(NcclCommunicator& link, bool sends);

  NcclCommunicator& world_;
  std::unique_ptr<PeerToPeer> host_peers_;
  // Two-rank communicators (the sender is rank 0) in the order made, which
  // is every rank's; destroyed in reverse (ncclCommDestroy may talk to the
  // peer: every rank then ends the same link first, no pair waits for
  // another). By the peer's world rank: what this rank sends to it, what it
  // receives from it.
  std::vector<std::unique_ptr<NcclCommunicator>> links_;
  std::map<int, NcclCommunicator*> send_links_, receive_links_;
  std::vector<PostedTransfer> posted_;  // not yet waited on
  std::vector<CUevent_st*> spare_events_;
  Posted next_id_ = 1;
};

}  // namespace paraplan
