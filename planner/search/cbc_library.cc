// cbc_library.cc: the dlopen of CBC's C interface (cbc_library.h).
#include "planner/search/cbc_library.h"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace paraplan {

namespace {

#define PARAPLAN_STRINGIZE_EXPANDED(x) PARAPLAN_STRINGIZE(x)
#define PARAPLAN_STRINGIZE(x) #x

// The soname this build linked against, e.g. libCbcSolver.so.3.
constexpr const char* kSoname = PARAPLAN_CBC_SONAME;

// By soname (LD_LIBRARY_PATH, the loader's cache), else from the folder
// this build was configured with.
void* open_library() {
  if (void* handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return handle;
  const std::string first_error = dlerror();
  const std::string fallback = std::string(PARAPLAN_CBC_LIBRARY_DIR) + "/" + kSoname;
  if (void* handle = dlopen(fallback.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
  throw std::runtime_error(std::string("planner.solver = 'ilp' could not load ") + kSoname + " (" +
                           first_error + "; nor " + fallback +
                           "): install CBC (Debian: coinor-libcbc3), add the folder holding " +
                           kSoname + " to LD_LIBRARY_PATH, or use solver = 'dp'");
}

template <typename Function>
void resolve(void* library, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(library, symbol));
  if (function == nullptr)
    throw std::runtime_error(std::string("planner.solver = 'ilp' found no ") + symbol + " in " +
                             kSoname + ": it needs the CBC this build was made with");
}

CbcLibrary load() {
  void* handle = open_library();  // never closed: kept for the process
  CbcLibrary library{};
#define PARAPLAN_RESOLVE(member) \
  resolve(handle, PARAPLAN_STRINGIZE_EXPANDED(member), library.member)
  PARAPLAN_RESOLVE(Cbc_newModel);
  PARAPLAN_RESOLVE(Cbc_deleteModel);
  PARAPLAN_RESOLVE(Cbc_setLogLevel);
  PARAPLAN_RESOLVE(Cbc_addCol);
  PARAPLAN_RESOLVE(Cbc_addRow);
  PARAPLAN_RESOLVE(Cbc_setAllowableGap);
  PARAPLAN_RESOLVE(Cbc_setAllowableFractionGap);
  PARAPLAN_RESOLVE(Cbc_solve);
  PARAPLAN_RESOLVE(Cbc_isProvenOptimal);
  PARAPLAN_RESOLVE(Cbc_isProvenInfeasible);
  PARAPLAN_RESOLVE(Cbc_status);
  PARAPLAN_RESOLVE(Cbc_getColSolution);
#undef PARAPLAN_RESOLVE
  return library;
}

}  // namespace

const CbcLibrary& cbc_library() {
  static const CbcLibrary library = load();  // a failed load throws again next time
  return library;
}

}  // namespace paraplan
