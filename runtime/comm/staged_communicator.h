// staged_communicator.h: device buffers over MPI through host staging memory,
// for ranks that share a GPU (NCCL refuses two ranks on one device) and builds
// without NCCL.
//
// Every call copies its device input to a pinned host buffer
// (Ops::copy_to_host), runs the host communicator's operation there, and
// copies the result back (Ops::copy_from_host); it returns when the result is
// in place. Only the Ops interface is used, so it works on every backend (the
// CPU backend's "device" is host memory: CI tests it that way). Results are
// bitwise those of the wrapped communicator on the same values, so with
// MpiCommunicator every determinism guarantee of mpi_communicator.h holds, for
// bf16 too: the bf16 bits are staged as they are, and the host group reduces
// them in fp32 and rounds once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"

namespace paraplan {

// Host memory from Ops::allocate_host (page-locked on CUDA), grown on demand
// and kept between calls, so a warm run allocates nothing. One is shared by
// every staged communicator and peer of a rank: their calls never overlap
// (each returns only when its copies are done, on the one thread that drives
// the ops).
class HostStaging {
 public:
  explicit HostStaging(kernels::Ops& ops) : ops_(ops) {}
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // At least `bytes` of host memory, aligned for double; its contents are not
  // kept when it grows.
  char* reserve(size_t bytes);
  size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  kernels::Ops& ops_;
  char* memory_ = nullptr;
  size_t capacity_bytes_ = 0;
};

class StagedCommunicator final : public Communicator {
 public:
  // host_group moves host buffers (an MpiCommunicator). staging may be shared
  // with the rank's other staged communicators; null makes a private one.
  StagedCommunicator(std::unique_ptr<Communicator> host_group, kernels::Ops& ops,
                     std::shared_ptr<HostStaging> staging = nullptr);

  int rank() const override { return host_group_->rank(); }
  int size() const override { return host_group_->size(); }
  const std::string& name() const override { return host_group_->name(); }

  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  // Staged sizes are count * dtype_bytes(dtype); the dtype goes to the host group.
  void all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void reduce_scatter(const void* send, void* receive, size_t chunk_count,
                      kernels::DType dtype) override;
  void all_gather(const void* send, void* receive, size_t chunk_count,
                  kernels::DType dtype) override;
  void broadcast(void* data, size_t count, kernels::DType dtype, int root) override;
  // Waits for this rank's queued device work first, so that after it every
  // member's work before the barrier is done.
  void barrier() override;

  Communicator& host_group() { return *host_group_; }
  size_t staging_bytes() const { return staging_->capacity_bytes(); }

 private:
  // Stages count elements of element_bytes each and runs reduce(host copy) on
  // them: the all-reduces of every dtype and of doubles.
  template <typename Reduce>
  void all_reduce_staged(void* data, size_t count, size_t element_bytes, Reduce&& reduce);

  std::unique_ptr<Communicator> host_group_;
  kernels::Ops& ops_;
  std::shared_ptr<HostStaging> staging_;
};

// Pipeline transfers of device buffers through host staging memory around a
// host PeerToPeer (MpiPeerToPeer): the send is copied out, both halves run on
// the host, the received message is copied in.
class StagedPeerToPeer final : public PeerToPeer {
 public:
  StagedPeerToPeer(std::unique_ptr<PeerToPeer> host_peers, kernels::Ops& ops,
                   std::shared_ptr<HostStaging> staging = nullptr);

  void send_receive(const void* send, size_t send_count, int send_to, void* receive,
                    size_t receive_count, int receive_from, kernels::DType dtype,
                    int tag = 0) override;

  // Posted halves each stage through a host buffer of their own, kept until
  // waited on: a send is copied out before it is posted, a receive copied in
  // when waited on.
  Posted post_send(const void* data, size_t count, int to, kernels::DType dtype,
                   int tag = 0) override;
  Posted post_receive(void* data, size_t count, int from, kernels::DType dtype, int tag = 0,
                      void* buffer_free = nullptr, Posted after_send = 0) override;
  void wait(Posted transfer) override;

 private:
  struct PostedTransfer {
    Posted id = 0;
    std::vector<char> host;  // the staged message
    void* device = nullptr;  // a receive's destination; null for a send
  };
  std::vector<char> take_buffer(size_t bytes);

  std::unique_ptr<PeerToPeer> host_peers_;
  kernels::Ops& ops_;
  std::shared_ptr<HostStaging> staging_;
  std::vector<PostedTransfer> posted_;    // not yet waited on; id: the host peers'
  std::vector<std::vector<char>> spare_;  // staging buffers of finished transfers
};

}  // namespace paraplan
