// nccl_communicator.cc: NcclCommunicator and NcclPeerToPeer (NCCL on device
// buffers, ordered with the ops' compute stream by events, watched by the
// Watchdog), and the replacement of a plan's MPI groups by NCCL ones. The only
// runtime file that includes CUDA and NCCL headers.
#include "runtime/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/comm/watchdog.h"

namespace paraplan {

namespace {

[[noreturn]] void throw_nccl_error(const std::string& group, const std::string& operation,
                                   const char* call, ncclResult_t status, ncclComm_t comm) {
  std::string message = "NCCL " + operation + " on group '" + group + "' failed: " + call + ": " +
                        ncclGetErrorString(status);
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') message += " (" + std::string(detail) + ")";
  throw std::runtime_error(message);
}

[[noreturn]] void throw_cuda_error(const std::string& group, const std::string& operation,
                                   const char* call, cudaError_t status) {
  throw std::runtime_error("CUDA " + std::string(call) + " for " + operation + " on group '" +
                           group + "' failed: " + cudaGetErrorString(status));
}

// Every NCCL and CUDA call goes through one of these: a failure throws naming
// the group, the operation, the call and the library's error string.
#define PARAPLAN_NCCL_CHECK(group, operation, comm, call)            \
  do {                                                               \
    const ncclResult_t nccl_status_ = (call);                        \
    if (nccl_status_ != ncclSuccess)                                 \
      throw_nccl_error(group, operation, #call, nccl_status_, comm); \
  } while (0)
#define PARAPLAN_COMM_CUDA_CHECK(group, operation, call)                                      \
  do {                                                                                        \
    const cudaError_t cuda_status_ = (call);                                                  \
    if (cuda_status_ != cudaSuccess) throw_cuda_error(group, operation, #call, cuda_status_); \
  } while (0)

// An NCCL group (ncclGroupStart) closed on every path: end() closes it and
// reports NCCL's error; when a call inside throws first, the destructor
// still closes it (NCCL requires every group to end; a dangling one breaks
// every later NCCL call of the process), ignoring its result.
class NcclGroup {
 public:
  NcclGroup(const std::string& group, const std::string& operation, ncclComm_t comm)
      : group_(group), operation_(operation), comm_(comm) {
    PARAPLAN_NCCL_CHECK(group_, operation_, comm_, ncclGroupStart());
    open_ = true;
  }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    PARAPLAN_NCCL_CHECK(group_, operation_, comm_, ncclGroupEnd());
  }

 private:
  const std::string& group_;
  const std::string& operation_;
  ncclComm_t comm_;
  bool open_ = false;
};

enum class Memory { kDevice, kHost };

// Device (or managed) memory goes over NCCL; anything else (pageable or pinned
// host memory) over MPI.
Memory memory_of(const void* pointer, const std::string& group, const std::string& operation) {
  if (pointer == nullptr) return Memory::kHost;
  cudaPointerAttributes attributes{};
  PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaPointerGetAttributes(&attributes, pointer));
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged
             ? Memory::kDevice
             : Memory::kHost;
}

// Both buffers of a call must be of one kind: NCCL cannot read host memory, and
// MPI here is given host memory only.
Memory common_memory_of(const void* send, const void* receive, const std::string& group,
                        const std::string& operation) {
  const Memory send_memory = memory_of(send, group, operation);
  if (send_memory != memory_of(receive, group, operation))
    throw std::invalid_argument(operation + " on group '" + group +
                                "': the send and receive buffers must both be device memory "
                                "(NCCL) or both host memory (MPI), not one of each");
  return send_memory;
}

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a_begin = reinterpret_cast<uintptr_t>(a), b_begin = reinterpret_cast<uintptr_t>(b);
  return a_begin < b_begin + b_bytes && b_begin < a_begin + a_bytes;
}

ncclDataType_t nccl_type_of(kernels::DType dtype) {
  return dtype == kernels::DType::kBFloat16 ? ncclBfloat16 : ncclFloat32;
}

ncclRedOp_t nccl_op_of(ReduceOp op) {
  return op == ReduceOp::kSum ? ncclSum : ncclMax;
}

}  // namespace

