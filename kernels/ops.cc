// ops.cc: backend-independent parts of the op set.
#include "kernels/ops.h"

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

}  // namespace paraplan::kernels
