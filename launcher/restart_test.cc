// restart_test.cc: decide_restart (restart.h): a host that no longer answers is
// dropped, one that answers again is kept (a transient fault), and each reason
// not to restart gets its line: a rank's own error, the restarts used up,
// fewer hosts than --min-nodes, mpirun failing with every host well.
#include "launcher/restart.h"

#include <gtest/gtest.h>

namespace paraplan {
namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

RestartInput lost_node2(JobFailure::Kind kind = JobFailure::Kind::kLost) {
  RestartInput input;
  input.failure = JobFailure{kind, "lost ranks 2-3 on host node2: ...", {"node2"}};
  input.hosts = {{"node1", 2, 1}, {"node2", 2, 2}};
  input.max_restarts = 2;
  return input;
}

TEST(RestartDecision, AHostThatNoLongerAnswersIsDropped) {
  RestartInput input = lost_node2();
  input.unhealthy = {{"node2", "ssh: connect to host node2 port 22: Connection timed out"}};
  const RestartDecision decision = decide_restart(input);
  EXPECT_TRUE(decision.restart);
  ASSERT_EQ(decision.hosts.size(), 1u);
  EXPECT_EQ(decision.hosts[0].name, "node1");
  EXPECT_EQ(joined(decision.lines),
            "dropping host node2 (its ranks ended without finishing): it fails the preflight "
            "now: ssh: connect to host node2 port 22: Connection timed out\n");
}

TEST(RestartDecision, AHostThatAnswersAgainIsKeptAsATransientFault) {
  RestartInput input = lost_node2(JobFailure::Kind::kSilent);
  input.failure->hosts = {"node2.cluster.local"};  // the rank's own hostname
  const RestartDecision decision = decide_restart(input);
  EXPECT_TRUE(decision.restart);
  EXPECT_EQ(decision.hosts.size(), 2u);
  EXPECT_EQ(joined(decision.lines),
            "host node2 failed (nothing was heard from its ranks) but answers the preflight "
            "again: a transient fault; keeping it\nretrying on the same 2 host(s)\n");
}

TEST(RestartDecision, EachReasonNotToRestartIsSaid) {
  RestartInput error = lost_node2(JobFailure::Kind::kRankError);
  RestartDecision decision = decide_restart(error);
  EXPECT_FALSE(decision.restart);
  EXPECT_EQ(joined(decision.lines),
            "not restarting: a rank reported an error of its own (above), which a restart would "
            "meet again\n");

  RestartInput used = lost_node2();
  used.restarts_used = 2;
  decision = decide_restart(used);
  EXPECT_FALSE(decision.restart);
  EXPECT_EQ(joined(decision.lines), "not restarting: all 2 restart(s) of --max-restarts used\n");

  RestartInput few = lost_node2();
  few.min_nodes = 2;
  few.unhealthy = {{"node2", "unreachable"}};
  decision = decide_restart(few);
  EXPECT_FALSE(decision.restart);
  EXPECT_NE(joined(decision.lines).find("not restarting: 1 host(s) left, fewer than --min-nodes 2"),
            std::string::npos)
      << joined(decision.lines);

  RestartInput mpirun = lost_node2();
  mpirun.failure.reset();
  mpirun.exit_status = 213;
  decision = decide_restart(mpirun);
  EXPECT_FALSE(decision.restart);
  EXPECT_EQ(joined(decision.lines),
            "not restarting: the job failed (mpirun's exit status 213) without a lost or silent "
            "rank and every host answers\n");
}

TEST(RestartDecision, ACollectiveTimeoutBlamesThePeersThatDidNotArrive) {
  // Rank 0 timed out in an all-reduce that node2's ranks never entered (a
  // hung device keeps its heartbeat): restartable, node2 named.
  RestartInput input = lost_node2(JobFailure::Kind::kNotArrived);
  const RestartDecision decision = decide_restart(input);
  EXPECT_TRUE(decision.restart);
  EXPECT_EQ(joined(decision.lines),
            "host node2 failed (its ranks did not arrive where others waited) but answers the "
            "preflight again: a transient fault; keeping it\nretrying on the same 2 host(s)\n");
}

TEST(RestartDecision, RestartsUsedUpAreSaidBeforeAnythingElse) {
  RestartInput input = lost_node2();
  input.failure.reset();  // mpirun failed alone, and no preflight was run
  input.restarts_used = input.max_restarts;
  const RestartDecision decision = decide_restart(input);
  EXPECT_EQ(joined(decision.lines), "not restarting: all 2 restart(s) of --max-restarts used\n");
}

TEST(RestartDecision, MpirunFailingWithAHostDownDropsThatHost) {
  RestartInput input = lost_node2();
  input.failure.reset();
  input.unhealthy = {{"node2", "unreachable"}};
  const RestartDecision decision = decide_restart(input);
  EXPECT_TRUE(decision.restart);
  EXPECT_EQ(joined(decision.lines),
            "dropping host node2: it fails the preflight now: unreachable\n");
}

TEST(RestartDecision, RestartsNeedACheckpointDirectoryToResumeFrom) {
  LaunchOptions options;
  options.plan_path = "job.pplan";
  options.command = {"train", "--steps", "100"};
  options.max_restarts = 2;
  try {
    run_launch(options);
    FAIL() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("launch: --max-restarts needs a train command with --checkpoint-dir DIR"),
              std::string::npos)
        << error.what();
  }
}

TEST(RestartDevices, AReplanTakesTheDevicesPerNodeFromTheHostsLeft) {
  // Equal slots: that many devices per node, nothing to say.
  HostDevices devices = devices_per_host({{"node1", 2, 1}, {"node3", 2, 3}});
  EXPECT_EQ(devices.devices_per_node, 2);
  EXPECT_EQ(devices.line, "");
  // Different slots: the fewest, which every host can run, said once.
  devices = devices_per_host({{"node1", 4, 1}, {"node3", 2, 3}});
  EXPECT_EQ(devices.devices_per_node, 2);
  EXPECT_EQ(devices.line,
            "the hosts left have different slots (node1 4, node3 2): planning 2 device(s) on "
            "each, as many as node3 has");
  EXPECT_EQ(devices_per_host({}).devices_per_node, 0);
}

// No plan for the hosts left: one line with their devices, and their slots
// when they differ, before the planner's first line.
TEST(RestartDevices, NoPlanForTheHostsLeftIsOneLineNamingTheirSlots) {
  const std::string reason =
      "job.pplan (the options it was planned with): no (pipeline, data, "
      "tensor) parallel mesh fits the world size 3\nsecond line";
  EXPECT_EQ(no_plan_fits_line(1, devices_per_host({{"node1", 3, 1}}), reason),
            "not restarting: no plan fits the 1 host(s) left (3 device(s) each): job.pplan (the "
            "options it was planned with): no (pipeline, data, tensor) parallel mesh fits the "
            "world size 3");
  EXPECT_EQ(no_plan_fits_line(2, devices_per_host({{"node1", 5, 1}, {"node3", 3, 3}}),
                              "job.pplan (the options it was planned with): no (pipeline, data, "
                              "tensor) parallel mesh fits the world size 6"),
            "not restarting: no plan fits the 2 host(s) left (3 device(s) each, the fewest slots "
            "of any: their slots differ (node1 5, node3 3)): job.pplan (the options it was "
            "planned with): no (pipeline, data, tensor) parallel mesh fits the world size 6");
}

}  // namespace
}  // namespace paraplan
