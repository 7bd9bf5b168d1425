// forwarding_communicator.h: a Communicator that forwards every call to
// another (leveldb's EnvWrapper), so a decorator overrides only what it
// changes. Every operation passes through intercept(), with a description of
// the call: the timed and watched wrappers override that one method.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"

namespace paraplan {

// The forwarded call, by reference: no allocation (std::function would
// allocate for every tensor-parallel all-reduce of every layer). Valid for the
// intercept() call it is passed to.
class ForwardedCall {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, ForwardedCall>>>
  ForwardedCall(F&& call)  // NOLINT(google-explicit-constructor): passed as a lambda
      : object_(const_cast<void*>(static_cast<const void*>(&call))),
        invoke_([](void* object) { (*static_cast<std::remove_reference_t<F>*>(object))(); }) {}
  void operator()() const { invoke_(object_); }

 private:
  void* object_;
  void (*invoke_)(void*);
};

// One call of a communicator, as messages name it: "all_reduce" of 3072
// "floats", "reduce_scatter (gradient bucket)" of 512 "bf16 elements per
// rank", "barrier" of 0.
struct CommunicatorCall {
  const char* operation;
  size_t count;
  const char* unit;
};

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  using Communicator::all_gather;
  using Communicator::all_reduce;
  using Communicator::broadcast;
  using Communicator::reduce_scatter;

  void all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) override;
  void all_reduce(double* data, size_t count, ReduceOp op) override;
  void reduce_scatter(const void* send, void* receive, size_t chunk_count,
                      kernels::DType dtype) override;
  void all_gather(const void* send, void* receive, size_t chunk_count,
                  kernels::DType dtype) override;
  void broadcast(void* data, size_t count, kernels::DType dtype, int root) override;
  void barrier() override;
  void start_all_reduce(void* data, size_t count, kernels::DType dtype) override;
  void start_reduce_scatter(const void* send, void* receive, size_t chunk_count,
                            kernels::DType dtype) override;
  void start_all_gather(const void* send, void* receive, size_t chunk_count,
                        kernels::DType dtype) override;
  void wait_pending() override;
  uint64_t started_mark() override { return inner_->started_mark(); }
  void wait_started_before(uint64_t mark) override;

  Communicator& inner() { return *inner_; }

 protected:
  // Runs `forward` (the call on the inner communicator); the default does
  // nothing else.
  virtual void intercept(const CommunicatorCall& call, ForwardedCall forward) {
    (void)call;
    forward();
  }

 private:
  std::unique_ptr<Communicator> inner_;
};

// The same for pipeline transfers.
struct TransferCall {
  const char* operation;  // "pipeline send", "pipeline receive", "pipeline send and receive"
  size_t count;           // elements moved, both halves
  const char* unit;
  int send_to, receive_from;  // world ranks, -1 for a skipped half
};

class ForwardingPeerToPeer : public PeerToPeer {
 public:
  explicit ForwardingPeerToPeer(std::unique_ptr<PeerToPeer> inner) : inner_(std::move(inner)) {}
  void send_receive(const void* send, size_t send_count, int send_to, void* receive,
                    size_t receive_count, int receive_from, kernels::DType dtype,
                    int tag = 0) override;
  Posted post_send(const void* data, size_t count, int to, kernels::DType dtype,
                   int tag = 0) override;
  Posted post_receive(void* data, size_t count, int from, kernels::DType dtype, int tag = 0,
                      void* buffer_free = nullptr, Posted after_send = 0) override;
  // Intercepted as the transfer it waits for ("pipeline wait for a posted
  // send", its count and peer).
  void wait(Posted transfer) override;

 protected:
  virtual void intercept(const TransferCall& call, ForwardedCall forward) {
    (void)call;
    forward();
  }

 private:
  std::unique_ptr<PeerToPeer> inner_;
  std::vector<std::pair<Posted, TransferCall>> posted_;  // what each wait waits for
};

}  // namespace paraplan
