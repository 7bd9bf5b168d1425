// timed_communicator.h: a Communicator that forwards to another and adds the
// wall time of every call to a counter, so replay can split an instruction's
// time into compute and the collectives inside it (the tensor-parallel
// all-reduces of a forward, the ZeRO-1 all-gather of an optimizer step).
#pragma once

#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace paraplan {

class TimedCommunicator final : public Communicator {
 public:
  // Adds seconds spent in each call to *seconds (which must outlive this).
  TimedCommunicator(std::unique_ptr<Communicator> inner, double* seconds);

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

 private:
  template <typename Call>
  void timed(Call&& call);

  std::unique_ptr<Communicator> inner_;
  double* seconds_;
};

// Replaces `group` (when not null) by a TimedCommunicator around it.
void time_communicator(std::unique_ptr<Communicator>& group, double* seconds);

}  // namespace paraplan
