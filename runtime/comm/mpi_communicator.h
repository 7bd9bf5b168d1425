// mpi_communicator.h: the MPI implementation of Communicator and PeerToPeer (host
// buffers). The MPI session (init, finalize, abort) is mpi_session.h; the
// groups of a plan's mesh are made in parallel/parallel_state.cc.
//
// Determinism: all_reduce and reduce_scatter reduce every element at exactly one
// rank, adding the members' contributions in group rank order (0, 1, ..., n-1),
// whatever Open MPI's tuned algorithms would pick. So all members get bitwise the
// same all_reduce result, runs repeat bitwise, and reduce_scatter returns exactly
// the slice all_reduce would (ZeRO-1 and plain data parallelism agree bitwise).
// bf16 travels as 16-bit elements and is reduced in fp32: each member's value
// widened, summed (or maxed) in that same rank order, and rounded once to bf16
// (ties to even), so the result is the fp32 rank-order sum of the widened
// inputs, rounded once.
#pragma once

// The C API only: Open MPI's mpi.h otherwise declares its deprecated C++
// bindings in C++ code, which need libmpi_cxx at link time.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"

namespace paraplan {

// Throws std::runtime_error "MPI <operation> on group '<group>' failed: <MPI's
// error string>".
[[noreturn]] void throw_mpi_error(const std::string& group, const std::string& operation, int code);

// Every MPI call goes through this (with MPI_ERRORS_RETURN set on the
// communicator): a failure throws naming the group, the operation and MPI's own
// description of the error.
#define PARAPLAN_MPI_CHECK(group, operation, call)                                              \
  do {                                                                                          \
    const int mpi_status_ = (call);                                                             \
    if (mpi_status_ != MPI_SUCCESS) ::paraplan::throw_mpi_error(group, operation, mpi_status_); \
  } while (0)

// A group over an MPI communicator. Counts above INT_MAX are split into several
// MPI calls. Every operation is started non-blocking and waited for by
// polling that sleeps once the wait outlasts a couple of milliseconds, so a
// rank waiting for a stalled peer does not hold a core.
class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of comm (freed in the destructor) and sets MPI_ERRORS_RETURN
  // on it, so failures become std::runtime_error naming name and the operation.
  MpiCommunicator(MPI_Comm comm, std::string name);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  // Reduce-scatter of equal chunks (count padded to a multiple of size()) by an
  // all-to-all, each chunk summed (or maxed) at its owner in rank order, then an
  // all-gather. kMax propagates NaN.
  void all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void reduce_scatter(const void* send, void* receive, size_t chunk_count,
                      kernels::DType dtype) override;
  void all_gather(const void* send, void* receive, size_t chunk_count,
                  kernels::DType dtype) override;
  void broadcast(void* data, size_t count, kernels::DType dtype, int root) override;
  void barrier() override;

  MPI_Comm handle() const { return comm_; }
  // The members' ranks in MPI_COMM_WORLD, in this group's rank order.
  std::vector<int> world_ranks() const;

  // A duplicate of MPI_COMM_WORLD named "world" (MPI must be initialised).
  static std::unique_ptr<MpiCommunicator> world();
  // MPI_Comm_split, collective over this group: the members passing the same
  // color form a group ordered by key; color kNotInGroup returns nullptr.
  static constexpr int kNotInGroup = -1;
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::string name) const;

  // The largest count per member one MPI call is given, in elements of the
  // call's dtype (default INT_MAX, the most MPI's int counts hold; bf16 goes as
  // MPI_UINT16_T, so its counts are elements too); larger operations run as
  // several calls. Tests
  // make it tiny to exercise that splitting without 8 GiB buffers. Must be the
  // same on every member.
  void set_max_elements_per_call(size_t elements);

 private:
  // T is the element that travels: float, double, or uint16_t for bf16
  // (reduced in fp32, see reduce_bfloat16_in_rank_order).
  template <typename T>
  void all_reduce_in_order(T* data, size_t count, ReduceOp op);
  template <typename T>
  void reduce_scatter_in_order(const T* send, T* receive, size_t chunk_count);
  // Elements per member per all-to-all: the call limit, and a bound on staging
  // memory (2^24 elements over all members).
  size_t staging_piece() const;
  // Scratch for the reductions, kept between calls so that the all-reduces
  // of every layer and micro-batch allocate nothing once warm. Three regions
  // (staging, received, reduced) of elements of T each.
  template <typename T>
  void reserve_workspace(size_t staging, size_t received, size_t reduced, T** staging_out,
                         T** received_out, T** reduced_out);

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  int rank_ = 0, size_ = 1;
  size_t max_elements_per_call_ = 2147483647;  // INT_MAX
  std::vector<double> workspace_;              // double-aligned for both float and double
};