// ---------------------------------------------------------------- NcclCommunicator

NcclCommunicator::NcclCommunicator(std::unique_ptr<MpiCommunicator> host_group,
                                   void* compute_stream)
    : host_group_(std::move(host_group)),
      compute_stream_(static_cast<CUstream_st*>(compute_stream)) {
  if (!host_group_) throw std::invalid_argument("NcclCommunicator: the MPI group is null");
  where_ = " on group '" + name() + "' (rank " + std::to_string(rank()) + " of " +
           std::to_string(size()) + ")";
  const std::string& group = name();
  try {
    PARAPLAN_COMM_CUDA_CHECK(group, "init", cudaGetDevice(&device_));
    // Highest priority: communication kernels start ahead of queued compute
    // when both are ready, so overlapped reductions are not starved.
    int least_priority = 0, greatest_priority = 0;
    PARAPLAN_COMM_CUDA_CHECK(group, "init",
                             cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
    cudaStream_t stream = nullptr;
    PARAPLAN_COMM_CUDA_CHECK(
        group, "init",
        cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest_priority));
    comm_stream_ = stream;
    cudaEvent_t ready = nullptr;
    PARAPLAN_COMM_CUDA_CHECK(group, "init",
                             cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    compute_ready_ = ready;

    ncclUniqueId id{};
    if (rank() == 0) PARAPLAN_NCCL_CHECK(group, "init", nullptr, ncclGetUniqueId(&id));
    Watchdog::Guard guard({"NCCL init", 0, "", &where_});
    PARAPLAN_MPI_CHECK(
        group, "broadcast of the NCCL unique id",
        MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, host_group_->handle()));
    ncclComm_t comm = nullptr;
    PARAPLAN_NCCL_CHECK(group, "init", nullptr, ncclCommInitRank(&comm, size(), id, rank()));
    comm_ = comm;
  } catch (...) {
    failed_ = true;
    release();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  // Destroyed while an exception unwinds: this rank failed, and its peers may
  // wait for transfers it will never post; waiting for its stream or
  // ncclCommDestroy would wait for them for good. Abort instead.
  if (std::uncaught_exceptions() > 0) failed_ = true;
  release();
}

void NcclCommunicator::release() {
  // Never throws: called from the destructor and a failed constructor.
  if (comm_stream_ != nullptr && !failed_) {
    const cudaError_t status = cudaStreamSynchronize(comm_stream_);
    if (status != cudaSuccess)
      std::fprintf(stderr, "paraplan: warning: group '%s': waiting for NCCL work failed: %s\n",
                   name().c_str(), cudaGetErrorString(status));
  }
  for (const InFlight& operation : in_flight_) {
    Watchdog::instance().finish(operation.watchdog_ticket);
    cudaEventDestroy(operation.done);
  }
  in_flight_.clear();
  for (CUevent_st* event : spare_events_) cudaEventDestroy(event);
  spare_events_.clear();
  if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
  compute_ready_ = nullptr;
  if (comm_ != nullptr) {
    // After a failure a peer may be gone: abort rather than wait for it.
    const ncclResult_t status = failed_ ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    if (status != ncclSuccess)
      std::fprintf(stderr, "paraplan: warning: group '%s': releasing the NCCL communicator: %s\n",
                   name().c_str(), ncclGetErrorString(status));
  }
  comm_ = nullptr;
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  comm_stream_ = nullptr;
}

void NcclCommunicator::retire_finished() {
  // Operations finish in queue order: they all run on comm_stream_.
  while (!in_flight_.empty()) {
    const InFlight oldest = in_flight_.front();
    const cudaError_t status = cudaEventQuery(oldest.done);
    if (status == cudaErrorNotReady) break;
    if (status != cudaSuccess) {
      failed_ = true;
      throw_cuda_error(name(), "an earlier operation", "cudaEventQuery", status);
    }
    // After finish() the watchdog no longer polls the event, so it may be reused.
    Watchdog::instance().finish(oldest.watchdog_ticket);
    spare_events_.push_back(oldest.done);
    in_flight_.pop_front();
  }
}

void NcclCommunicator::enqueue(const Watchdog::OperationName& operation_name,
                               const std::function<void()>& launch, Completion completion,
                               CUevent_st* after) {
  const char* operation = operation_name.operation;  // a string only on the error path
  const std::string& group = name();
  try {
    retire_finished();
    ncclResult_t earlier = ncclSuccess;
    PARAPLAN_NCCL_CHECK(group, operation, comm_, ncclCommGetAsyncError(comm_, &earlier));
    if (earlier != ncclSuccess)
      throw_nccl_error(group, operation, "an earlier operation (ncclCommGetAsyncError)", earlier,
                       comm_);
    // The operation reads what the compute stream wrote before this call (or
    // writes a buffer that compute last read before `after`).
    if (after == nullptr) {
      PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaEventRecord(compute_ready_, compute_stream_));
      after = compute_ready_;
    }
    PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaStreamWaitEvent(comm_stream_, after, 0));
    launch();
    if (spare_events_.empty()) {
      cudaEvent_t event = nullptr;
      PARAPLAN_COMM_CUDA_CHECK(group, operation,
                               cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      spare_events_.push_back(event);
    }
    CUevent_st* done = spare_events_.back();
    spare_events_.pop_back();
    in_flight_.push_back(InFlight{done, 0, started_++});
    PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaEventRecord(done, comm_stream_));
    if (completion == Completion::kComputeWaits)
      PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaStreamWaitEvent(compute_stream_, done, 0));
    // The probe runs on the watchdog's thread: selecting the device first keeps
    // that thread from creating a context on device 0.
    // It also reads NCCL's asynchronous error (thread-safe, as NCCL documents
    // for this use): a peer's failure reported while the host waits ends the
    // job with NCCL's own text, not at the timeout. The process then ends
    // (Watchdog's handler); the communicator is not aborted from this
    // thread, which would race the main thread's use of it.
    const int device = device_;
    ncclComm_t comm = comm_;
    in_flight_.back().watchdog_ticket =
        Watchdog::instance().begin(operation_name, [done, device, comm] {
          cudaSetDevice(device);
          ncclResult_t error = ncclSuccess;
          if (ncclCommGetAsyncError(comm, &error) == ncclSuccess && error != ncclSuccess &&
              error != ncclInProgress) {
            const char* detail = ncclGetLastError(comm);
            throw std::runtime_error(std::string("NCCL reported ") + ncclGetErrorString(error) +
                                     (detail != nullptr && detail[0] != '\0'
                                          ? " (" + std::string(detail) + ")"
                                          : std::string()));
          }
          return cudaEventQuery(done) == cudaSuccess;
        });
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void NcclCommunicator::all_reduce_on(void* data, size_t count, Element element, ReduceOp op,
                                     Completion completion) {
  if (count == 0) return;
  const bool doubles = element == Element::kFloat64;
  const kernels::DType dtype =
      element == Element::kBFloat16 ? kernels::DType::kBFloat16 : kernels::DType::kFloat32;
  // Host buffers (the loss, the norm) go over MPI; the watched wrapper
  // (watched_communicator.h) covers that blocking call.
  if (memory_of(data, name(), "all_reduce") == Memory::kHost) {
    if (doubles) {
      host_group_->all_reduce(static_cast<double*>(data), count, op);
    } else {
      host_group_->all_reduce(data, count, dtype, op);
    }
    return;
  }
  const ncclDataType_t type = doubles ? ncclFloat64 : nccl_type_of(dtype);
  enqueue(
      {"all_reduce", count, doubles ? "doubles" : elements_unit(dtype), &where_},
      [&] {
        PARAPLAN_NCCL_CHECK(
            name(), "all_reduce", comm_,
            ncclAllReduce(data, data, count, type, nccl_op_of(op), comm_, comm_stream_));
      },
      completion);
}

