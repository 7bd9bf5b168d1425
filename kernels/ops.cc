// ops.cc: backend-independent parts of the op set.
#include "kernels/ops.h"

#include <cmath>

namespace paraplan::kernels {

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
  }
  return "unknown";
}

float adamw_bias_correction(float beta, int step) {
  return static_cast<float>(1.0 - std::pow(double{beta}, step));
}

void Ops::linear_residual_forward(void* out, const void* inp, const void* weight, const void* bias,
                                  const void* residual, int rows, int in_features,
                                  int out_features) {
  linear_forward(out, inp, weight, bias, rows, in_features, out_features);
  residual_forward(out, out, residual, static_cast<size_t>(rows) * out_features);
}

void Ops::linear_gelu_forward(void* pre_gelu, void* out, const void* inp, const void* weight,
                              const void* bias, int rows, int in_features, int out_features) {
  linear_forward(pre_gelu, inp, weight, bias, rows, in_features, out_features);
  gelu_forward(out, pre_gelu, static_cast<size_t>(rows) * out_features);
}

void Ops::linear_backward_gelu(void* dpre_gelu, const void* dout, const void* weight,
                               const void* pre_gelu, int rows, int in_features, int out_features) {
  linear_backward(dpre_gelu, nullptr, nullptr, dout, nullptr, weight, rows, in_features,
                  out_features, GradientWrite::kOverwrite);
  // In place: gelu_backward is elementwise, each element read before it is written.
  gelu_backward(dpre_gelu, pre_gelu, dpre_gelu, static_cast<size_t>(rows) * in_features,
                GradientWrite::kOverwrite);
}

void Ops::linear_weight_gradients(void* dweight, void* dbias, const void* dout, const void* inp,
                                  int rows, int in_features, int out_features) {
  linear_backward(nullptr, dweight, dbias, dout, inp, nullptr, rows, in_features, out_features,
                  GradientWrite::kAccumulate);
}

float clip_scale(double sum_of_squares, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double factor = max_norm / (std::sqrt(sum_of_squares) + 1e-6);
  return factor < 1.0 ? static_cast<float>(factor) : 1.0f;
}

}  // namespace paraplan::kernels
