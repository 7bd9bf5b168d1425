// mpi_test_support.h: small helpers shared by the tests that run under
// mpirun (mpi_test_main.cc is their main): this process's world rank and
// the world size, random values whose sums depend on the order of addition,
// bitwise comparison.
#pragma once

// The C API only (as runtime/comm/mpi_communicator.h): Open MPI's C++
// bindings would need libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

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

// Random values of mixed magnitude, so that the order of a sum changes its
// bits; the same (rank, count, salt) always gives the same values.
template <typename T>
std::vector<T> random_values(int rank, size_t count, unsigned salt = 0) {
  std::mt19937 generator(1000u * salt + 17u * static_cast<unsigned>(rank) + 1u);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<T> values(count);
  for (T& value : values) value = static_cast<T>(std::ldexp(unit(generator), exponent(generator)));
  return values;
}

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace paraplan::testing
