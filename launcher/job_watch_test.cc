// job_watch_test.cc: the launcher's decisions from its ranks' beats, on a
// pp 2 x tp 2 job over two hosts: where the ranks run, a host whose ranks
// died, a rank that went silent, and a rank's collective timeout naming the
// member that has not arrived. Time is driven by the test.
#include "launcher/job_watch.h"

#include <gtest/gtest.h>

namespace paraplan {
namespace {

using namespace std::chrono_literals;
using supervision::RankMessage;
using Clock = JobWatch::Clock;

RankMessage group_message(int id, const std::string& name, std::vector<int> members) {
  RankMessage message;
  message.type = RankMessage::Type::kGroup;
  message.group = {id, name, std::move(members)};
  return message;
}

RankMessage beat_message(int64_t idle_ms, std::map<int, uint64_t> entered,
                         std::vector<supervision::OpenOperation> open = {}) {
  RankMessage message;
  message.type = RankMessage::Type::kBeat;
  message.beat = {idle_ms, std::move(entered), std::move(open)};
  return message;
}

// pp 2 x tp 2: ranks 0-1 (stage 0) on node1, 2-3 (stage 1) on node2. Each rank
// registers world (id 0), tensor (id 1) and data (id 2, itself alone).
class JobWatchTest : public ::testing::Test {
 protected:
  JobWatchTest() : watch_({2, 1, 2}, 3000ms) {
    for (int rank = 0; rank < 4; ++rank) {
      const std::string host = rank < 2 ? "node1" : "node2";
      EXPECT_TRUE(watch_.check_in({"t", rank, 100L + rank, host}, start_));
      watch_.receive(rank, group_message(0, "world", {0, 1, 2, 3}), start_);
      watch_.receive(
          rank,
          group_message(1, "tensor", rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}),
          start_);
      watch_.receive(rank, group_message(2, "data", {rank}), start_);
    }
  }
  // Rank 0's beat: in its 11th tensor all-reduce for `age_ms`.
  void rank_0_waits_in_tensor_all_reduce(int64_t age_ms, Clock::time_point now) {
    watch_.receive(
        0,
        beat_message(
            0, {{1, 11}},
            {{1, 11, age_ms, "all_reduce of 3072 floats on group 'tensor' (rank 0 of 2)", -1, -1}}),
        now);
  }
  void beat_all(Clock::time_point now) {
    for (int rank = 0; rank < 4; ++rank) watch_.receive(rank, beat_message(5, {{1, 10}}), now);
  }

