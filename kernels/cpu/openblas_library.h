// openblas_library.h: OpenBLAS, loaded (dlopen) the first time a CPU backend
// is made rather than linked. Linked, its constructor starts one thread per
// core in every paraplan process, which spins (sched_yield) for about 0.1 s
// before sleeping: `paraplan plan` lost about 8% of its time to it on 2
// cores, and `inspect`, `launch` and every CUDA rank never multiply on the
// CPU. Internal to kernels/cpu: call sites name a function through
// openblas_library(), e.g. openblas_library().cblas_sgemm(...).
#pragma once

#include <cblas.h>

namespace paraplan::kernels::cpu {

// Each member has its function's exact type, from OpenBLAS's cblas.h.
struct OpenblasLibrary {
  decltype(&::cblas_sgemm) cblas_sgemm;
  decltype(&::openblas_set_num_threads) openblas_set_num_threads;
  decltype(&::openblas_get_num_threads) openblas_get_num_threads;
};

// Loads libopenblas.so.0 on the first call (thread-safe) from the library
// path, then from the folder pkg-config named at build time. Throws
// std::runtime_error naming the library, the loader's message and the fix.
const OpenblasLibrary& openblas_library();

}  // namespace paraplan::kernels::cpu
