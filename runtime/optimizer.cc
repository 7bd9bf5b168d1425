// optimizer.cc: AdamW with per-tensor weight decay and global-norm clipping.
#include "runtime/optimizer.h"

#include <cmath>

namespace paraplan {

AdamW::AdamW(const GptLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
             const AdamWSettings& settings)
    : layout_(layout), ops_(ops), memory_(memory), settings_(settings) {
  const size_t bytes = layout.num_elements() * sizeof(float);
  first_moment_ = static_cast<float*>(memory.allocate(bytes, MemoryCategory::kOptimizerState));
  second_moment_ = static_cast<float*>(memory.allocate(bytes, MemoryCategory::kOptimizerState));
  ops.fill_zero(first_moment_, layout.num_elements());
  ops.fill_zero(second_moment_, layout.num_elements());
}

AdamW::~AdamW() {
  memory_.release(first_moment_);
  memory_.release(second_moment_);
}

double AdamW::gradient_norm(const float* gradients) {
  return std::sqrt(ops_.sum_of_squares(gradients, layout_.num_elements()));
}

void AdamW::clip(float* gradients, double norm) {
  if (settings_.grad_clip <= 0) return;
  const double factor = settings_.grad_clip / (norm + 1e-6);
  if (factor < 1.0) ops_.scale(gradients, static_cast<float>(factor), layout_.num_elements());
}

void AdamW::step(float* parameters, const float* gradients, float learning_rate, int step) {
  for (const ParameterTensor& tensor : layout_.tensors()) {
    const float decay = tensor.weight_decay ? settings_.weight_decay : 0.0f;
    ops_.adamw(parameters + tensor.offset, gradients + tensor.offset, first_moment_ + tensor.offset,
               second_moment_ + tensor.offset, tensor.size, learning_rate, settings_.beta1,
               settings_.beta2, settings_.epsilon, decay, step);
  }
}

}  // namespace paraplan
