// cublas_library.h: cuBLAS and cuBLASLt, loaded (dlopen) the first time CUDA
// ops need them rather than linked. cuBLASLt's static initialisation takes
// about 120 ms of every process that links it (measured on the 2-core
// machine: an empty program 3 ms, linked with libcublasLt 123 ms), which
// `paraplan plan`, `inspect`, `launch` and CPU-backend ranks never use.
// Internal to kernels/cuda: call sites name a function through
// cublas_library(), e.g. cublas_library().cublasLtMatmul(...).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace paraplan::kernels::cuda {

// The names are the headers' (some are macros: cublasCreate is
// cublasCreate_v2), so each member has its function's exact type.
struct CublasLibrary {
  decltype(&::cublasCreate) cublasCreate;
  decltype(&::cublasDestroy) cublasDestroy;
  decltype(&::cublasSetStream) cublasSetStream;
  decltype(&::cublasSetWorkspace) cublasSetWorkspace;
  decltype(&::cublasSetAtomicsMode) cublasSetAtomicsMode;
  decltype(&::cublasSetMathMode) cublasSetMathMode;
  // The C entry point (the header adds a C++ overload taking cudaDataType).
  cublasStatus_t (*cublasGemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                 int, const void*, const void*, cudaDataType, int, const void*,
                                 cudaDataType, int, const void*, void*, cudaDataType, int,
                                 cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&::cublasGetStatusString) cublasGetStatusString;
  decltype(&::cublasLtCreate) cublasLtCreate;
  decltype(&::cublasLtDestroy) cublasLtDestroy;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmul) cublasLtMatmul;
};

// Loads both libraries on the first call (thread-safe) from the library
// path, then from the CUDA toolkit's folder found at build time. Throws
// std::runtime_error naming the library, the loader's message and the fix.
const CublasLibrary& cublas_library();

}  // namespace paraplan::kernels::cuda
