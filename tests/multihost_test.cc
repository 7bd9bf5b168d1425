// multihost_test.cc: `paraplan launch` across two hosts of the test bed
// (tests/testbed.sh: network namespaces node1 and node2, one switch, an sshd
// each, and a docker0 carrying the same address on both). Runs inside
// `testbed.sh run` (ctest MultiHost.two_hosts), which sets TESTBED.
//
// - pp 2 x tp 2 and dp 2 x tp 2 + ZeRO-1, two ranks per host, give the
//   single-rank losses; each tensor group stays inside a host; the link
//   carries at least what the plan must exchange (measured on the switch).
// - The network is chosen despite docker0: automatically, and by name.
// - --dry-run prints the command and every host's findings; a host that
//   cannot be reached is refused before anything starts.
// - A host killed mid-run, and a host cut off the network, end the whole job
//   within 30 s with the launcher naming the lost ranks and their host, and
//   nothing of the job is left on either host.
// - Under --max-restarts: a host killed and gone, or cut off, is dropped, the
//   job re-planned onto the other and resumed from its checkpoint; one rank
//   killed restarts on the same hosts. Each run's losses, the redone steps
//   as the resumed run logs them, are the uninterrupted single-rank run's.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "parallel_training_fixture.h"

namespace {

using namespace paraplan::testing;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const char* testbed() {
  const char* script = std::getenv("TESTBED");
  return script ? script : "";
}

std::string bed(const std::string& arguments) {
  return std::string(testbed()) + " " + arguments;
}

// A command line run on a host of the bed.
std::string on(const std::string& host, const std::string& command) {
  return bed("exec " + host + " -- " + command);
}

long long link_bytes(const std::string& host) {
  return std::atoll(run_command(bed("bytes " + host)).output.c_str());
}

// "pid name" lines of the processes on host (its sshd aside).
std::string processes_on(const std::string& host) {
  return run_command(bed("pids " + host)).output;
}

// Waits until neither host runs anything but its sshd; the seconds it took,
// or -1 after `limit`.
double seconds_until_hosts_are_clean(Clock::time_point since, std::chrono::seconds limit) {
  while (Clock::now() - since < limit) {
    if (processes_on("node1").empty() && processes_on("node2").empty())
      return std::chrono::duration<double>(Clock::now() - since).count();
    std::this_thread::sleep_for(200ms);
  }
  return -1;
}

// A command running in the background with its output in a file.
class Background {
 public:
  Background(const std::string& command_line, const std::string& log) : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", (command_line + " > " + log + " 2>&1").c_str(), nullptr);
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Waits up to `limit` for the command to end; true if it did.
  bool wait(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        done_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return true;
      }
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  // Waits until the log holds `text`; false if it did not within `limit` or
  // the command ended first.
  bool await_output(const std::string& text, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (output().find(text) != std::string::npos) return true;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        done_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return output().find(text) != std::string::npos;
      }
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  std::string output() const { return read_file(log_); }
  int exit_code() const { return exit_code_; }

 private:
  std::string log_;
  pid_t pid_ = -1;
  bool done_ = false;
  int exit_code_ = -1;
};

// The launcher's report of a failure (its "paraplan: error:" line and the
// lines after it), for the figures printed with the results.
std::string launcher_report(const std::string& output) {
  std::string report, line;
  std::istringstream lines(output);
  while (std::getline(lines, line))
    if (line.rfind("paraplan: error: ", 0) == 0 || line.rfind("paraplan:   ", 0) == 0)
      report += "    " + line + "\n";
  return report;
}

class MultiHost : public ParallelTraining {
 protected:
  static void SetUpTestSuite() {
    ParallelTraining::SetUpTestSuite();
    write_file(*directory_ / "hosts", "node1 slots=2\nnode2 slots=2\n");
  }
  void SetUp() override {
    if (std::string(testbed()).empty())
      GTEST_SKIP() << "not inside the test bed; run `tests/testbed.sh run -- multihost_test`";
  }

  // How a plan's 2 nodes x 2 devices are made: the job's [cluster], or the
  // AutoDist way, mesh_row x mesh_col on the command line ([cluster] left at
  // its 8 devices per node, which a re-plan must not take).
  enum class MeshWay { kCluster, kMeshRowCol };

