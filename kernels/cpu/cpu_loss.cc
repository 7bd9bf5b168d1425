// cpu_loss.cc: softmax + cross-entropy for the CPU backend (kernels/ops.h):
// the fused op over a whole vocabulary, and the three steps of the
// vocab-parallel version, where each tensor-parallel rank holds a contiguous
// slice of the vocabulary and the caller all-reduces the per-row statistics.
// Both use the same exp (exp_approx) and the same fixed-order lane sums, so
// with one shard the steps reproduce the fused op bitwise.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.h"

namespace paraplan::kernels::cpu {

namespace {

// The local column of a target, or -1 when another shard owns it; 64-bit so
// target - vocab_start cannot overflow.
int64_t local_column(int32_t target, int vocab_start, int vocab_local) {
  const int64_t local = static_cast<int64_t>(target) - vocab_start;
  return local >= 0 && local < vocab_local ? local : -1;
}

}  // namespace

void softmax_cross_entropy(float* losses, float* dlogits, const float* logits,
                           const int32_t* targets, int rows, int vocab, float loss_scale) {
  for (int r = 0; r < rows; r++) {
    const float* logit_row = logits + static_cast<size_t>(r) * vocab;
    const int target = targets[r];
    if (target < 0 || target >= vocab) {
      throw std::out_of_range("softmax_cross_entropy: target " + std::to_string(target) +
                              " in row " + std::to_string(r) + " is outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
    }
    const float max_logit = max_of(logit_row, vocab);
    // Read the target logit before dlogits (which may alias logits) is written.
    const float target_shifted = logit_row[target] - max_logit;
    float exp_sum;
    if (dlogits == nullptr) {
      exp_sum = exp_sum_of<false>(nullptr, logit_row, max_logit, vocab);
    } else {
      // The unnormalised probabilities go straight into dlogits, so each exp is
      // computed once.
      float* dlogit_row = dlogits + static_cast<size_t>(r) * vocab;
      exp_sum = exp_sum_of<true>(dlogit_row, logit_row, max_logit, vocab);
      const float probability_scale = loss_scale / exp_sum;
      for (int v = 0; v < vocab; v++) dlogit_row[v] *= probability_scale;
      dlogit_row[target] -= loss_scale;
    }
    // -log(exp(shifted target) / exp_sum), without forming the probability,
    // so a tiny probability does not underflow to log(0).
    losses[r] = std::log(exp_sum) - target_shifted;
  }
}

void cross_entropy_shard_stats(float* row_max, float* target_logit, const float* logits,
                               const int32_t* targets, int rows, int vocab_local, int vocab_start) {
  for (int r = 0; r < rows; r++) {
    const float* logit_row = logits + static_cast<size_t>(r) * vocab_local;
    if (targets[r] < 0) {
      throw std::out_of_range("cross_entropy_shard_stats: target " + std::to_string(targets[r]) +
                              " in row " + std::to_string(r) + " is negative");
    }
    row_max[r] = max_of(logit_row, vocab_local);
    const int64_t local = local_column(targets[r], vocab_start, vocab_local);
    // 0 from the shards without the target, so the all-reduced sum is the logit.
    target_logit[r] = local >= 0 ? logit_row[local] : 0.0f;
  }
}

void cross_entropy_shard_exp_sums(float* exp_sum, const float* logits, const float* row_max,
                                  int rows, int vocab_local) {
  for (int r = 0; r < rows; r++) {
    const float* logit_row = logits + static_cast<size_t>(r) * vocab_local;
    exp_sum[r] = exp_sum_of<false>(nullptr, logit_row, row_max[r], vocab_local);
  }
}

void cross_entropy_shard_finish(float* losses, float* dlogits, const float* logits,
                                const int32_t* targets, const float* row_max, const float* exp_sum,
                                const float* target_logit, int rows, int vocab_local,
                                int vocab_start, float loss_scale) {
  for (int r = 0; r < rows; r++) {
    // Shift the target logit first, as the fused op does: the same rounding,
    // and no cancellation between two large terms.
    losses[r] = std::log(exp_sum[r]) - (target_logit[r] - row_max[r]);
    if (dlogits == nullptr) continue;
    const float* logit_row = logits + static_cast<size_t>(r) * vocab_local;
    float* dlogit_row = dlogits + static_cast<size_t>(r) * vocab_local;
    const float shift = row_max[r];
    const float probability_scale = loss_scale / exp_sum[r];
    scaled_exp(dlogit_row, logit_row, shift, probability_scale, vocab_local);
    const int64_t local = local_column(targets[r], vocab_start, vocab_local);
    if (local >= 0) dlogit_row[local] -= loss_scale;
  }
}

}  // namespace paraplan::kernels::cpu
