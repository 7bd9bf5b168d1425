// mpi_abort_probe.cc: a job in which rank 1 fails (MpiSession::abort_job("boom"))
// while the other ranks wait in a barrier that can never complete. The ctest
// MpiAbortProbe checks that the whole job ends quickly and names rank 1.
#include "runtime/comm/mpi_communicator.h"  // and mpi.h
#include "runtime/comm/mpi_session.h"

int main() {
  paraplan::MpiSession session(paraplan::MpiSession::Mode::kAlways);
  if (session.world_rank() == 1) paraplan::MpiSession::abort_job("boom");
  MPI_Barrier(MPI_COMM_WORLD);  // never completes: rank 1 does not arrive
  return 0;
}
