// mpi_test_main.cc: the main of the GoogleTest programs that run under mpirun
// (mpi_communicator_test, staged_communicator_test, nccl_communicator_test).
// Every rank runs every test; rank 0 prints the usual report, the others only
// their failures, prefixed with the rank, so 8 ranks do not print 8 reports.
// The program fails when any rank failed.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/mpi_session.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  paraplan::MpiSession session(paraplan::MpiSession::Mode::kAlways);
  if (session.world_rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(session.world_rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (session.world_rank() == 0) {
    const std::string program = argv[0];
    std::printf("%s on %d ranks: %s\n", program.substr(program.find_last_of('/') + 1).c_str(),
                session.world_size(),
                failed ? "FAILED on some rank" : "passed (or skipped) on every rank");
  }
  return failed;
}