  // The case planned for 2 hosts x 2 devices.
  static std::string plan_for_two_hosts(const PlanCase& plan, MeshWay way = MeshWay::kCluster) {
    const std::string job = *directory_ / (plan.name + ".toml");
    const std::string plan_file = *directory_ / (plan.name + ".pplan");
    const bool cluster = way == MeshWay::kCluster;
    write_file(job, job_toml(plan) + (cluster ? "\n[cluster]\ndevices_per_node = 2\n" : ""));
    const CommandResult planned =
        run("plan --config " + job + " --output " + plan_file +
            (cluster ? "" : " --planner.mesh_row 2 --planner.mesh_col 2"));
    EXPECT_EQ(planned.exit_code, 0) << planned.output;
    EXPECT_NE(planned.output.find("on 2 nodes x 2 devices"), std::string::npos) << planned.output;
    return plan_file;
  }

  // `paraplan launch ... -- train ...` on node1, as a user of the cluster runs it.
  static std::string launch_line(const std::string& plan_file, const std::string& launch_flags,
                                 const std::string& train_flags,
                                 const std::string& environment = "") {
    return on("node1", environment + std::string(PARAPLAN_BINARY) + " launch --plan " + plan_file +
                           " --hostfile " + *directory_ / "hosts" + " " + launch_flags +
                           " -- train --data " + *directory_ / "data/train.bin" + " " +
                           train_flags);
  }

  // Trains the case across the two hosts; the losses, the output, and the
  // bytes node2's link carried.
  static std::vector<double> train_across_hosts(const PlanCase& plan, const std::string& flags,
                                                CommandResult& result, long long& bytes) {
    const std::string plan_file = plan_for_two_hosts(plan);
    const std::string log = *directory_ / (plan.name + ".jsonl");
    const long long before = link_bytes("node2");
    result = run_command(
        launch_line(plan_file, flags, "--steps " + std::to_string(kSteps) + " --log-json " + log));
    bytes = link_bytes("node2") - before;
    EXPECT_EQ(result.exit_code, 0) << result.output;
    std::vector<double> losses;
    for (const auto& line : read_json_lines(log)) losses.push_back(line["loss"].get<double>());
    return losses;
  }

  static void expect_single_rank_losses(const PlanCase& plan, const std::vector<double>& losses) {
    const std::vector<double>& expected = single_rank_losses();
    ASSERT_EQ(losses.size(), expected.size()) << plan.name;
    double largest = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], expected[i], kLossTolerance) << plan.name << " step " << i + 1;
      largest = std::max(largest, std::abs(losses[i] - expected[i]));
    }
    std::printf("[ figures  ] %s: largest loss difference to the single-rank run %.3g\n",
                plan.name.c_str(), largest);
  }
};

constexpr const char* kPlacement =
    "paraplan launch: placement: node1 ranks 0-1; node2 ranks 2-3; every tensor group within one "
    "host";
constexpr const char* kAutoNetwork =
    "paraplan launch: network: 10.77.0.0/24 (auto: it carries every host's address)";

// Bytes the tiny model's pipeline must move between the stages each step:
// micro-batch activations forward and their gradients back, from every
// tensor rank (12 sequences x 16 tokens x d_model 32, fp32).
constexpr long long kPipelineBytesPerStep = 2LL * 2 * 12 * 16 * 32 * 4;
// ZeRO-1 over dp 2: each rank reduce-scatters its gradients (half leaves the
// host) and all-gathers its parameters back; each tensor rank holds at least
// half of the 59,584 parameters.
constexpr long long kZeroBytesPerStep = 2LL * 2 * 2 * (59584 / 2 / 2) * 4;

TEST_F(MultiHost, PipelineAndTensorParallelAcrossHostsGiveTheSingleRankLosses) {
  const PlanCase plan{.name = "hosts_pp2_tp2", .pipeline = 2, .tensor = 2, .micro_batch_size = 3};
  CommandResult result;
  long long bytes = 0;
  const std::vector<double> losses = train_across_hosts(plan, "", result, bytes);
  expect_single_rank_losses(plan, losses);
  EXPECT_NE(result.output.find(kPlacement), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(kAutoNetwork), std::string::npos) << result.output;
  EXPECT_GE(bytes, kSteps * kPipelineBytesPerStep);
  std::printf("[ figures  ] %s: %lld bytes over node2's link in %d steps (pipeline payload %lld)\n",
              plan.name.c_str(), bytes, kSteps, kSteps * kPipelineBytesPerStep);
}

