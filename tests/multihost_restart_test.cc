// multihost_restart_test.cc: `paraplan launch --max-restarts` across the two
// hosts of the test bed (tests/testbed.sh; ctest MultiHost.restarts, alone:
// its jobs call a host lost after 5 s of silence).
//
// - A host killed and gone, or cut off, is dropped and the job re-planned for
//   the host left and its slots, however the first mesh was made (mesh_row x
//   mesh_col, [cluster], a preset, world_size alone) and whichever ZeRO stage
//   the job fixed (1, 2, 3: kept): the launcher's decision, and the plan file
//   it writes, is the plan `paraplan plan --what-if-lost-nodes 1` named, and
//   the job resumes from its checkpoint (under ZeRO-3 one the sharded
//   parameters were gathered for).
// - One rank killed restarts on the same hosts; a second failure with the
//   restarts used ends the job, leaving the checkpoints whole.
// Each run's losses, the redone steps as the resumed run logs them, are the
// uninterrupted single-rank run's.
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "multihost_fixture.h"

namespace {

using namespace paraplan::testing;

// Waits until `path` holds `text` (a checkpoint's DIR/latest naming a step).
bool await_file_text(const std::string& path, const std::string& text, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (read_file(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

// Waits until the checkpoint directory's `latest` names a step of at least
// `step`: saved every 10 steps of about 10 ms, it may pass any one name
// between two looks.
bool await_checkpoint_at_least(const std::string& checkpoints, int step,
                               std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    const std::string latest = read_file(checkpoints + "/latest");
    const size_t at = latest.find("step_");
    if (at != std::string::npos && std::atoi(latest.c_str() + at + 5) >= step) return true;
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

std::string step_name(int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08d", step);
  return name;
}

// How long a job runs and where its fault lands. Long enough to fail after a
// checkpoint, short enough that fp32 runs of different meshes stay within
// kLossTolerance of each other (a dp 2 x tp 2 run drifts from the single-rank
// losses by 1.5e-7 at step 51, 1.6e-6 at 300). The test's fault comes once
// the checkpoint of fault_after is written; a rank of node2 SIGSTOPs itself
// at stop_at (PARAPLAN_STOP_RANK_AT_STEP, first attempt only), so the fault
// lands before the end however slowly the test reacts.
struct RunLength {
  int steps = 60, checkpoint_every = 10, fault_after = 40, stop_at = 45;
};
// 16 ranks on the bed's 2 cores take about 0.5 s a step: a shorter run.
constexpr RunLength kSixteenRanks{
    .steps = 20, .checkpoint_every = 5, .fault_after = 10, .stop_at = 15};
constexpr int kReferenceSteps = 60;

class MultiHostRestart : public MultiHostBed {
 protected:
  // The uninterrupted run: one rank, the same job. The learning-rate schedule
  // ends at the job's total_steps (20), so a shorter run's losses are the
  // first of these.
  static const std::vector<double>& reference_losses() {
    static const std::vector<double> losses =
        train({.name = "restart_reference"}, "", nullptr, "", kReferenceSteps);
    return losses;
  }

  static void expect_reference_losses(const std::string& log, int steps, const std::string& what,
                                      int fault_after) {
    const std::vector<double> losses = last_loss_per_step(log);
    const std::vector<double>& reference = reference_losses();
    ASSERT_EQ(losses.size(), static_cast<size_t>(steps)) << what;
    ASSERT_GE(reference.size(), losses.size()) << what;
    double largest = 0, before = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], reference[i], kLossTolerance) << what << " step " << i + 1;
      largest = std::max(largest, std::abs(losses[i] - reference[i]));
      if (static_cast<int>(i) < fault_after) before = largest;
    }
    std::printf(
        "[ figures  ] %s: %zu steps, largest loss difference to the uninterrupted "
        "single-rank run %.3g (%.3g in steps 1-%d)\n",
        what.c_str(), losses.size(), largest, before, fault_after);
  }

  // A dp 2 x tp 2 + ZeRO-1 job (or ZeRO-zero_stage; or, planned with a
  // preset or world_size alone, whatever the planner picks for 16 devices)
  // across both hosts with checkpoints, under --max-restarts; returns once the
  // checkpoint of run.fault_after is written.
  static std::unique_ptr<Background> start(const std::string& name, const std::string& flags,
                                           int stopped, std::string& log,
                                           MeshWay way = MeshWay::kCluster,
                                           const RunLength& run = RunLength{},
                                           TwoHostPlan* planned_out = nullptr, int zero_stage = 1) {
    const TwoHostPlan planned = plan_two_hosts(
        {.name = name, .data = 2, .tensor = 2, .micro_batch_size = 3, .zero_stage = zero_stage},
        way);
    if (planned_out != nullptr) *planned_out = planned;
    const std::string checkpoints = *directory_ / (name + "_checkpoints");
    log = *directory_ / (name + ".jsonl");
    auto job = std::make_unique<Background>(
        launch_line(planned.plan_file, std::string(kFastDetection) + " " + flags,
                    "--steps " + std::to_string(run.steps) + " --checkpoint-dir " + checkpoints +
                        " --checkpoint-every " + std::to_string(run.checkpoint_every) +
                        " --log-json " + log,
                    "env PARAPLAN_STOP_RANK_AT_STEP=" + std::to_string(stopped) + ":" +
                        std::to_string(run.stop_at) + " ",
                    planned.hostfile),
        *directory_ / (name + ".log"));
    EXPECT_TRUE(await_file_text(checkpoints + "/latest", step_name(run.fault_after), 180s))
        << job->output();
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

  // The launcher's line deciding the re-plan, "" if none.
  static std::string replan_line(const std::string& output) {
    const std::string head = "paraplan launch: re-planned for ";
    const size_t at = output.find(head);
    return at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
  }

  // The plan file a restart wrote, as `paraplan inspect` shows it: the mesh,
  // micro-batching and ZeRO stage of the what-if's "pp 1 x dp 2 x tp 1 on 1
  // node x 2 devices, micro-batch 3 x 2, ZeRO-3, predicted step ...".
  static void expect_plan_file_as_the_what_if_said(const std::string& plan_file,
                                                   const TwoHostPlan& planned) {
    const CommandResult inspected = run("inspect " + plan_file);
    ASSERT_EQ(inspected.exit_code, 0) << inspected.output;
    const std::string& what_if = planned.what_if;
    const auto contains = [&](const std::string& text) {
      EXPECT_NE(inspected.output.find(text), std::string::npos)
          << "missing: " << text << "\nwhat-if: " << what_if << "\n"
          << inspected.output;
    };
    contains("mesh: " + what_if.substr(0, what_if.find(" on ")) + " = ");
    contains(" ranks on 1 nodes x " + std::to_string(planned.devices_per_node) + " devices");
    const size_t micro = what_if.find("micro-batch ") + 12;
    contains("= micro-batch " + what_if.substr(micro, what_if.find(',', micro) - micro) +
             " micro-batches");
    const size_t zero = what_if.find(", ZeRO-");
    contains(zero == std::string::npos
                 ? "zero: off (stage 0)"
                 : "zero: stage " +
                       what_if.substr(zero + 7, what_if.find(',', zero + 7) - zero - 7) + ", ");
  }

  // The launcher's decision after losing node2: the plan the what-if named,
  // on the one host left and its slots, written beside the checkpoints.
  static void expect_replanned_as_the_what_if_said(const Background& job,
                                                   const TwoHostPlan& planned,
                                                   const std::string& name) {
    ASSERT_FALSE(planned.what_if.empty());
    const std::string decision =
        "paraplan launch: re-planned for 1 node(s): " + planned.what_if + " (was pp ";
    const std::string plan_file = *directory_ / (name + "_checkpoints/restart-1.pplan");
    expect_line(job, decision);
    expect_line(job, "on 1 node x " + std::to_string(planned.devices_per_node) + " devices");
    expect_line(job, "), " + plan_file + "\n");
    expect_line(job, "paraplan launch: placement: node1 ranks 0-" +
                         std::to_string(planned.devices_per_node - 1) + "; every tensor group");
    expect_plan_file_as_the_what_if_said(plan_file, planned);
  }

  // The step the restart resumed from, as the launcher says it; -1 if none.
  static int resumed_step(const std::string& output) {
    const std::string head = "paraplan launch: restart 1 of 1: resuming from step ";
    const size_t at = output.find(head);
    return at == std::string::npos ? -1 : std::atoi(output.c_str() + at + head.size());
  }

  // node2's ranks killed after a checkpoint, then the host gone from the
  // network: dropped, re-planned for node1, resumed, the same losses. A job
  // whose [planner] fixed the ZeRO stage (zero_stage; the ways but a preset
  // and world_size alone) keeps it: the what-if, the new plan and the old.
  static void expect_a_lost_host_replanned(const std::string& name, MeshWay way,
                                           const RunLength& run, int stopped, int zero_stage = 1) {
    std::string log;
    TwoHostPlan planned;
    const auto job = start(name, "--max-restarts 1", stopped, log, way, run, &planned, zero_stage);
    const auto killed = Clock::now();
    run_command(bed("kill node2"));  // its ranks die, and then the host drops off the network
    run_command(bed("cut node2"));
    const bool ended = job->wait(240s);
    const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
    run_command(bed("heal node2"));
    ASSERT_TRUE(ended) << job->output();
    std::printf("[ figures  ] %s: the job ended %.1f s after the kill; what-if: %s\n%s",
                name.c_str(), seconds, planned.what_if.c_str(),
                launcher_lines(job->output()).c_str());
    EXPECT_EQ(job->exit_code(), 0) << job->output();
    expect_line(*job, "paraplan launch: dropping host node2");
    expect_line(*job, "it fails the preflight now: cannot reach it over ssh");
    expect_replanned_as_the_what_if_said(*job, planned, name);
    if (way == MeshWay::kCluster || way == MeshWay::kMeshRowCol) {
      const std::string zero = ", ZeRO-" + std::to_string(zero_stage) + ", ";
      EXPECT_NE(planned.what_if.find(zero), std::string::npos) << planned.what_if;
      const std::string decision = replan_line(job->output());
      size_t times = 0;  // the new plan's and the old one's (was ...)
      for (size_t at = decision.find(zero); at != std::string::npos;
           at = decision.find(zero, at + 1))
        ++times;
      EXPECT_EQ(times, 2u) << decision;
    }
    // The last checkpoint the first attempt wrote: at run.fault_after or later.
    const int resumed = resumed_step(job->output());
    EXPECT_GE(resumed, run.fault_after) << job->output();
    EXPECT_LT(resumed, run.steps) << job->output();
    expect_line(*job, "paraplan launch: finished after 1 restart(s): ");
    expect_reference_losses(log, run.steps, name, run.fault_after);
  }
};

// Planned the AutoDist way (mesh_row x mesh_col): the re-plan is for the one
// host left and its 2 slots, not [cluster]'s default 8 devices per node.
TEST_F(MultiHostRestart, ALostHostIsDroppedAndTheJobCarriesOnWithTheSameLosses) {
  expect_a_lost_host_replanned("restart_lost", MeshWay::kMeshRowCol, RunLength{}, 2);
}

// [cluster] devices_per_node = 2 and ZeRO-3: the first attempt's checkpoints
// gather the parameters dp 2 x tp 2 sharded; the re-plan for the host left
// keeps ZeRO-3 (dp 2 x tp 1) and resumes from them.
TEST_F(MultiHostRestart, AZero3JobLosingAHostIsReplannedAsZero3AndResumesFromItsShardedCheckpoint) {
  expect_a_lost_host_replanned("restart_zero3", MeshWay::kCluster, RunLength{}, 2, 3);
}

// The same with ZeRO-2: gradients sharded, parameters whole.
TEST_F(MultiHostRestart, AZero2JobLosingAHostIsReplannedAsZero2) {
  expect_a_lost_host_replanned("restart_zero2", MeshWay::kCluster, RunLength{}, 2, 2);
}

// A preset's 8 devices per node, world_size 16: 16 ranks on hosts of 8
// slots, then 8 on the one left.
TEST_F(MultiHostRestart, APresetsPlanIsReplannedForTheHostLeft) {
  expect_a_lost_host_replanned("restart_preset", MeshWay::kPreset, kSixteenRanks, 8);
}

// world_size 16 alone: [cluster]'s default 8 devices per node made the mesh.
TEST_F(MultiHostRestart, AWorldSizeAlonePlanIsReplannedForTheHostLeft) {
  expect_a_lost_host_replanned("restart_world", MeshWay::kWorldSizeAlone, kSixteenRanks, 8);
}

// Planned with [cluster] devices_per_node = 2.
TEST_F(MultiHostRestart, AHostCutOffIsDroppedAndItsRanksCannotJoinTheNewJob) {
  std::string log;
  TwoHostPlan planned;
  const auto job =
      start("restart_cut", "--max-restarts 1", 2, log, MeshWay::kCluster, RunLength{}, &planned);
  const auto cut = Clock::now();
  run_command(bed("cut node2"));  // node2 keeps running until it stops hearing the launcher
  const bool ended = job->wait(240s);
  const double seconds = std::chrono::duration<double>(Clock::now() - cut).count();
  const std::string left_on_node2 = processes_on("node2");
  run_command(bed("heal node2"));
  ASSERT_TRUE(ended) << job->output();
  std::printf("[ figures  ] cut-off host: the job ended %.1f s after the cut; what-if: %s\n%s",
              seconds, planned.what_if.c_str(), launcher_lines(job->output()).c_str());
  EXPECT_EQ(job->exit_code(), 0) << job->output();
  expect_line(*job,
              "paraplan launch: dropping host node2 (nothing was heard from its ranks): it "
              "fails the preflight now: cannot reach it over ssh");
  expect_replanned_as_the_what_if_said(*job, planned, "restart_cut");
  EXPECT_EQ(left_on_node2, "") << "the cut-off host's ranks outlived the restarted job";
  expect_reference_losses(log, RunLength{}.steps, "cut-off host node2", RunLength{}.fault_after);
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
  expect_reference_losses(log, RunLength{}.steps, "one killed rank", RunLength{}.fault_after);
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
  ASSERT_TRUE(await_checkpoint_at_least(checkpoints, 20, 120s)) << job.output();
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
