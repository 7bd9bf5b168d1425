// watchdog_probe.cc: one rank under mpirun, MPI initialised as paraplan does
// (MPI_THREAD_FUNNELED), with an operation that never completes. The
// watchdog's default expiry must end the rank from its own thread without
// any MPI call, which FUNNELED forbids off the main thread: MPI_Comm_rank and
// MPI_Abort are wrapped here (the MPI profiling interface) to say so when a
// thread other than main calls them. The ctest WatchdogProbe checks that the
// rank ends with the timeout message and nothing of the kind.
#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "runtime/comm/mpi_communicator.h"  // and mpi.h
#include "runtime/comm/mpi_session.h"
#include "runtime/comm/watchdog.h"

namespace {
pthread_t main_thread;

void check_thread(const char* function) {
  if (!pthread_equal(pthread_self(), main_thread))
    std::fprintf(stderr, "watchdog_probe: %s called off the main thread under FUNNELED\n",
                 function);
}
}  // namespace

extern "C" int MPI_Comm_rank(MPI_Comm comm, int* rank) {
  check_thread("MPI_Comm_rank");
  return PMPI_Comm_rank(comm, rank);
}

extern "C" int MPI_Abort(MPI_Comm comm, int code) {
  check_thread("MPI_Abort");
  return PMPI_Abort(comm, code);
}

int main() {
  main_thread = pthread_self();
  paraplan::MpiSession session(paraplan::MpiSession::Mode::kAlways);
  paraplan::Watchdog::instance().set_timeout(0.2, session.world_rank());
  const std::string where = " on group 'probe' (rank 0 of 1)";
  paraplan::Watchdog::instance().begin({"all_reduce", 8, "floats", &where});
  std::this_thread::sleep_for(std::chrono::seconds(20));  // the watchdog ends this first
  std::fprintf(stderr, "watchdog_probe: the watchdog did not end the rank\n");
  return 0;
}