// docker0 carries 172.17.0.1 on both hosts: without a choice Open MPI connects
// each host to itself and the job hangs before its first step. The automatic
// choice works (above), and so does an interface the user names.
TEST_F(MultiHost, DataAndTensorParallelWithZeroOneAcrossHostsGiveTheSingleRankLosses) {
  const PlanCase plan{.name = "hosts_dp2_tp2_zero1",
                      .data = 2,
                      .tensor = 2,
                      .micro_batch_size = 3,
                      .zero_stage = 1};
  CommandResult result;
  long long bytes = 0;
  const std::vector<double> losses =
      train_across_hosts(plan, "--network-interface eth0", result, bytes);
  expect_single_rank_losses(plan, losses);
  EXPECT_NE(result.output.find(kPlacement), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("paraplan launch: network: eth0 (--network-interface) for Open "
                               "MPI (btl_tcp_if_include, oob_tcp_if_include) and NCCL "
                               "(NCCL_SOCKET_IFNAME==eth0)"),
            std::string::npos)
      << result.output;
  EXPECT_GE(bytes, kSteps * kZeroBytesPerStep);
  std::printf("[ figures  ] %s: %lld bytes over node2's link in %d steps (ZeRO-1 payload %lld)\n",
              plan.name.c_str(), bytes, kSteps, kSteps * kZeroBytesPerStep);
}

TEST_F(MultiHost, DryRunPrintsTheCommandAndWhatEveryHostOffers) {
  const std::string plan_file = plan_for_two_hosts(
      {.name = "hosts_dry_run", .pipeline = 2, .tensor = 2, .micro_batch_size = 3});
  const CommandResult result = run_command(launch_line(plan_file, "--dry-run", "--steps 5"));
  std::printf("[ figures  ] --dry-run on the test bed:\n%s", result.output.c_str());
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const std::string& expected :
       {std::string("mpirun -np 4 --hostfile ") + *directory_ / "hosts" +
            " --map-by slot --bind-to none --mca btl_tcp_if_include 10.77.0.0/24 --mca "
            "oob_tcp_if_include 10.77.0.0/24 ",
        // (each on its own: any PARAPLAN_* variable of the caller's is forwarded too)
        std::string("-x NCCL_SOCKET_IFNAME "), std::string("-x PARAPLAN_SUPERVISOR "),
        std::string("-x PARAPLAN_SUPERVISOR_TOKEN "),
        std::string(" train --plan ") + plan_file + " --data " + *directory_ / "data/train.bin",
        std::string("\nnetwork: 10.77.0.0/24 (auto: it carries every host's address)"),
        std::string("\npreflight: node1 (this host): hostname node1, paraplan "),
        std::string("\npreflight: node2: hostname node2, paraplan "),
        std::string("2 of 2 files readable; interfaces eth0 10.77.0.2/24 docker0 172.17.0.1/16")})
    EXPECT_NE(result.output.find(expected), std::string::npos) << expected;

  // A host no one can reach: one line naming it and the fix, nothing started.
  write_file(*directory_ / "bad_hosts", "node1 slots=2\nnode9 slots=2\n");
  const CommandResult refused =
      run_command(on("node1", std::string(PARAPLAN_BINARY) + " launch --plan " + plan_file +
                                  " --hostfile " + *directory_ / "bad_hosts" + " -- train --data " +
                                  *directory_ / "data/train.bin"));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.output.find("paraplan: error: launch: the preflight found 1 problem(s); "
                                "nothing was started:\n  node9: cannot reach it over ssh (ssh: "
                                "Could not resolve hostname node9"),
            std::string::npos)
      << refused.output;
  EXPECT_EQ(processes_on("node1"), "");
}

// The job runs long enough to be interrupted; a failure must end it well
// before its last step. Silence is noticed after 5 s (the default is 10 s):
// short, but not so short that a loaded test machine, whose network between
// namespaces is the kernel's softirq work, looks like a lost host.
constexpr const char* kLongRun = "--steps 2000";
constexpr const char* kFastDetection = "--heartbeat-timeout 5";