void NcclCommunicator::all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) {
  all_reduce_on(data, count,
                dtype == kernels::DType::kBFloat16 ? Element::kBFloat16 : Element::kFloat32, op,
                Completion::kComputeWaits);
}

void NcclCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  all_reduce_on(data, count, Element::kFloat64, op, Completion::kComputeWaits);
}

void NcclCommunicator::start_all_reduce(void* data, size_t count, kernels::DType dtype) {
  all_reduce_on(data, count,
                dtype == kernels::DType::kBFloat16 ? Element::kBFloat16 : Element::kFloat32,
                ReduceOp::kSum, Completion::kDeferred);
}

void NcclCommunicator::reduce_scatter_on(const void* send, void* receive, size_t chunk_count,
                                         kernels::DType dtype, Completion completion) {
  if (chunk_count == 0) return;
  const size_t members = static_cast<size_t>(size());
  if (common_memory_of(send, receive, name(), "reduce_scatter") == Memory::kHost) {
    host_group_->reduce_scatter(send, receive, chunk_count, dtype);
    return;
  }
  const size_t chunk_bytes = chunk_count * kernels::dtype_bytes(dtype);
  const void* in_place = static_cast<const char*>(send) + static_cast<size_t>(rank()) * chunk_bytes;
  if (receive != in_place && ranges_overlap(send, members * chunk_bytes, receive, chunk_bytes))
    throw std::invalid_argument("reduce_scatter on group '" + name() +
                                "': receive overlaps send without being this member's chunk "
                                "(send + rank * chunk_count, the in-place form)");
  enqueue(
      {"reduce_scatter", chunk_count, elements_per_rank_unit(dtype), &where_},
      [&] {
        PARAPLAN_NCCL_CHECK(name(), "reduce_scatter", comm_,
                            ncclReduceScatter(send, receive, chunk_count, nccl_type_of(dtype),
                                              ncclSum, comm_, comm_stream_));
      },
      completion);
}

