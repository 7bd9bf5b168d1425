// local_communicator.h: the communicator of a one-member group. Collectives
// are copies or nothing, so a run without mpirun needs no MPI at all
// (parallel/parallel_state.h builds every group of a one-rank job from it).
#pragma once

#include <stdexcept>
#include <string>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"

namespace paraplan {

// Copies between distinct buffers go through ops, so they work on any
// backend's memory.
class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::string name, kernels::Ops& ops) : name_(std::move(name)), ops_(ops) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;
  void all_reduce(void*, size_t, kernels::DType, ReduceOp) override {}
  void all_reduce(double*, size_t, ReduceOp) override {}
  void reduce_scatter(const void* send, void* receive, size_t chunk_count,
                      kernels::DType dtype) override {
    if (send != receive) ops_.copy(receive, send, chunk_count * kernels::dtype_bytes(dtype));
  }
  void all_gather(const void* send, void* receive, size_t chunk_count,
                  kernels::DType dtype) override {
    if (send != receive) ops_.copy(receive, send, chunk_count * kernels::dtype_bytes(dtype));
  }
  void broadcast(void*, size_t, kernels::DType, int) override {}
  void barrier() override {}

 private:
  std::string name_;
  kernels::Ops& ops_;
};

class NoPeers final : public PeerToPeer {
 public:
  void send_receive(const void*, size_t, int, void*, size_t, int, kernels::DType,
                    int = 0) override {
    throw std::logic_error("a one-rank job has no pipeline neighbours to talk to");
  }
  Posted post_send(const void*, size_t, int, kernels::DType, int = 0) override {
    throw std::logic_error("a one-rank job has no pipeline neighbours to send to");
  }
  Posted post_receive(void*, size_t, int, kernels::DType, int = 0, void* = nullptr,
                      Posted = 0) override {
    throw std::logic_error("a one-rank job has no pipeline neighbours to receive from");
  }
  void wait(Posted) override {
    throw std::logic_error("a one-rank job has no pipeline transfers to wait for");
  }
};

}  // namespace paraplan
