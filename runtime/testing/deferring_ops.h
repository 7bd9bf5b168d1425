// deferring_ops.h: an Ops decorator that reports bad loss targets as the CUDA
// backend does, late: the losses' std::out_of_range (thrown at once by the
// CPU backend) is kept and thrown by the next check_deferred_errors(), and
// the op carries on as the CUDA kernels do (the row's loss left as it was).
// So a CPU test sees what a GPU run would do between the bad target and its
// report (an optimizer step, say): adamw_runs changes nothing meanwhile, as
// the CUDA kernel does. Test code only.
#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/forwarding_ops.h"

namespace paraplan::testing {

class DeferringOps final : public kernels::ForwardingOps {
 public:
  explicit DeferringOps(std::unique_ptr<kernels::Ops> inner) : ForwardingOps(std::move(inner)) {}

  void softmax_cross_entropy(float* losses, void* dlogits, const void* logits,
                             const int32_t* targets, int rows, int vocab, float loss_scale,
                             double* loss_sum) override {
    defer([&] {
      ForwardingOps::softmax_cross_entropy(losses, dlogits, logits, targets, rows, vocab,
                                           loss_scale, loss_sum);
    });
  }
  void cross_entropy_shard_stats(float* row_max, float* target_logit, const void* logits,
                                 const int32_t* targets, int rows, int vocab_local,
                                 int vocab_start) override {
    defer([&] {
      ForwardingOps::cross_entropy_shard_stats(row_max, target_logit, logits, targets, rows,
                                               vocab_local, vocab_start);
    });
  }
  // As the CUDA kernel does: no update while an error waits to be reported.
  void adamw_runs(const std::vector<kernels::AdamWRun>& runs, bool float_gradients,
                  const kernels::AdamWStep& hyperparameters,
                  const kernels::GradientClip& clip) override {
    if (!error_) ForwardingOps::adamw_runs(runs, float_gradients, hyperparameters, clip);
  }
  void check_deferred_errors() override {
    ForwardingOps::check_deferred_errors();
    if (!error_) return;
    const std::string message = *error_;
    error_.reset();
    throw std::out_of_range(message);
  }

 private:
  template <typename Call>
  void defer(Call call) {
    try {
      call();
    } catch (const std::out_of_range& error) {
      if (!error_) error_ = error.what();  // the first, as the CUDA backend keeps it
    }
  }

  std::optional<std::string> error_;
};

}  // namespace paraplan::testing