void NcclCommunicator::reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                      kernels::DType dtype) {
  reduce_scatter_on(send, receive, chunk_count, dtype, Completion::kComputeWaits);
}

void NcclCommunicator::start_reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                            kernels::DType dtype) {
  reduce_scatter_on(send, receive, chunk_count, dtype, Completion::kDeferred);
}

void NcclCommunicator::all_gather_on(const void* send, void* receive, size_t chunk_count,
                                     kernels::DType dtype, Completion completion) {
  if (chunk_count == 0) return;
  const size_t members = static_cast<size_t>(size());
  if (common_memory_of(send, receive, name(), "all_gather") == Memory::kHost) {
    host_group_->all_gather(send, receive, chunk_count, dtype);
    return;
  }
  const size_t chunk_bytes = chunk_count * kernels::dtype_bytes(dtype);
  const void* in_place =
      static_cast<const char*>(receive) + static_cast<size_t>(rank()) * chunk_bytes;
  if (send != in_place && ranges_overlap(send, chunk_bytes, receive, members * chunk_bytes))
    throw std::invalid_argument("all_gather on group '" + name() +
                                "': send overlaps receive without being this member's chunk "
                                "(receive + rank * chunk_count, the in-place form)");
  enqueue(
      {"all_gather", chunk_count, elements_per_rank_unit(dtype), &where_},
      [&] {
        PARAPLAN_NCCL_CHECK(
            name(), "all_gather", comm_,
            ncclAllGather(send, receive, chunk_count, nccl_type_of(dtype), comm_, comm_stream_));
      },
      completion);
}

void NcclCommunicator::all_gather(const void* send, void* receive, size_t chunk_count,
                                  kernels::DType dtype) {
  all_gather_on(send, receive, chunk_count, dtype, Completion::kComputeWaits);
}

void NcclCommunicator::start_all_gather(const void* send, void* receive, size_t chunk_count,
                                        kernels::DType dtype) {
  all_gather_on(send, receive, chunk_count, dtype, Completion::kDeferred);
}