// Pipeline transfers between world ranks over a private duplicate of
// MPI_COMM_WORLD. One tag serves activations and gradients: between an ordered
// pair (a, b) only one kind ever flows (a -> b is activations when b is a's next
// stage, gradients when b is its previous), and MPI never reorders messages of
// one (source, tag, communicator), so the k-th send matches the k-th receive.
class MpiPeerToPeer : public PeerToPeer {
 public:
  // Takes ownership of comm, a duplicate of MPI_COMM_WORLD.
  explicit MpiPeerToPeer(MPI_Comm comm);
  // Over a duplicate of MPI_COMM_WORLD: peers are world ranks.
  static std::unique_ptr<MpiPeerToPeer> over_world();
  ~MpiPeerToPeer() override;
  MpiPeerToPeer(const MpiPeerToPeer&) = delete;
  MpiPeerToPeer& operator=(const MpiPeerToPeer&) = delete;

  // Posts the send (MPI_Isend), then matches and receives the incoming message
  // (MPI_Improbe + MPI_Imrecv, which checks its length before receiving it), then
  // waits for the send. Every wait polls without holding a core (see
  // MpiCommunicator). Throws if a peer is outside the world or the message
  // received is not receive_count elements of dtype. Elements go as MPI_FLOAT
  // or MPI_UINT16_T (bf16 bits, moved exactly).
  void send_receive(const void* send, size_t send_count, int send_to, void* receive,
                    size_t receive_count, int receive_from, kernels::DType dtype,
                    int tag = 0) override;

  // A posted send is its MPI_Isend-s, waited on by wait(). A posted receive
  // is matched and received (checked as above) when it is waited on, after
  // every receive posted before it from the same peer and tag, or earlier:
  // while this rank waits on any transfer, each posted receive whose message
  // has arrived lands. Above the eager limit MPI moves a send's data only
  // once its receive is matched; so a send is done once its receive is
  // posted and its rank waits on anything (plan.fbs Transfers, as under
  // NCCL), not only once that rank waits on that receive, which could be
  // behind a wait for a send of its own.
  Posted post_send(const void* data, size_t count, int to, kernels::DType dtype,
                   int tag = 0) override;
  Posted post_receive(void* data, size_t count, int from, kernels::DType dtype, int tag = 0,
                      void* buffer_free = nullptr, Posted after_send = 0) override;
  void wait(Posted transfer) override;

  // Elements of the transfer's dtype per message at most (default INT_MAX);
  // larger transfers go as several messages. Tests make it small. Must match on
  // both sides.
  void set_max_elements_per_message(size_t elements);

 private:
  struct Pending {
    Posted id = 0;
    bool send = false;
    std::vector<MPI_Request> requests;  // a send's
    void* data = nullptr;               // a receive's
    size_t count = 0;
    int peer = -1, tag = 0;
    kernels::DType dtype = kernels::DType::kFloat32;
    // Done before its wait: a receive that landed (a later one's wait, or
    // land_arrived_receives), a send finished for a receive after it.
    bool finished = false;
  };
  void check_peer(int peer, int tag, const char* operation) const;
  std::string describe(bool send, size_t count, int peer, kernels::DType dtype, int tag) const;
  std::vector<MPI_Request> start_sends(const void* data, size_t count, int to, kernels::DType dtype,
                                       int tag, const std::string& transfer);
  // Receives; returns what was wrong with the message's length ("" if nothing).
  std::string receive_messages(void* data, size_t count, int from, kernels::DType dtype, int tag,
                               const std::string& transfer);
  // Waits for the sends, landing arrived receives meanwhile.
  void wait_sends(std::vector<MPI_Request>& requests, const std::string& transfer);
  // Receives each posted receive whose message has arrived, in posting order
  // per peer and tag, but none from receiving_peer with receiving_tag (the
  // receive under way, if any: its next message is its own); a no-op inside
  // itself (a landing receive waiting for its message's later parts).
  void land_arrived_receives(int receiving_peer, int receiving_tag);
  void finish(Pending& pending);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  size_t max_elements_per_message_ = 2147483647;  // INT_MAX
  std::vector<Pending> pending_;                  // posted, not yet waited on, in posting order
  bool landing_ = false;                          // inside land_arrived_receives
  Posted next_id_ = 1;
};

}  // namespace paraplan
