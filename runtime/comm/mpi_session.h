// mpi_session.h: MPI for the life of a process (init, finalize, the world and
// node-local ranks) and the job-wide abort every fatal error goes through.
#pragma once

#include <string>

namespace paraplan {

// MPI for the life of the process: MPI_Init_thread(MPI_THREAD_FUNNELED) in the
// constructor, MPI_Finalize in the destructor.
//
// Without mpirun (launched_by_mpirun() false) the default mode does not
// initialise MPI at all: the process is world rank 0 of 1 and uses
// make_local_process_groups() (parallel/parallel_state.h). This keeps
// `paraplan train` of a one-rank plan independent of the MPI installation
// (singleton MPI_Init works with Open MPI, but depends on its runtime being
// usable on the machine); kAlways forces singleton initialisation.
//
// A rank that fails must call abort_job(), not return from main: returning runs
// MPI_Finalize while the other ranks wait in a collective, and the job hangs.
//
// Under `paraplan launch` (PARAPLAN_SUPERVISOR set) the session also starts
// this rank's heartbeat to the launcher before MPI_Init (heartbeat.h), tells
// it of a fatal error before ending, and that the rank finished after
// MPI_Finalize.
// This rank's machine as MPI's shared-memory split finds it (MPI initialised;
// collective over MPI_COMM_WORLD): its rank and count among the machine's
// ranks, and the machine's lowest world rank, which names the machine (host
// names may repeat across machines).
struct MachinePlace {
  int local_rank = 0, local_size = 1, first_world_rank = 0;
};
MachinePlace machine_place();

class MpiSession {
 public:
  enum class Mode { kWhenLaunchedByMpirun, kAlways };
  explicit MpiSession(Mode mode = Mode::kWhenLaunchedByMpirun);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  bool uses_mpi() const { return uses_mpi_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // among the ranks of this node
  int local_size() const { return local_size_; }

  // Throws unless this job has pipeline_size x data_size x tensor_size ranks:
  // "the plan needs 8 ranks (pp 2 x dp 2 x tp 2) but mpirun started 4", or,
  // without mpirun, a hint to start the job with `paraplan launch`.
  void require_world_size(int pipeline_size, int data_size, int tensor_size,
                          int context_size = 1) const;

  // Every rank waits here for the others (nothing without MPI).
  void barrier() const;

  // Prints "paraplan: error: [rank R] message" to stderr and ends the whole job
  // (MPI_Abort on MPI_COMM_WORLD; exit status 1 without MPI). From the thread
  // that initialised MPI only (MPI_THREAD_FUNNELED).
  [[noreturn]] static void abort_job(const std::string& message);
  // The same line, then this process ends (_Exit(1)) without any MPI call, so
  // any thread may call it (the watchdog does); mpirun then ends the other
  // ranks, as it does for any rank that exits before MPI_Finalize.
  [[noreturn]] static void end_rank(const std::string& message);
  // True when mpirun (or another PMIx launcher) started this process:
  // OMPI_COMM_WORLD_SIZE or PMIX_RANK is set.
  static bool launched_by_mpirun();

 private:
  bool uses_mpi_ = false, owns_mpi_ = false;
  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace paraplan
