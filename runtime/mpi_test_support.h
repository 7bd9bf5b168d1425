// mpi_test_support.h: small helpers shared by the tests that run under
// mpirun (mpi_test_main.cc is their main): this process's world rank and
// the world size.
#pragma once

#include <mpi.h>

namespace paraplan::testing {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

}  // namespace paraplan::testing