  Clock::time_point start_ = Clock::now();
  JobWatch watch_;
};

TEST_F(JobWatchTest, SaysWhereRanksRunAndThatTensorGroupsStayInOneHost) {
  EXPECT_TRUE(watch_.all_checked_in());
  EXPECT_EQ(watch_.placement(),
            "placement: node1 ranks 0-1; node2 ranks 2-3; every tensor group within one host");
  EXPECT_EQ(watch_.pids_on("node2"), (std::vector<long>{102, 103}));
  EXPECT_FALSE(watch_.check_in({"t", 1, 999, "node1"}, start_)) << "checked in twice";
  EXPECT_FALSE(watch_.check_in({"t", 4, 999, "node1"}, start_)) << "outside the world";
  EXPECT_FALSE(watch_.failure(start_ + 1s));
}

TEST(JobWatch, NamesATensorGroupThatSpansHosts) {
  JobWatch watch({1, 1, 2}, 3000ms);
  const auto now = Clock::now();
  watch.check_in({"t", 0, 1, "a"}, now);
  EXPECT_FALSE(watch.placement()) << "not every rank has checked in";
  watch.check_in({"t", 1, 2, "b"}, now);
  EXPECT_FALSE(watch.placement()) << "no tensor group made yet";
  for (int rank = 0; rank < 2; ++rank) watch.receive(rank, group_message(0, "tensor", {0, 1}), now);
  EXPECT_EQ(watch.placement(),
            "placement: a ranks 0; b ranks 1; tensor group [0,1] spans a, b (its all-reduces "
            "cross the network);");
}

TEST_F(JobWatchTest, AHostWhoseRanksDiedIsNamedOnceEveryRankOfItIsGone) {
  const auto died = start_ + 2s;
  beat_all(died - 100ms);
  // Stage 0 waits for stage 1's gradients.
  watch_.receive(0,
                 beat_message(0, {{1, 10}},
                              {{-1, 0, 400,
                                "pipeline send and receive of 384 floats (from world "
                                "rank 2) on world rank 0",
                                -1, 2}}),
                 died - 50ms);
  watch_.disconnected(2, died);
  EXPECT_FALSE(watch_.failure(died + 100ms)) << "rank 3 may be going too: wait to name both";
  watch_.disconnected(3, died + 150ms);
  EXPECT_FALSE(watch_.failure(died + 250ms));
  EXPECT_EQ(watch_.failure(died + 500ms),
            "lost ranks 2-3 on host node2: the process ended without finishing (killed, "
            "crashed, or its host went down); ending the job\n"
            "  rank 2 on node2 (pid 102): pipeline stage 1 of 2, data rank 0 of 1, tensor rank 0 "
            "of 2; groups tensor [2,3]\n"
            "  rank 3 on node2 (pid 103): pipeline stage 1 of 2, data rank 0 of 1, tensor rank 1 "
            "of 2; groups tensor [2,3]\n"
            "  waiting for it: rank 0 on node1 (pid 100) in pipeline send and receive of 384 "
            "floats (from world rank 2) on world rank 0 for 0.4 s");
}

// mpirun, having lost node2's daemon, ends node1's ranks with SIGTERM, which
// they report; on a loaded machine their ends can reach the launcher before
// node2's. The ranks that ended without a word are the ones at fault.
TEST_F(JobWatchTest, RanksEndedBySigtermAfterALostHostAreNotBlamed) {
  const auto died = start_ + 2s;
  RankMessage sigterm;
  sigterm.type = RankMessage::Type::kSignal;
  sigterm.signal = 15;
  for (const int rank : {0, 1}) {
    watch_.receive(rank, sigterm, died);
    watch_.disconnected(rank, died);
  }
  watch_.disconnected(2, died + 50ms);
  watch_.disconnected(3, died + 60ms);
  EXPECT_FALSE(watch_.failure(died + 200ms));
  const std::optional<std::string> failure = watch_.failure(died + 400ms);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->substr(0, failure->find('\n')),
            "lost ranks 2-3 on host node2: the process ended without finishing (killed, crashed, "
            "or its host went down); ending the job");
  EXPECT_EQ(failure->find("node1"), std::string::npos) << *failure;
}

// The same, where node1's rank 0 is gone before its SIGTERM report reaches
// the launcher (a loaded machine): node2 lost every rank it had, node1 one
// of its two, so only node2 is named.
TEST_F(JobWatchTest, AHostThatLostEveryRankIsNamedBeforeARankGoneUnheard) {
  const auto died = start_ + 2s;
  watch_.disconnected(2, died);
  watch_.disconnected(3, died + 10ms);
  watch_.disconnected(0, died + 80ms);
  const std::optional<std::string> failure = watch_.failure(died + 500ms);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->substr(0, failure->find('\n')),
            "lost ranks 2-3 on host node2: the process ended without finishing (killed, crashed, "
            "or its host went down); ending the job");
  EXPECT_EQ(failure->find("rank 0 on node1"), std::string::npos) << *failure;
}

TEST_F(JobWatchTest, RanksEndedBySigtermAloneAreNamedSo) {
  RankMessage sigterm;
  sigterm.type = RankMessage::Type::kSignal;
  sigterm.signal = 15;
  watch_.receive(3, sigterm, start_);
  watch_.disconnected(3, start_);
  const std::optional<std::string> failure = watch_.failure(start_ + 1s);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->substr(0, failure->find('\n')),
            "lost rank 3 on host node2: the process was ended by SIGTERM (from mpirun or a "
            "user); ending the job");
}

