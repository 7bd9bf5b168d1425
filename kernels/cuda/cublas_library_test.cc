// cublas_library_test.cc: cuBLAS is opened on first use, not at start-up, and
// every function the backend calls resolves. Needs no GPU (nothing is run
// on one), only the CUDA build's cuBLAS.
#include "kernels/cuda/cublas_library.h"

#include <gtest/gtest.h>

#include <string>

#include "common/shared_library.h"

namespace paraplan::kernels::cuda {
namespace {

// ctest runs each test in its own process: nothing has made CUDA ops here.
TEST(CublasLibrary, IsOpenedOnFirstUseWithEveryFunction) {
  EXPECT_FALSE(process_has_mapped("libcublasLt.so")) << "linked, or opened at start-up";
  EXPECT_FALSE(process_has_mapped("libcublas.so"));
  const CublasLibrary& library = cublas_library();
  EXPECT_TRUE(process_has_mapped("libcublasLt.so"));
  EXPECT_TRUE(process_has_mapped("libcublas.so"));
  const void* functions[] = {
      reinterpret_cast<const void*>(library.cublasCreate),
      reinterpret_cast<const void*>(library.cublasDestroy),
      reinterpret_cast<const void*>(library.cublasSetStream),
      reinterpret_cast<const void*>(library.cublasSetWorkspace),
      reinterpret_cast<const void*>(library.cublasSetAtomicsMode),
      reinterpret_cast<const void*>(library.cublasSetMathMode),
      reinterpret_cast<const void*>(library.cublasGemmEx),
      reinterpret_cast<const void*>(library.cublasGetStatusString),
      reinterpret_cast<const void*>(library.cublasLtCreate),
      reinterpret_cast<const void*>(library.cublasLtDestroy),
      reinterpret_cast<const void*>(library.cublasLtMatmulDescCreate),
      reinterpret_cast<const void*>(library.cublasLtMatmulDescDestroy),
      reinterpret_cast<const void*>(library.cublasLtMatmulDescSetAttribute),
      reinterpret_cast<const void*>(library.cublasLtMatrixLayoutCreate),
      reinterpret_cast<const void*>(library.cublasLtMatrixLayoutDestroy),
      reinterpret_cast<const void*>(library.cublasLtMatmulPreferenceCreate),
      reinterpret_cast<const void*>(library.cublasLtMatmulPreferenceDestroy),
      reinterpret_cast<const void*>(library.cublasLtMatmulPreferenceSetAttribute),
      reinterpret_cast<const void*>(library.cublasLtMatmulAlgoGetHeuristic),
      reinterpret_cast<const void*>(library.cublasLtMatmul)};
  for (size_t i = 0; i < std::size(functions); ++i) EXPECT_NE(functions[i], nullptr) << i;
  // A call that needs no device: the library answers.
  EXPECT_STREQ(library.cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED),
               "the library was not initialized");
  EXPECT_EQ(&cublas_library(), &library);  // loaded once
}

}  // namespace
}  // namespace paraplan::kernels::cuda