TEST_F(MultiHost, AKilledHostEndsTheWholeJobNamingItsRanks) {
  const std::string plan_file = plan_for_two_hosts(
      {.name = "hosts_killed", .pipeline = 2, .tensor = 2, .micro_batch_size = 3});
  Background job(launch_line(plan_file, kFastDetection, kLongRun), *directory_ / "killed.log");
  ASSERT_TRUE(job.await_output("step:     2", 120s)) << job.output();
  ASSERT_NE(processes_on("node2"), "");
  const auto killed = Clock::now();
  run_command(bed("kill node2"));
  ASSERT_TRUE(job.wait(30s)) << "the launcher did not end the job\n" << job.output();
  const double to_exit = std::chrono::duration<double>(Clock::now() - killed).count();
  const double to_clean = seconds_until_hosts_are_clean(killed, 30s);
  std::printf(
      "[ figures  ] killed host: launcher exited %.1f s after the kill, hosts clean after "
      "%.1f s\n%s",
      to_exit, to_clean, launcher_report(job.output()).c_str());
  EXPECT_EQ(job.exit_code(), 1) << job.output();
  EXPECT_NE(job.output().find("paraplan: error: lost ranks 2-3 on host node2: the process ended "
                              "without finishing (killed, crashed, or its host went down); "
                              "ending the job"),
            std::string::npos)
      << job.output();
  EXPECT_NE(job.output().find("rank 3 on node2 (pid "), std::string::npos) << job.output();
  EXPECT_NE(job.output().find("pipeline stage 1 of 2, data rank 0 of 1, tensor rank 1 of 2"),
            std::string::npos)
      << job.output();
  EXPECT_GE(to_clean, 0) << "left on node1:\n"
                         << processes_on("node1") << "left on node2:\n"
                         << processes_on("node2");
}

TEST_F(MultiHost, AHostCutOffTheNetworkEndsTheWholeJobAndItsOwnRanks) {
  const std::string plan_file = plan_for_two_hosts(
      {.name = "hosts_cut", .data = 2, .tensor = 2, .micro_batch_size = 3, .zero_stage = 1});
  Background job(launch_line(plan_file, kFastDetection, kLongRun), *directory_ / "cut.log");
  ASSERT_TRUE(job.await_output("step:     2", 120s)) << job.output();
  const auto cut = Clock::now();
  run_command(bed("cut node2"));
  const bool ended = job.wait(30s);
  const double to_exit = std::chrono::duration<double>(Clock::now() - cut).count();
  const double to_clean = seconds_until_hosts_are_clean(cut, 30s);
  const std::string left_on_node2 = processes_on("node2");
  run_command(bed("heal node2"));
  std::printf(
      "[ figures  ] cut-off host: launcher exited %.1f s after the cut, hosts clean after "
      "%.1f s\n%s",
      to_exit, to_clean, launcher_report(job.output()).c_str());
  ASSERT_TRUE(ended) << "the launcher did not end the job\n" << job.output();
  EXPECT_EQ(job.exit_code(), 1) << job.output();
  EXPECT_NE(job.output().find("paraplan: error: ranks 2-3 on host node2: nothing heard for "),
            std::string::npos)
      << job.output();
  EXPECT_NE(job.output().find("stopped (SIGSTOP), hung, or the host is cut off the network; "
                              "ending the job"),
            std::string::npos)
      << job.output();
  EXPECT_GE(to_clean, 0) << "left on node1:\n"
                         << processes_on("node1") << "left on node2:\n"
                         << left_on_node2;
}

// ---- --max-restarts ---------------------------------------------------------------------------

