// openblas_library.cc: the dlopen of OpenBLAS (openblas_library.h).
#include "kernels/cpu/openblas_library.h"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace paraplan::kernels::cpu {

namespace {

constexpr const char* kSoname = "libopenblas.so.0";

// By soname (LD_LIBRARY_PATH, the loader's cache: Debian's alternatives
// link), else from the folder this build was configured with.
void* open_library() {
  if (void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first_error = dlerror();
  const std::string fallback = std::string(PARAPLAN_OPENBLAS_LIBRARY_DIR) + "/" + kSoname;
  if (void* handle = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  throw std::runtime_error(std::string("the CPU backend could not load ") + kSoname + " (" +
                           first_error + "; nor " + fallback +
                           "): install OpenBLAS (Debian: libopenblas0-pthread) or add the "
                           "folder holding " +
                           kSoname + " to LD_LIBRARY_PATH");
}

template <typename Function>
void resolve(void* library, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, symbol));
  if (function == nullptr)
    throw std::runtime_error(std::string("the CPU backend found no ") + symbol + " in " + kSoname +
                             ": it needs OpenBLAS (another BLAS under that name lacks it)");
}

OpenblasLibrary load() {
  void* handle = open_library();  // never closed: kept for the process
  OpenblasLibrary library{};
  resolve(handle, "cblas_sgemm", library.cblas_sgemm);
  resolve(handle, "openblas_set_num_threads", library.openblas_set_num_threads);
  resolve(handle, "openblas_get_num_threads", library.openblas_get_num_threads);
  return library;
}

}  // namespace

const OpenblasLibrary& openblas_library() {
  static const OpenblasLibrary library = load();  // a failed load throws again next time
  return library;
}

}  // namespace paraplan::kernels::cpu
