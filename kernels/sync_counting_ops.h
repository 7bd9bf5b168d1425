// sync_counting_ops.h: an Ops decorator that counts host synchronizations —
// the calls that wait for the device (ops.h lists them: synchronize,
// copy_to_host, copy_from_host, sum_of_squares, check_deferred_errors) — and
// the bytes zero_bytes() fills, and forwards everything. The runtime wraps
// every rank's ops in one and reports the counts per step (`--log-json`,
// `replay`), so a synchronization, or a buffer zeroed, creeping into a step's
// inner loops shows up as a number that grows with the micro-batch or layer
// count.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/forwarding_ops.h"

namespace paraplan::kernels {

class SyncCountingOps final : public ForwardingOps {
 public:
  explicit SyncCountingOps(std::unique_ptr<Ops> inner) : ForwardingOps(std::move(inner)) {}

  // Host synchronizations since construction.
  uint64_t synchronizations() const { return synchronizations_; }
  // Bytes zeroed through zero_bytes() since construction.
  uint64_t bytes_zeroed() const { return bytes_zeroed_; }

  void synchronize() override {
    ++synchronizations_;
    ForwardingOps::synchronize();
  }
  void copy_to_host(void* host_destination, const void* source, size_t bytes) override {
    ++synchronizations_;
    ForwardingOps::copy_to_host(host_destination, source, bytes);
  }
  void copy_from_host(void* destination, const void* host_source, size_t bytes) override {
    ++synchronizations_;
    ForwardingOps::copy_from_host(destination, host_source, bytes);
  }
  double sum_of_squares(const void* x, size_t n) override {
    ++synchronizations_;
    return ForwardingOps::sum_of_squares(x, n);
  }
  void check_deferred_errors() override {
    ++synchronizations_;
    ForwardingOps::check_deferred_errors();
  }
  void zero_bytes(void* x, size_t bytes) override {
    bytes_zeroed_ += bytes;
    ForwardingOps::zero_bytes(x, bytes);
  }

 private:
  uint64_t synchronizations_ = 0;
  uint64_t bytes_zeroed_ = 0;
};

}  // namespace paraplan::kernels
