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

}  // namespace paraplan::kernels
