// optimizer.h: AdamW over a stage's parameter buffer, with gradient clipping by
// the global norm. Weight decay applies to matrices and embeddings only
// (GptLayout's weight_decay flag), as Megatron and nanoGPT do. The fp32 moments
// live in one buffer each, laid out like the parameters.
#pragma once

#include "kernels/ops.h"
#include "runtime/gpt_layout.h"
#include "runtime/memory_tracker.h"

namespace paraplan {

struct AdamWSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0 disables clipping
};

class AdamW {
 public:
  AdamW(const GptLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
        const AdamWSettings& settings);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  float* first_moment() { return first_moment_; }
  float* second_moment() { return second_moment_; }

  // The gradients' global L2 norm, before clipping.
  double gradient_norm(const float* gradients);
  // Scales gradients so their norm is at most grad_clip (torch's clip_grad_norm_
  // rule: factor grad_clip / (norm + 1e-6) when below 1).
  void clip(float* gradients, double norm);
  // One AdamW step; step counts from 1.
  void step(float* parameters, const float* gradients, float learning_rate, int step);

 private:
  const GptLayout& layout_;
  kernels::Ops& ops_;
  MemoryTracker& memory_;
  AdamWSettings settings_;
  float* first_moment_ = nullptr;
  float* second_moment_ = nullptr;
};

}  // namespace paraplan
