// openblas_library_test.cc: OpenBLAS is opened on first use, not at
// start-up, and its functions answer.
#include "kernels/cpu/openblas_library.h"

#include <gtest/gtest.h>

#include <string>

#include "common/shared_library.h"
#include "kernels/ops.h"

namespace paraplan::kernels::cpu {
namespace {

// ctest runs each test in its own process: nothing has made CPU ops here.
TEST(OpenblasLibrary, IsOpenedWhenACpuBackendIsMade) {
  EXPECT_FALSE(process_has_mapped("libopenblas")) << "linked, or opened at start-up";
  const auto ops = make_cpu_ops(1);
  EXPECT_TRUE(process_has_mapped("libopenblas"));
  const OpenblasLibrary& library = openblas_library();
  EXPECT_EQ(library.openblas_get_num_threads(), 1);
  // [1 2; 3 4] @ [5 6; 7 8] = [19 22; 43 50], added onto ones (beta 1).
  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  float c[] = {1, 1, 1, 1};
  library.cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 1.0f, c,
                      2);
  EXPECT_EQ(c[0], 20);
  EXPECT_EQ(c[1], 23);
  EXPECT_EQ(c[2], 44);
  EXPECT_EQ(c[3], 51);
  EXPECT_EQ(&openblas_library(), &library);  // loaded once
}

}  // namespace
}  // namespace paraplan::kernels::cpu
