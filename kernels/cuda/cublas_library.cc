// cublas_library.cc: the dlopen of cuBLAS and cuBLASLt (cublas_library.h).
#include "kernels/cuda/cublas_library.h"

#include <string>

#include "common/shared_library.h"

namespace paraplan::kernels::cuda {

namespace {

constexpr const char* kWho = "the CUDA backend";

void* open_library(const std::string& name) {
  return open_shared_library(name, PARAPLAN_CUDA_LIBRARY_DIR, kWho,
                             std::string("install CUDA's cuBLAS ") + PARAPLAN_CUBLAS_MAJOR +
                                 " or add the folder holding " + name + " to LD_LIBRARY_PATH");
}

CublasLibrary load() {
  const std::string lt_name = std::string("libcublasLt.so.") + PARAPLAN_CUBLAS_MAJOR;
  const std::string blas_name = std::string("libcublas.so.") + PARAPLAN_CUBLAS_MAJOR;
  // Lt first: cuBLAS depends on it. Never closed: kept for the process.
  void* lt = open_library(lt_name);
  void* blas = open_library(blas_name);
  CublasLibrary library{};
  const std::string why =
      std::string("it needs cuBLAS ") + PARAPLAN_CUBLAS_MAJOR + ", the version it was built with";
#define PARAPLAN_RESOLVE(handle, name, member) \
  PARAPLAN_RESOLVE_SHARED(handle, name, library, member, kWho, why)
  PARAPLAN_RESOLVE(blas, blas_name, cublasCreate);
  PARAPLAN_RESOLVE(blas, blas_name, cublasDestroy);
  PARAPLAN_RESOLVE(blas, blas_name, cublasSetStream);
  PARAPLAN_RESOLVE(blas, blas_name, cublasSetWorkspace);
  PARAPLAN_RESOLVE(blas, blas_name, cublasSetAtomicsMode);
  PARAPLAN_RESOLVE(blas, blas_name, cublasSetMathMode);
  PARAPLAN_RESOLVE(blas, blas_name, cublasGemmEx);
  PARAPLAN_RESOLVE(blas, blas_name, cublasGetStatusString);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtCreate);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtDestroy);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatmulDescCreate);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatmulDescDestroy);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatmulDescSetAttribute);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatrixLayoutCreate);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatrixLayoutDestroy);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatmulPreferenceCreate);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatmulPreferenceDestroy);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatmulPreferenceSetAttribute);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatmulAlgoGetHeuristic);
  PARAPLAN_RESOLVE(lt, lt_name, cublasLtMatmul);
#undef PARAPLAN_RESOLVE
  return library;
}

}  // namespace

const CublasLibrary& cublas_library() {
  return loaded_once<CublasLibrary, load>();
}

}  // namespace paraplan::kernels::cuda
