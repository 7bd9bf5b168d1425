// timed_communicator.cc: wall-time accounting around a Communicator.
#include "runtime/timed_communicator.h"

#include <chrono>

namespace paraplan {

TimedCommunicator::TimedCommunicator(std::unique_ptr<Communicator> inner, double* seconds)
    : inner_(std::move(inner)), seconds_(seconds) {}

template <typename Call>
void TimedCommunicator::timed(Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  call();
  *seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void TimedCommunicator::all_reduce(void* data, size_t count, kernels::DType dtype, ReduceOp op) {
  timed([&] { inner_->all_reduce(data, count, dtype, op); });
}
void TimedCommunicator::all_reduce(double* data, size_t count, ReduceOp op) {
  timed([&] { inner_->all_reduce(data, count, op); });
}
void TimedCommunicator::reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                       kernels::DType dtype) {
  timed([&] { inner_->reduce_scatter(send, receive, chunk_count, dtype); });
}
void TimedCommunicator::all_gather(const void* send, void* receive, size_t chunk_count,
                                   kernels::DType dtype) {
  timed([&] { inner_->all_gather(send, receive, chunk_count, dtype); });
}
void TimedCommunicator::broadcast(void* data, size_t count, kernels::DType dtype, int root) {
  timed([&] { inner_->broadcast(data, count, dtype, root); });
}
void TimedCommunicator::barrier() {
  timed([&] { inner_->barrier(); });
}
// Deferred calls count the host time they block (all of it for MPI, the launch
// for NCCL) and the wait.
void TimedCommunicator::start_all_reduce(void* data, size_t count, kernels::DType dtype) {
  timed([&] { inner_->start_all_reduce(data, count, dtype); });
}
void TimedCommunicator::start_reduce_scatter(const void* send, void* receive, size_t chunk_count,
                                             kernels::DType dtype) {
  timed([&] { inner_->start_reduce_scatter(send, receive, chunk_count, dtype); });
}
void TimedCommunicator::start_all_gather(const void* send, void* receive, size_t chunk_count,
                                         kernels::DType dtype) {
  timed([&] { inner_->start_all_gather(send, receive, chunk_count, dtype); });
}
void TimedCommunicator::wait_pending() {
  timed([&] { inner_->wait_pending(); });
}

void time_communicator(std::unique_ptr<Communicator>& group, double* seconds) {
  if (group) group = std::make_unique<TimedCommunicator>(std::move(group), seconds);
}

}  // namespace paraplan