// Waits until `path` holds `text` (a checkpoint's DIR/latest naming a step).
bool await_file_text(const std::string& path, const std::string& text, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (read_file(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Each step's loss as the log finally holds it: a resumed run appends the
// steps it redoes after the ones the failed attempt logged.
std::vector<double> last_loss_per_step(const std::string& log) {
  std::map<int, double> by_step;
  for (const auto& line : read_json_lines(log))
    by_step[line["step"].get<int>()] = line["loss"].get<double>();
  std::vector<double> losses;
  for (const auto& [step, loss] : by_step) losses.push_back(loss);
  return losses;
}

// Long enough to fail after a checkpoint, short enough that fp32 runs of
// different meshes stay within kLossTolerance of each other (a dp 2 x tp 2
// run drifts from the single-rank losses by 1.5e-7 at step 51, 1.6e-6 at 300).
constexpr int kRestartSteps = 60;

class MultiHostRestart : public MultiHost {
 protected:
  // The uninterrupted run: one rank, the same job, kRestartSteps steps.
  static const std::vector<double>& reference_losses() {
    static const std::vector<double> losses =
        train({.name = "restart_reference"}, "", nullptr, "", kRestartSteps);
    return losses;
  }

  static void expect_reference_losses(const std::string& log, const std::string& what) {
    const std::vector<double> losses = last_loss_per_step(log);
    const std::vector<double>& expected = reference_losses();
    ASSERT_EQ(losses.size(), expected.size()) << what;
    double largest = 0, before = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], expected[i], kLossTolerance) << what << " step " << i + 1;
      largest = std::max(largest, std::abs(losses[i] - expected[i]));
      if (i < 40) before = largest;
    }
    std::printf(
        "[ figures  ] %s: %zu steps, largest loss difference to the uninterrupted "
        "single-rank run %.3g (%.3g in steps 1-40)\n",
        what.c_str(), losses.size(), largest, before);
  }

  // A 60-step run across both hosts with checkpoints every 10 steps, under
  // --max-restarts; returns once the checkpoint of step 40 is written. Rank
  // `stopped` SIGSTOPs itself at step 45 (PARAPLAN_STOP_RANK_AT_STEP, first
  // attempt only), so the test's fault lands before the end.
  static std::unique_ptr<Background> start(const std::string& name, const std::string& flags,
                                           int stopped, std::string& log,
                                           MeshWay way = MeshWay::kCluster) {
    const std::string plan_file = plan_for_two_hosts(
        {.name = name, .data = 2, .tensor = 2, .micro_batch_size = 3, .zero_stage = 1}, way);
    const std::string checkpoints = *directory_ / (name + "_checkpoints");
    log = *directory_ / (name + ".jsonl");
    auto job = std::make_unique<Background>(
        launch_line(plan_file, std::string(kFastDetection) + " " + flags,
                    "--steps " + std::to_string(kRestartSteps) + " --checkpoint-dir " +
                        checkpoints + " --checkpoint-every 10 --log-json " + log,
                    "env PARAPLAN_STOP_RANK_AT_STEP=" + std::to_string(stopped) + ":45 "),
        *directory_ / (name + ".log"));
    EXPECT_TRUE(await_file_text(checkpoints + "/latest", "step_00000040", 120s)) << job->output();
    return job;
  }

  static void expect_line(const Background& job, const std::string& line) {
    EXPECT_NE(job.output().find(line), std::string::npos) << "missing: " << line << "\n"
                                                          << job.output();
  }

  static std::string launcher_lines(const std::string& output) {
    std::string lines, line;
    std::istringstream in(output);
    while (std::getline(in, line))
      if (line.rfind("paraplan launch: ", 0) == 0 || line.rfind("paraplan: error: ", 0) == 0)
        lines += "    " + line + "\n";
    return lines;
  }
};

// Planned the AutoDist way (mesh_row x mesh_col): the re-plan is for the one
// host left and its 2 slots, not [cluster]'s default 8 devices per node.
TEST_F(MultiHostRestart, ALostHostIsDroppedAndTheJobCarriesOnWithTheSameLosses) {
  std::string log;
  const auto job = start("restart_lost", "--max-restarts 1", 2, log, MeshWay::kMeshRowCol);
  const auto killed = Clock::now();
  run_command(bed("kill node2"));  // its ranks die, and then the host drops off the network
  run_command(bed("cut node2"));
  const bool ended = job->wait(240s);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  run_command(bed("heal node2"));
  ASSERT_TRUE(ended) << job->output();
  std::printf("[ figures  ] lost host: the job ended %.1f s after the kill\n%s", seconds,
              launcher_lines(job->output()).c_str());
  EXPECT_EQ(job->exit_code(), 0) << job->output();
  expect_line(*job, "paraplan launch: dropping host node2");
  expect_line(*job, "it fails the preflight now: cannot reach it over ssh");
  expect_line(*job, "paraplan launch: re-planned for 1 node(s): ");
  expect_line(*job, "on 1 node x 2 devices");
  expect_line(*job, "paraplan launch: restart 1 of 1: resuming from step ");
  expect_line(*job, "paraplan launch: finished after 1 restart(s): ");
  expect_reference_losses(log, "dropped host node2");
}

