// openblas_library.cc: the dlopen of OpenBLAS (openblas_library.h).
#include "kernels/cpu/openblas_library.h"

#include "common/shared_library.h"

namespace paraplan::kernels::cpu {

namespace {

constexpr const char* kSoname = "libopenblas.so.0";
constexpr const char* kWho = "the CPU backend";

OpenblasLibrary load() {
  void* handle = open_shared_library(
      kSoname, PARAPLAN_OPENBLAS_LIBRARY_DIR, kWho,
      std::string("install OpenBLAS (Debian: libopenblas0-pthread) or add the folder holding ") +
          kSoname + " to LD_LIBRARY_PATH");
  const char* why = "it needs OpenBLAS (another BLAS under that name lacks it)";
  OpenblasLibrary library{};
  PARAPLAN_RESOLVE_SHARED(handle, kSoname, library, cblas_sgemm, kWho, why);
  PARAPLAN_RESOLVE_SHARED(handle, kSoname, library, openblas_set_num_threads, kWho, why);
  PARAPLAN_RESOLVE_SHARED(handle, kSoname, library, openblas_get_num_threads, kWho, why);
  return library;
}

}  // namespace

const OpenblasLibrary& openblas_library() {
  return loaded_once<OpenblasLibrary, load>();
}

}  // namespace paraplan::kernels::cpu