TEST_F(JobWatchTest, ARankThatStopsBeatingIsNamedWithTheRanksWaitingForIt) {
  beat_all(start_ + 1s);  // rank 1's last word
  const auto now = start_ + 4100ms;
  for (int rank : {0, 2, 3}) watch_.receive(rank, beat_message(5, {{1, 10}}), now - 100ms);
  rank_0_waits_in_tensor_all_reduce(2900, now - 100ms);
  EXPECT_FALSE(watch_.failure(start_ + 3900ms)) << "within the 3 s timeout";
  EXPECT_EQ(watch_.failure(now),
            "rank 1 on host node1: nothing heard for 3.1 s (heartbeat timeout 3.0 s): stopped "
            "(SIGSTOP), hung, or the host is cut off the network; ending the job\n"
            "  rank 1 on node1 (pid 101): pipeline stage 0 of 2, data rank 0 of 1, tensor rank 1 "
            "of 2; groups tensor [0,1]\n"
            "  waiting for it: rank 0 on node1 (pid 100) in all_reduce of 3072 floats on group "
            "'tensor' (rank 0 of 2) for 2.9 s");
}

TEST_F(JobWatchTest, ACollectiveTimeoutNamesTheMemberThatHasNotArrived) {
  const auto now = start_ + 5s;
  // Rank 0 entered tensor all-reduce 11; rank 1 is still computing after its 10th.
  watch_.receive(1, beat_message(3100, {{1, 10}}), now - 200ms);
  rank_0_waits_in_tensor_all_reduce(3000, now - 100ms);
  RankMessage error;
  error.type = RankMessage::Type::kError;
  error.error =
      "timeout: all_reduce of 3072 floats on group 'tensor' (rank 0 of 2) did not "
      "complete within 3 s (world rank 0)";
  watch_.receive(0, error, now);
  EXPECT_EQ(watch_.failure(now),
            "rank 0 on node1 (pid 100) ended the job: timeout: all_reduce of 3072 floats on group "
            "'tensor' (rank 0 of 2) did not complete within 3 s (world rank 0)\n"
            "  rank 0 on node1 (pid 100): pipeline stage 0 of 2, data rank 0 of 1, tensor rank 0 "
            "of 2; groups tensor [0,1]\n"
            "  in all_reduce of 3072 floats on group 'tensor' (rank 0 of 2) (operation 11 on that "
            "group), world rank 1 on node1 has not arrived (it entered 10): it is outside "
            "communication for 3.1 s (computing, or stuck outside MPI)");
  // For a restart: the fault is the absent peer's, not the rank that timed out.
  const std::optional<JobFailure> diagnosis = watch_.diagnose(now);
  ASSERT_TRUE(diagnosis);
  EXPECT_EQ(diagnosis->kind, JobFailure::Kind::kNotArrived);
  EXPECT_EQ(diagnosis->hosts, (std::vector<std::string>{"node1"}));
}

TEST(JobWatch, ARankLostBeforeReportingItsGroupsIsPlacedByTheMesh) {
  JobWatch watch({1, 2, 2}, 3000ms, 0ms);
  const auto now = Clock::now();
  for (int rank = 0; rank < 4; ++rank) watch.check_in({"t", rank, 10L + rank, "h"}, now);
  watch.disconnected(3, now);
  EXPECT_EQ(watch.failure(now),
            "lost rank 3 on host h: the process ended without finishing (killed, crashed, or its "
            "host went down); ending the job\n"
            "  rank 3 on h (pid 13): pipeline stage 0 of 1, data rank 1 of 2, tensor rank 1 of 2; "
            "groups tensor [2,3], data [1,3]");
}

TEST_F(JobWatchTest, FinishedRanksAreNeitherLostNorSilent) {
  RankMessage done;
  done.type = RankMessage::Type::kDone;
  for (int rank = 0; rank < 4; ++rank) {
    watch_.receive(rank, done, start_);
    watch_.disconnected(rank, start_);
  }
  EXPECT_TRUE(watch_.all_finished());
  EXPECT_FALSE(watch_.failure(start_ + 60s));
}

TEST(JobWatch, RankRanges) {
  EXPECT_EQ(rank_ranges({6, 0, 1, 2, 3}), "0-3,6");
  EXPECT_EQ(rank_ranges({5}), "5");
  EXPECT_EQ(rank_ranges({}), "");
  EXPECT_EQ(rank_ranges({1, 3, 4}), "1,3-4");
}

}  // namespace
}  // namespace paraplan
