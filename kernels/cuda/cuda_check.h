// cuda_check.h: error checking for the CUDA backend (llm.c style). Every CUDA
// runtime and cuBLAS/cuBLASLt call goes through one of these macros, which
// throw std::runtime_error naming the call, the file and line, and the
// library's error string. Kernel launches are followed by
// PARAPLAN_CUDA_CHECK_LAUNCH(), which reports launch-configuration errors
// (asynchronous faults surface at the next checked call, usually a copy or a
// synchronize). Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cublas_library.h"

namespace paraplan::kernels::cuda {

[[noreturn]] inline void throw_cuda_error(const char* what, const char* error, const char* call,
                                          const char* file, int line) {
  throw std::runtime_error(std::string(what) + " error: " + call + " failed at " + file + ":" +
                           std::to_string(line) + ": " + error);
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    throw_cuda_error("CUDA", cudaGetErrorString(status), call, file, line);
  }
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_cuda_error("cuBLAS", cublas_library().cublasGetStatusString(status), call, file, line);
  }
}

}  // namespace paraplan::kernels::cuda

#define PARAPLAN_CUDA_CHECK(call) \
  ::paraplan::kernels::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define PARAPLAN_CUBLAS_CHECK(call) \
  ::paraplan::kernels::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: configuration errors (too many threads, bad shared size).
#define PARAPLAN_CUDA_CHECK_LAUNCH() PARAPLAN_CUDA_CHECK(cudaGetLastError())