void NcclCommunicator::broadcast(void* data, size_t count, kernels::DType dtype, int root) {
  if (root < 0 || root >= size())
    throw std::invalid_argument("broadcast on group '" + name() + "': root " +
                                std::to_string(root) + " is not a member; valid: 0.." +
                                std::to_string(size() - 1));
  if (count == 0) return;
  if (memory_of(data, name(), "broadcast") == Memory::kHost) {
    host_group_->broadcast(data, count, dtype, root);
    return;
  }
  enqueue(
      {"broadcast", count, elements_unit(dtype), &where_},
      [&] {
        PARAPLAN_NCCL_CHECK(
            name(), "broadcast", comm_,
            ncclBroadcast(data, data, count, nccl_type_of(dtype), root, comm_, comm_stream_));
      },
      Completion::kComputeWaits);
}

void NcclCommunicator::barrier() {
  const std::string& group = name();
  // Everything this rank queued before the barrier completes before it.
  PARAPLAN_COMM_CUDA_CHECK(group, "barrier", cudaStreamSynchronize(compute_stream_));
  PARAPLAN_COMM_CUDA_CHECK(group, "barrier", cudaStreamSynchronize(comm_stream_));
  retire_finished();
  host_group_->barrier();
}

void NcclCommunicator::wait_started_before(uint64_t mark) {
  retire_finished();
  // The comm stream runs in order: the last one started before the mark
  // finishing means the earlier ones did.
  const InFlight* last = nullptr;
  for (const InFlight& operation : in_flight_)
    if (operation.sequence < mark) last = &operation;
  if (last != nullptr)
    PARAPLAN_COMM_CUDA_CHECK(name(), "wait_started_before",
                             cudaStreamWaitEvent(compute_stream_, last->done, 0));
}

void NcclCommunicator::wait_pending() {
  retire_finished();
  if (in_flight_.empty()) return;
  // The comm stream runs in order: its last operation finishing means all did.
  PARAPLAN_COMM_CUDA_CHECK(name(), "wait_pending",
                           cudaStreamWaitEvent(compute_stream_, in_flight_.back().done, 0));
}

// ---------------------------------------------------------------- NcclPeerToPeer

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
  if (send_on_device || receive_on_device) {
    // Queued first: the host half below may block, the device half never does.
    world_.enqueue(
        {"pipeline send_receive",
         (send_on_device ? send_count : 0) + (receive_on_device ? receive_count : 0),
         elements_unit(dtype), &world_.where_, send_on_device ? send_to : -1,
         receive_on_device ? receive_from : -1},
        [&] {
          const std::string& group = world_.name();
          ncclComm_t comm = world_.comm_;
          cudaStream_t stream = world_.comm_stream_;
          const ncclDataType_t type = nccl_type_of(dtype);
          NcclGroup nccl_group(group, transfer, comm);
          if (send_on_device)
            PARAPLAN_NCCL_CHECK(group, transfer, comm,
                                ncclSend(send, send_count, type, send_to, comm, stream));
          if (receive_on_device)
            PARAPLAN_NCCL_CHECK(group, transfer, comm,
                                ncclRecv(receive, receive_count, type, receive_from, comm, stream));
          nccl_group.end();
        },
        NcclCommunicator::Completion::kComputeWaits);
  }
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
                                        kernels::DType dtype, int tag, void* buffer_free) {
  const bool sending = send != nullptr;
  const char* operation = sending ? "post_send" : "post_receive";
  if (peer < 0 || peer >= world_.size())
    throw std::invalid_argument(std::string(operation) + ": peer " + std::to_string(peer) +
                                " is not a world rank; valid: 0.." +
                                std::to_string(world_.size() - 1));
  PostedTransfer posted{next_id_++, nullptr, 0};
  if (memory_of(sending ? send : receive, "peers", operation) == Memory::kHost) {
    posted.host_id = sending ? host_peers_->post_send(send, count, peer, dtype, tag)
                             : host_peers_->post_receive(receive, count, peer, dtype, tag);
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
  return post(data, nullptr, count, to, dtype, tag, nullptr);
}

PeerToPeer::Posted NcclPeerToPeer::post_receive(void* data, size_t count, int from,
                                                kernels::DType dtype, int tag, void* buffer_free) {
  if (data == nullptr) throw std::invalid_argument("post_receive: no buffer");
  return post(nullptr, data, count, from, dtype, tag, buffer_free);
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
