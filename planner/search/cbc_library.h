// cbc_library.h: CBC (COIN-OR)'s C interface, loaded (dlopen) the first time
// solver = 'ilp' solves a partition rather than linked. Linked, CBC brought
// CoinUtils, LAPACK and through them OpenBLAS into every paraplan process,
// whose constructor starts a spinning thread per core (kernels/cpu/
// openblas_library.h). Internal to planner/search: ilp_solver.cc calls
// cbc_library().Cbc_solve(...) and so on.
#pragma once

#include <Cbc_C_Interface.h>

namespace paraplan {

// Each member has its function's exact type, from Cbc_C_Interface.h.
struct CbcLibrary {
  decltype(&::Cbc_newModel) Cbc_newModel;
  decltype(&::Cbc_deleteModel) Cbc_deleteModel;
  decltype(&::Cbc_setLogLevel) Cbc_setLogLevel;
  decltype(&::Cbc_addCol) Cbc_addCol;
  decltype(&::Cbc_addRow) Cbc_addRow;
  decltype(&::Cbc_setAllowableGap) Cbc_setAllowableGap;
  decltype(&::Cbc_setAllowableFractionGap) Cbc_setAllowableFractionGap;
  decltype(&::Cbc_solve) Cbc_solve;
  decltype(&::Cbc_isProvenOptimal) Cbc_isProvenOptimal;
  decltype(&::Cbc_isProvenInfeasible) Cbc_isProvenInfeasible;
  decltype(&::Cbc_status) Cbc_status;
  decltype(&::Cbc_getColSolution) Cbc_getColSolution;
};

// Loads libCbcSolver on the first call (thread-safe) from the library path,
// then from the folder pkg-config named at build time. Throws
// std::runtime_error naming the library, the loader's message and the fix
// (solver = 'dp' needs no CBC).
const CbcLibrary& cbc_library();

}  // namespace paraplan
