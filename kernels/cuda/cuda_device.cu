// cuda_device.cu: CUDA device discovery for ops.h (cuda_device_count) and the
// CUDA backend's factory make_cuda_ops: picks the device (device % count, so a
// local rank maps onto the visible devices), passes on the storage dtype
// (fp32 or bf16), and picks the precision of fp32 GEMMs: TF32 tensor-core
// math by default (PyTorch's allow_tf32 for matmuls), PARAPLAN_CUDA_TF32=0 for
// strict fp32. (bf16 GEMMs always accumulate in fp32; the variable is still
// checked, so a typo fails whatever the dtype.) And the attention kernels:
// by default bf16 storage runs the tensor-core flash attention where it
// applies (head_dim 64 or 128, cuda_attention_tensor_core.cu);
// PARAPLAN_CUDA_ATTENTION=fma forces the fp32 FMA kernels everywhere. And
// GPT-2's MLP GELU: by default in the GEMMs' epilogues (cuBLASLt GELU_AUX_BIAS
// and DGELU); PARAPLAN_CUDA_GELU_EPILOGUE=0 runs the GELU kernels instead (the
// before of a before/after, or a cuBLASLt that misbehaves). The variables
// are read once, when the Ops object is made. The op set itself is in
// cuda_ops.cu.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_kernels.cuh"
#include "kernels/ops.h"

namespace paraplan::kernels {

namespace {

// PARAPLAN_CUDA_TF32: unset, 1, true, on -> TF32 allowed; 0, false, off -> strict fp32.
bool tf32_allowed() {
  const char* value = std::getenv("PARAPLAN_CUDA_TF32");
  if (value == nullptr) return true;
  const std::string text(value);
  if (text.empty() || text == "1" || text == "true" || text == "on") return true;
  if (text == "0" || text == "false" || text == "off") return false;
  throw std::runtime_error("PARAPLAN_CUDA_TF32='" + text +
                           "' is not understood; use 1 (TF32 GEMMs, the default) or 0 (strict "
                           "fp32 GEMMs)");
}

// PARAPLAN_CUDA_ATTENTION: unset, empty or auto -> tensor cores for bf16
// where they apply; fma -> the FMA kernels for everything.
bool tensor_core_attention_allowed() {
  const char* value = std::getenv("PARAPLAN_CUDA_ATTENTION");
  if (value == nullptr) return true;
  const std::string text(value);
  if (text.empty() || text == "auto") return true;
  if (text == "fma") return false;
  throw std::runtime_error("PARAPLAN_CUDA_ATTENTION='" + text +
                           "' is not understood; use auto (bf16 tensor-core attention where it "
                           "applies, the default) or fma (the fp32 FMA kernels everywhere)");
}

// PARAPLAN_CUDA_GELU_EPILOGUE: unset, 1, on -> in the GEMMs; 0, off -> GELU kernels.
bool gelu_epilogue_allowed() {
  const char* value = std::getenv("PARAPLAN_CUDA_GELU_EPILOGUE");
  if (value == nullptr) return true;
  const std::string text(value);
  if (text.empty() || text == "1" || text == "on") return true;
  if (text == "0" || text == "off") return false;
  throw std::runtime_error("PARAPLAN_CUDA_GELU_EPILOGUE='" + text +
                           "' is not understood; use 1 (GELU in the GEMMs' epilogues, the "
                           "default) or 0 (the GELU kernels)");
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls do not report it
    return 0;
  }
  return count;
}

void cuda_profiler_range(bool collect) {
  if ((collect ? cudaProfilerStart() : cudaProfilerStop()) != cudaSuccess) cudaGetLastError();
}

std::unique_ptr<Ops> make_cuda_ops(int device, DType storage) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    const std::string reason =
        status != cudaSuccess ? cudaGetErrorString(status) : std::string("0 devices");
    cudaGetLastError();
    throw std::runtime_error("--backend cuda: no CUDA device is visible (cudaGetDeviceCount: " +
                             reason + "); use --backend cpu");
  }
  if (device < 0) {
    throw std::runtime_error("--backend cuda: device index " + std::to_string(device) +
                             " is negative");
  }
  return cuda::create_cuda_ops(device % count, storage,
                               {.allow_tf32 = tf32_allowed(),
                                .tensor_core_attention = tensor_core_attention_allowed(),
                                .gelu_epilogue = gelu_epilogue_allowed()});
}

}  // namespace paraplan::kernels
