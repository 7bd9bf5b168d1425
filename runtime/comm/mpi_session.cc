// mpi_session.cc: MPI_Init_thread / MPI_Finalize, node-local ranks, abort_job.
#include "runtime/comm/mpi_session.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "runtime/comm/heartbeat.h"
#include "runtime/comm/mpi_communicator.h"

namespace paraplan {
namespace {

std::string plural_ranks(long long count) {
  return std::to_string(count) + (count == 1 ? " rank" : " ranks");
}

std::string mesh_text(int pipeline_size, int data_size, int tensor_size, int context_size) {
  return "(pp " + std::to_string(pipeline_size) + " x dp " + std::to_string(data_size) +
         (context_size > 1 ? " x cp " + std::to_string(context_size) : "") + " x tp " +
         std::to_string(tensor_size) + ")";
}

// This process's world rank, for messages printed from any thread: known
// once MPI is initialised, else what mpirun put in the environment.
std::atomic<int> this_world_rank{-1};

int world_rank_from_environment() {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"})
    if (const char* value = std::getenv(variable)) return std::atoi(value);
  return 0;
}

// The error line, in order after the log lines before it; the launcher hears
// of it too.
void report_failure(int rank, const std::string& message) {
  std::fflush(stdout);  // thread-safe (stdio locks); std::cout writes through it
  std::fprintf(stderr, "paraplan: error: [rank %d] %s\n", rank, message.c_str());
  std::fflush(stderr);
  Heartbeat::report_error(message);
}

}  // namespace

bool MpiSession::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

MpiSession::MpiSession(Mode mode) {
  if (mode == Mode::kWhenLaunchedByMpirun && !launched_by_mpirun()) return;
  // Before MPI_Init, so that the launcher sees a rank that hangs in it.
  Heartbeat::start_from_environment(world_rank_from_environment());
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    PARAPLAN_MPI_CHECK("world", "init_thread",
                       MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    owns_mpi_ = true;
  }
  uses_mpi_ = true;
  // Errors return to the caller, who throws with the group's name (or aborts the
  // job through abort_job) instead of MPI killing the job without context.
  PARAPLAN_MPI_CHECK("world", "set_errhandler",
                     MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  PARAPLAN_MPI_CHECK("world", "comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  PARAPLAN_MPI_CHECK("world", "comm_size", MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  this_world_rank = world_rank_;
  const MachinePlace place = machine_place();
  local_rank_ = place.local_rank;
  local_size_ = place.local_size;
}

MachinePlace machine_place() {
  int world_rank = 0;
  PARAPLAN_MPI_CHECK("world", "comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MPI_Comm node = MPI_COMM_NULL;
  PARAPLAN_MPI_CHECK(
      "world", "comm_split_type (shared memory node)",
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node));
  MachinePlace place;
  PARAPLAN_MPI_CHECK("node", "comm_rank", MPI_Comm_rank(node, &place.local_rank));
  PARAPLAN_MPI_CHECK("node", "comm_size", MPI_Comm_size(node, &place.local_size));
  PARAPLAN_MPI_CHECK(
      "node", "allreduce (lowest world rank)",
      MPI_Allreduce(&world_rank, &place.first_world_rank, 1, MPI_INT, MPI_MIN, node));
  PARAPLAN_MPI_CHECK("node", "comm_free", MPI_Comm_free(&node));
  return place;
}

void MpiSession::barrier() const {
  if (uses_mpi_) PARAPLAN_MPI_CHECK("world", "barrier", MPI_Barrier(MPI_COMM_WORLD));
}

void MpiSession::require_world_size(int pipeline_size, int data_size, int tensor_size,
                                    int context_size) const {
  const long long needed = 1LL * pipeline_size * data_size * context_size * tensor_size;
  if (needed == world_size_) return;
  const std::string plan = "the plan needs " + plural_ranks(needed) + " " +
                           mesh_text(pipeline_size, data_size, tensor_size, context_size);
  if (uses_mpi_)
    throw std::runtime_error(plan + " but mpirun started " + std::to_string(world_size_));
  throw std::runtime_error(plan +
                           " but this process was not started by mpirun; start the job with "
                           "`paraplan launch --plan PLAN -- train ...` (or mpirun -np " +
                           std::to_string(needed) + ")");
}

MpiSession::~MpiSession() {
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  Heartbeat::finish();  // after MPI_Finalize: a rank hanging in it is still watched
}

void MpiSession::abort_job(const std::string& message) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi_running = initialized && !finalized;
  int rank = world_rank_from_environment();
  if (mpi_running) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::cout.flush();  // the log lines before the error stay in order
  report_failure(rank, message);
  if (mpi_running) MPI_Abort(MPI_COMM_WORLD, 1);  // mpirun then kills every rank
  std::_Exit(1);
}

void MpiSession::end_rank(const std::string& message) {
  const int known = this_world_rank.load();
  report_failure(known >= 0 ? known : world_rank_from_environment(), message);
  std::_Exit(1);
}

}  // namespace paraplan
