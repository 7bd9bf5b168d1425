// cuda_unavailable.cc: the CUDA entry points of ops.h when paraplan was built
// without nvcc. Asking for CUDA then fails with a clear message.
#include <stdexcept>
#include <string>

#include "kernels/ops.h"

namespace paraplan::kernels {

int cuda_device_count() {
  return 0;
}

void cuda_profiler_range(bool) {}

bool cuda_cudnn_available(std::string* description) {
  if (description != nullptr) *description = "this paraplan was built without CUDA";
  return false;
}

bool cuda_connections_defaulted() {
  return false;
}

std::unique_ptr<Ops> make_cuda_ops(int, DType) {
  throw std::runtime_error(
      "backend 'cuda' requested, but this paraplan was built without CUDA (nvcc was not found "
      "at configure time); use --backend cpu or rebuild on a machine with the CUDA toolkit");
}

}  // namespace paraplan::kernels
