// cbc_library.cc: the dlopen of CBC's C interface (cbc_library.h).
#include "planner/search/cbc_library.h"

#include "common/shared_library.h"

namespace paraplan {

namespace {

// The soname this build found, e.g. libCbcSolver.so.3.
constexpr const char* kSoname = PARAPLAN_CBC_SONAME;
constexpr const char* kWho = "planner.solver = 'ilp'";

CbcLibrary load() {
  void* handle = open_shared_library(kSoname, PARAPLAN_CBC_LIBRARY_DIR, kWho,
                                     std::string("install CBC (Debian: coinor-libcbc3), add the "
                                                 "folder holding ") +
                                         kSoname + " to LD_LIBRARY_PATH, or use solver = 'dp'");
  CbcLibrary library{};
  const char* why = "it needs the CBC this build was made with";
#define PARAPLAN_RESOLVE(member) \
  PARAPLAN_RESOLVE_SHARED(handle, kSoname, library, member, kWho, why)
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
  return loaded_once<CbcLibrary, load>();
}

}  // namespace paraplan
