// nccl_communicator.cc: NcclCommunicator (NCCL on device buffers, ordered
// with the ops' compute stream by events, watched by the Watchdog). With
// nccl_peer_to_peer.cc and nccl_check.h, the only runtime files that include
// CUDA and NCCL headers.
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

#include "runtime/comm/nccl_check.h"
#include "runtime/comm/watchdog.h"

namespace paraplan {

namespace {

using nccl_check::Memory;
using nccl_check::memory_of;
using nccl_check::nccl_type_of;
using nccl_check::throw_cuda_error;
using nccl_check::throw_nccl_error;

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
    const int64_t free_before = nccl_check::free_device_bytes(group, "init");
    PARAPLAN_NCCL_CHECK(group, "init", nullptr, ncclCommInitRank(&comm, size(), id, rank()));
    comm_ = comm;
    device_bytes_ =
        std::max<int64_t>(0, free_before - nccl_check::free_device_bytes(group, "init"));
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
    // The buffers NCCL connects on first use are allocated in this call.
    const bool first_of_its_kind =
        measured_.insert({operation_name.operation, operation_name.unit, operation_name.count})
            .second;
    const int64_t free_before =
        first_of_its_kind ? nccl_check::free_device_bytes(group, operation) : 0;
    launch();
    if (first_of_its_kind)
      device_bytes_ +=
          std::max<int64_t>(0, free_before - nccl_check::free_device_bytes(group, operation));
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

}  // namespace paraplan
