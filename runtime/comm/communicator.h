// communicator.h: collective and point-to-point communication for the runtime,
// and the process groups of a plan's mesh.
//
// The runtime is written against Communicator only: the MPI implementation
// (mpi_communicator.cc) moves host buffers; the NCCL one (nccl_communicator.cc)
// device buffers; the staged one (staged_communicator.cc) device buffers
// through host copies and MPI, for ranks that share a GPU; transport.h picks.
// Contract of every implementation:
// - all_reduce gives every member bitwise the same result, and the same
//   inputs always give the same result (fixed reduction order), so replicas
//   that start equal stay equal. (MPI and staged: rank order, so bucketing
//   and ZeRO-1 are bitwise invisible. NCCL: its own order, fixed while it
//   picks the same algorithm; NCCL_ALGO / NCCL_PROTO pin it.)
// - Errors and timeouts end the job naming the group and the operation
//   (exceptions, or the Watchdog of watchdog.h for calls that never return).
// - Calls are collective over the group: every member calls the same
//   operations in the same order with the same counts.
// - Buffers hold count elements of a DType (kernels/dtype.h): fp32, or bf16
//   for mixed-precision weights, activations and gradients. A bf16 sum is
//   computed in fp32 and rounded once to bf16 (MPI and staged: in rank order;
//   NCCL: its own, with its own intermediate rounding). The float overloads
//   are shorthand for DType::kFloat32.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace paraplan {

enum class ReduceOp { kSum, kMax };

// How error and watchdog messages count elements of a dtype ("all_reduce of
// 3072 bf16 elements"), and the per-member chunks of reduce_scatter and
// all_gather.
inline const char* elements_unit(kernels::DType dtype) {
  return dtype == kernels::DType::kBFloat16 ? "bf16 elements" : "floats";
}
inline const char* elements_per_rank_unit(kernels::DType dtype) {
  return dtype == kernels::DType::kBFloat16 ? "bf16 elements per rank" : "floats per rank";
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // within this group
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "world", "tensor", "data", "zero", ...

  // In place over count elements.
  virtual void all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) = 0;
  virtual void all_reduce(double* data, size_t count, ReduceOp op) = 0;
  // send holds size() chunks of chunk_count; member r receives the sum of
  // everyone's chunk r: bitwise the slice of all_reduce's result (MPI and
  // staged; for bf16 too, as both sum in fp32 and round once).
  virtual void reduce_scatter(const void* send, void* receive, size_t chunk_count,
                              kernels::DType dtype) = 0;
  // Every member contributes chunk_count elements; receive holds size()
  // chunks in rank order. send may be receive + rank() * chunk_count (in place).
  virtual void all_gather(const void* send, void* receive, size_t chunk_count,
                          kernels::DType dtype) = 0;
  virtual void broadcast(void* data, size_t count, kernels::DType dtype, int root) = 0;
  virtual void barrier() = 0;

  // Deferred operations, for gradient buckets reduced while backward still
  // runs: a start_* call may return before its result is ready, and its
  // buffers must stay untouched until wait_pending(), after which everything
  // started earlier is complete (on a device: ordered before the ops' later
  // work). Same results as the blocking calls. The defaults run them at once.
  virtual void start_all_reduce(void* data, size_t count, kernels::DType dtype) {
    all_reduce(data, count, dtype, ReduceOp::kSum);
  }
  virtual void start_reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                    kernels::DType dtype) {
    reduce_scatter(send, receive, chunk_count, dtype);
  }
  virtual void start_all_gather(const void* send, void* receive, size_t chunk_count,
                                kernels::DType dtype) {
    all_gather(send, receive, chunk_count, dtype);
  }
  virtual void wait_pending() {}
  // A mark of the operations started so far, and a wait for those started
  // before a mark only (wait_pending's guarantee, for them): a pool of
  // buffers takes back its oldest while newer ones still reduce. The
  // default waits for everything.
  virtual uint64_t started_mark() { return 0; }
  virtual void wait_started_before(uint64_t /*mark*/) { wait_pending(); }

  // fp32 shorthand. (Implementations add `using Communicator::all_reduce;` and
  // so on, so that their overrides do not hide these.)
  void all_reduce(float* data, size_t count, ReduceOp op) {
    all_reduce(data, count, kernels::DType::kFloat32, op);
  }
  void reduce_scatter(const float* send, float* receive, size_t chunk_count) {
    reduce_scatter(send, receive, chunk_count, kernels::DType::kFloat32);
  }
  void all_gather(const float* send, float* receive, size_t chunk_count) {
    all_gather(send, receive, chunk_count, kernels::DType::kFloat32);
  }
  void broadcast(float* data, size_t count, int root) {
    broadcast(data, count, kernels::DType::kFloat32, root);
  }
};

// Point-to-point transfers between world ranks (the pipeline neighbours).
// send_receive posts both halves at once and returns when both completed, so
// two neighbours that send to each other never deadlock, whatever the sizes.
// A peer of -1 skips that half. Counts are elements of dtype. A message
// matches only a receive of the same tag (0 <= tag < kMaxPeerTags): the
// pipeline gives each link between virtual stages its own, so two model
// chunks' transfers between the same ranks never match each other. Between
// two ranks, messages of one tag match in the order they are posted (NCCL,
// which has no tags, matches all of them so).
//
// Posted transfers (plan.fbs Transfers.Posted), one half each: post_send and
// post_receive start it and return at once; wait(id) returns once it is
// done: a send's buffer may be written again, a receive's data is in its
// buffer (on a device: for the work queued after the call). Every posted
// transfer is waited on exactly once; receives of one peer and tag are
// matched in the order posted, whatever order they are waited on.
// A receive into device memory may start writing its buffer once the work
// queued before `buffer_free` (an Ops mark: the last work that read the
// buffer) is done; null: once all the work queued so far is done. And where
// `after_send` names a send posted here and not yet waited on, whose buffer
// the receive writes (a pipeline chunk's one gradient buffer), only once that
// send has read it: on a device the receive then need not wait for compute
// queued after the buffer's last use. The send is still waited on as usual.
class PeerToPeer {
 public:
  static constexpr int kMaxPeerTags = 4096;
  using Posted = uint64_t;
  virtual ~PeerToPeer() = default;
  virtual void send_receive(const void* send, size_t send_count, int send_to, void* receive,
                            size_t receive_count, int receive_from, kernels::DType dtype,
                            int tag = 0) = 0;
  virtual Posted post_send(const void* data, size_t count, int to, kernels::DType dtype,
                           int tag = 0) = 0;
  virtual Posted post_receive(void* data, size_t count, int from, kernels::DType dtype, int tag = 0,
                              void* buffer_free = nullptr, Posted after_send = 0) = 0;
  virtual void wait(Posted transfer) = 0;
};

// The entry of an implementation's posted transfers (each with an `id`)
// that `transfer` names; throws if there is none (never posted, or waited
// on already).
template <typename Entry>
typename std::vector<Entry>::iterator find_posted(std::vector<Entry>& posted,
                                                  PeerToPeer::Posted transfer) {
  const auto it = std::find_if(posted.begin(), posted.end(),
                               [transfer](const Entry& entry) { return entry.id == transfer; });
  if (it == posted.end())
    throw std::logic_error("peers: wait on transfer " + std::to_string(transfer) +
                           ", which is not posted (or was waited on already)");
  return it;
}

}  // namespace paraplan