TEST_F(MultiHostRestart, AHostCutOffIsDroppedAndItsRanksCannotJoinTheNewJob) {
  std::string log;
  const auto job = start("restart_cut", "--max-restarts 1", 2, log);
  const auto cut = Clock::now();
  run_command(bed("cut node2"));  // node2 keeps running until it stops hearing the launcher
  const bool ended = job->wait(240s);
  const double seconds = std::chrono::duration<double>(Clock::now() - cut).count();
  const std::string left_on_node2 = processes_on("node2");
  run_command(bed("heal node2"));
  ASSERT_TRUE(ended) << job->output();
  std::printf("[ figures  ] cut-off host: the job ended %.1f s after the cut\n%s", seconds,
              launcher_lines(job->output()).c_str());
  EXPECT_EQ(job->exit_code(), 0) << job->output();
  expect_line(*job,
              "paraplan launch: dropping host node2 (nothing was heard from its ranks): it "
              "fails the preflight now: cannot reach it over ssh");
  expect_line(*job, "paraplan launch: re-planned for 1 node(s): ");
  expect_line(*job, "paraplan launch: placement: node1 ranks 0-1; every tensor group");
  EXPECT_EQ(left_on_node2, "") << "the cut-off host's ranks outlived the restarted job";
  expect_reference_losses(log, "cut-off host node2");
}

TEST_F(MultiHostRestart, OneKilledRankRestartsOnTheSameHosts) {
  std::string log;
  const auto job = start("restart_transient", "--max-restarts 2", 3, log);
  // One rank of node2, as an out-of-memory kill or a crash takes one process.
  std::istringstream lines(processes_on("node2"));
  std::string pid, name, victim;
  while (lines >> pid >> name)
    if (name == "paraplan" && victim.empty()) victim = pid;
  ASSERT_FALSE(victim.empty()) << processes_on("node2");
  run_command(on("node2", "kill -9 " + victim));
  ASSERT_TRUE(job->wait(240s)) << job->output();
  std::printf("%s", launcher_lines(job->output()).c_str());
  EXPECT_EQ(job->exit_code(), 0) << job->output();
  expect_line(*job, "but answers the preflight again: a transient fault; keeping it");
  expect_line(*job, "paraplan launch: retrying on the same 2 host(s)");
  expect_line(*job, "paraplan launch: restart 1 of 2: resuming from step ");
  EXPECT_EQ(job->output().find("re-planned"), std::string::npos) << job->output();
  expect_reference_losses(log, "one killed rank");
}

TEST_F(MultiHostRestart, ASecondFailureWithTheRestartsUsedEndsTheJobLeavingTheCheckpoints) {
  const std::string plan_file = plan_for_two_hosts(
      {.name = "restart_twice", .data = 2, .tensor = 2, .micro_batch_size = 3, .zero_stage = 1});
  const std::string checkpoints = *directory_ / "restart_twice_checkpoints";
  Background job(launch_line(plan_file, std::string(kFastDetection) + " --max-restarts 1",
                             std::string(kLongRun) + " --checkpoint-dir " + checkpoints +
                                 " --checkpoint-every 10"),
                 *directory_ / "restart_twice.log");
  const auto kill_a_rank_on_node2 = [&] {
    std::istringstream lines(processes_on("node2"));
    std::string pid, name;
    while (lines >> pid >> name)
      if (name == "paraplan") return run_command(on("node2", "kill -9 " + pid)).exit_code == 0;
    return false;
  };
  ASSERT_TRUE(await_file_text(checkpoints + "/latest", "step_00000020", 120s)) << job.output();
  ASSERT_TRUE(kill_a_rank_on_node2()) << processes_on("node2");
  ASSERT_TRUE(job.await_output("paraplan launch: restart 1 of 1: resuming from step ", 120s))
      << job.output();
  // The restarted attempt runs and saves, then loses a rank again.
  const std::string resumed_at = read_file(checkpoints + "/latest");
  const auto saved_again = Clock::now() + 120s;
  while (read_file(checkpoints + "/latest") == resumed_at && Clock::now() < saved_again)
    std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(kill_a_rank_on_node2()) << processes_on("node2");
  const auto killed = Clock::now();
  ASSERT_TRUE(job.wait(60s)) << job.output();
  const double to_clean = seconds_until_hosts_are_clean(killed, 30s);
  std::printf("[ figures  ] second failure: hosts clean %.1f s after the kill\n%s", to_clean,
              launcher_lines(job.output()).c_str());
  EXPECT_EQ(job.exit_code(), 1) << job.output();
  expect_line(job, "paraplan launch: not restarting: all 1 restart(s) of --max-restarts used");
  EXPECT_GE(to_clean, 0) << processes_on("node1") << processes_on("node2");
  // The checkpoints stay whole: latest names a complete step directory.
  std::string latest = read_file(checkpoints + "/latest");
  latest.erase(latest.find_last_not_of("\n") + 1);
  EXPECT_NE(read_file(checkpoints + "/" + latest + "/train_state.json").find("\"step\""),
            std::string::npos)
      << latest;
}

}  // namespace
