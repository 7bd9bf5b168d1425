// delayed_weight_gradient_ops.h: an Ops decorator that runs the weight
// gradients queued with linear_weight_gradients (kernels/ops.h) as late as
// a second stream could: held until the next join_weight_gradients(), then
// run in the order they were queued. A caller that writes their operands
// (dout, inp) or reads their outputs (the gradients) before it joins
// computes other bits than the same calls run at once, as the CPU backend
// runs them; so a CPU test comparing the two finds a join the CUDA
// backend's side stream would race past. Stricter than the contract:
// synchronize() and copy_to_host() do not run them either, so the joins
// alone must suffice, as they must where a communicator orders itself after
// the ops' stream by a mark (NCCL) rather than by a host wait. Test code only.
#pragma once

#include <memory>
#include <vector>

#include "kernels/forwarding_ops.h"

namespace paraplan::testing {

class DelayedWeightGradientOps final : public kernels::ForwardingOps {
 public:
  explicit DelayedWeightGradientOps(std::unique_ptr<kernels::Ops> inner)
      : ForwardingOps(std::move(inner)) {}
  ~DelayedWeightGradientOps() override { run_held(); }

  void linear_weight_gradients(void* dweight, void* dbias, const void* dout, const void* inp,
                               int rows, int in_features, int out_features) override {
    held_.push_back({dweight, dbias, dout, inp, rows, in_features, out_features});
    ++queued_;
  }
  void join_weight_gradients() override {
    ++joins_;
    run_held();
  }

  // Weight gradients queued and joins asked for, since construction.
  int queued() const { return queued_; }
  int joins() const { return joins_; }

 private:
  struct Held {
    void* dweight;
    void* dbias;
    const void* dout;
    const void* inp;
    int rows, in_features, out_features;
  };

  void run_held() {
    for (const Held& h : held_)
      ForwardingOps::linear_weight_gradients(h.dweight, h.dbias, h.dout, h.inp, h.rows,
                                             h.in_features, h.out_features);
    held_.clear();
  }

  std::vector<Held> held_;
  int queued_ = 0, joins_ = 0;
};

}  // namespace paraplan::testing
