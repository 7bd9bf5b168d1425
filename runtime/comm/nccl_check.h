// nccl_check.h: the checked NCCL and CUDA calls of the NCCL communicator
// (nccl_communicator.cc, nccl_peer_to_peer.cc): a failure throws naming the
// group, the operation, the call and the library's error string; an NCCL
// group closed on every path; which memory a buffer is in, and NCCL's name
// for a dtype. Internal to runtime/comm; includes CUDA and NCCL headers.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/dtype.h"

namespace paraplan::nccl_check {

[[noreturn]] inline void throw_nccl_error(const std::string& group, const std::string& operation,
                                          const char* call, ncclResult_t status, ncclComm_t comm) {
  std::string message = "NCCL " + operation + " on group '" + group + "' failed: " + call + ": " +
                        ncclGetErrorString(status);
  const char* detail = ncclGetLastError(comm);
  if (detail != nullptr && detail[0] != '\0') message += " (" + std::string(detail) + ")";
  throw std::runtime_error(message);
}

[[noreturn]] inline void throw_cuda_error(const std::string& group, const std::string& operation,
                                          const char* call, cudaError_t status) {
  throw std::runtime_error("CUDA " + std::string(call) + " for " + operation + " on group '" +
                           group + "' failed: " + cudaGetErrorString(status));
}

// Every NCCL and CUDA call goes through one of these: a failure throws naming
// the group, the operation, the call and the library's error string.
#define PARAPLAN_NCCL_CHECK(group, operation, comm, call)                                    \
  do {                                                                                       \
    const ncclResult_t nccl_status_ = (call);                                                \
    if (nccl_status_ != ncclSuccess)                                                         \
      ::paraplan::nccl_check::throw_nccl_error(group, operation, #call, nccl_status_, comm); \
  } while (0)
#define PARAPLAN_COMM_CUDA_CHECK(group, operation, call)                               \
  do {                                                                                 \
    const cudaError_t cuda_status_ = (call);                                           \
    if (cuda_status_ != cudaSuccess)                                                   \
      ::paraplan::nccl_check::throw_cuda_error(group, operation, #call, cuda_status_); \
  } while (0)

// An NCCL group (ncclGroupStart) closed on every path: end() closes it and
// reports NCCL's error; when a call inside throws first, the destructor
// still closes it (NCCL requires every group to end; a dangling one breaks
// every later NCCL call of the process), ignoring its result.
class NcclGroup {
 public:
  NcclGroup(const std::string& group, const std::string& operation, ncclComm_t comm)
      : group_(group), operation_(operation), comm_(comm) {
    PARAPLAN_NCCL_CHECK(group_, operation_, comm_, ncclGroupStart());
    open_ = true;
  }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    PARAPLAN_NCCL_CHECK(group_, operation_, comm_, ncclGroupEnd());
  }

 private:
  const std::string& group_;
  const std::string& operation_;
  ncclComm_t comm_;
  bool open_ = false;
};

enum class Memory { kDevice, kHost };

// Device (or managed) memory goes over NCCL; anything else (pageable or pinned
// host memory) over MPI.
inline Memory memory_of(const void* pointer, const std::string& group,
                        const std::string& operation) {
  if (pointer == nullptr) return Memory::kHost;
  cudaPointerAttributes attributes{};
  PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaPointerGetAttributes(&attributes, pointer));
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged
             ? Memory::kDevice
             : Memory::kHost;
}

// Free memory on the current device (cudaMemGetInfo): the communicators
// measure what NCCL takes as the drop across its initialisation.
inline int64_t free_device_bytes(const std::string& group, const std::string& operation) {
  size_t free = 0, total = 0;
  PARAPLAN_COMM_CUDA_CHECK(group, operation, cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

inline ncclDataType_t nccl_type_of(kernels::DType dtype) {
  return dtype == kernels::DType::kBFloat16 ? ncclBfloat16 : ncclFloat32;
}

}  // namespace paraplan::nccl_check
