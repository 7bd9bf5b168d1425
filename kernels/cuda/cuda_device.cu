// cuda_device.cu: CUDA device discovery for ops.h (cuda_device_count) and the
// CUDA backend's factory make_cuda_ops: picks the device (device % count, so a
// local rank maps onto the visible devices), passes on the storage dtype
// (fp32 or bf16), and picks the precision of fp32 GEMMs: TF32 tensor-core
// math by default (PyTorch's allow_tf32 for matmuls), PARAPLAN_CUDA_TF32=0 for
// strict fp32. (bf16 GEMMs always accumulate in fp32; the variable is still
// checked, so a typo fails whatever the dtype.) And the attention kernels,
// PARAPLAN_CUDA_ATTENTION (attention_choice.h): by default (auto) bf16
// storage with head_dim 64 or 128 runs on cuDNN's SDPA where libcudnn loads,
// else on paraplan's tensor-core flash attention
// (cuda_attention_tensor_core.cu); own keeps paraplan's kernels, fma forces
// the fp32 FMA kernels everywhere, cudnn requires cuDNN. And
// the fused linear layers: by default GPT-2's MLP GELU and every residual
// add of an output projection run inside the GEMMs (cuBLASLt GELU_AUX_BIAS,
// DGELU, the C operand); PARAPLAN_CUDA_FUSED_GEMMS=0 runs them as kernels
// of their own (the before of a before/after, or a cuBLASLt that
// misbehaves). And the weight gradients beside the backward: on a second
// stream by default; PARAPLAN_CUDA_OVERLAP=0 keeps them on the ops' stream.
// And CUDA graphs for the compute steps the runtime offers
// (PARAPLAN_CUDA_GRAPHS=1; off by default).
// The variables are read once, when the Ops object is made. And, before
// main, CUDA_DEVICE_MAX_CONNECTIONS where the user set none (below).
// The op set itself is in cuda_ops.cu.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_choice.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"
#include "kernels/cuda/cudnn_library.h"
#include "kernels/ops.h"

namespace paraplan::kernels {

namespace {

// The device's hardware work queues: more than the streams a rank uses
// (compute, weight gradients, and one per NCCL communicator and pipeline
// link: ten or more). With CUDA's default of 8, streams share queues, and a
// posted NCCL receive holds back whatever compute is queued behind it on its
// queue: overlap lost, and a pipeline whose peer waits on that compute stalls.
// 32 is CUDA's most. Read when the context is made, so set before main, while
// the process has one thread (setenv beside another thread's getenv is
// undefined behaviour); a user's own setting stands.
bool default_hardware_queues() {
  if (std::getenv("CUDA_DEVICE_MAX_CONNECTIONS") != nullptr) return false;
  return setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/1) == 0;
}
const bool kHardwareQueuesDefaulted = default_hardware_queues();

// A switch in the environment: unset or empty -> by_default; 1, true, on ->
// true; 0, false, off -> false; anything else one error naming the variable
// and both values.
bool switch_variable(const char* name, bool by_default, const std::string& when_on,
                     const std::string& when_off) {
  const char* value = std::getenv(name);
  const std::string text = value == nullptr ? "" : value;
  if (text.empty()) return by_default;
  if (text == "1" || text == "true" || text == "on") return true;
  if (text == "0" || text == "false" || text == "off") return false;
  throw std::runtime_error(std::string(name) + "='" + text + "' is not understood; use 1 (" +
                           when_on + (by_default ? ", the default" : "") + ") or 0 (" + when_off +
                           (by_default ? "" : ", the default") + ")");
}

bool tf32_allowed() {
  return switch_variable("PARAPLAN_CUDA_TF32", true, "TF32 GEMMs", "strict fp32 GEMMs");
}
bool fused_gemms_allowed() {
  return switch_variable("PARAPLAN_CUDA_FUSED_GEMMS", true,
                         "GELU and residual adds inside the GEMMs", "as kernels of their own");
}
// Off unless asked for: a graph replays the pointers and arguments it was
// recorded with, which the runtime keeps fixed only where it offers a step
// to run_recorded (runtime/pipeline/schedule_executor.cc).
bool graphs_asked_for() {
  return switch_variable("PARAPLAN_CUDA_GRAPHS", false, "CUDA graphs for repeated compute steps",
                         "plain launches");
}
bool overlap_allowed() {
  return switch_variable("PARAPLAN_CUDA_OVERLAP", true, "weight gradients on a second stream",
                         "on the ops' stream");
}

}  // namespace

bool cuda_connections_defaulted() {
  return kHardwareQueuesDefaulted;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls do not report it
    return 0;
  }
  return count;
}

bool cuda_cudnn_available(std::string* description) {
  const cuda::CudnnAvailability& availability = cuda::cudnn_availability();
  if (description != nullptr) *description = availability.description;
  return availability.available;
}

void cuda_profiler_range(bool collect) {
  if ((collect ? cudaProfilerStart() : cudaProfilerStop()) != cudaSuccess) cudaGetLastError();
}

namespace cuda {

std::string cuda_device_name(int device) {
  cudaDeviceProp properties{};
  PARAPLAN_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

std::string cuda_device_bus_id(int device) {
  char bus_id[64] = {};
  PARAPLAN_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
  return bus_id;
}

}  // namespace cuda

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
  // Field by field: the .cu files are C++17, without designated initializers.
  cuda::CudaOpsSettings settings;
  settings.allow_tf32 = tf32_allowed();
  settings.attention = cuda::parse_attention_setting(std::getenv("PARAPLAN_CUDA_ATTENTION"));
  settings.fused_gemms = fused_gemms_allowed();
  settings.overlap_weight_gradients = overlap_allowed();
  settings.launch_graphs = graphs_asked_for();
  return cuda::create_cuda_ops(device % count, storage, settings);
}

}  // namespace paraplan::kernels
