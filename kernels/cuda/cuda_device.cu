// cuda_device.cu: CUDA device discovery for ops.h. The CUDA op set itself
// (cuBLAS GEMMs, fused kernels) is the CUDA-backend issue's; until it lands,
// asking for the CUDA backend fails with a message saying so.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/ops.h"

namespace paraplan::kernels {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

std::unique_ptr<Ops> make_cuda_ops(int device) {
  const int count = cuda_device_count();
  if (count == 0)
    throw std::runtime_error("backend 'cuda' requested, but no CUDA device is visible");
  if (device < 0 || device >= count)
    throw std::runtime_error("CUDA device " + std::to_string(device) + " requested; " +
                             std::to_string(count) + " visible");
  throw std::runtime_error(
      "backend 'cuda': the CUDA op set is not implemented in this build yet; use --backend cpu");
}

}  // namespace paraplan::kernels
