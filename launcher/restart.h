// restart.h: `paraplan launch --max-restarts N [--min-nodes K]`: when a job
// loses a rank (killed, crashed, host down) or hears nothing from one
// (stopped, cut off), the launcher ends it as always, then decides, one line
// per decision: each failed host either answers the preflight again (a
// transient fault: the same hosts again) or is dropped (the hostfile the user
// gave is never edited; the hosts a restart uses are written beside the
// checkpoints); the job is planned again for the hosts left when their count
// changed (planner/replan.h: same model, global batch, seed, optimizer,
// schedule and data order), and it resumes from the latest checkpoint of the
// train command's --checkpoint-dir. Every plan gives the single-rank losses,
// so the resumed run logs the losses the uninterrupted run would have.
//
// It does not restart after a rank's own error (a restart would meet it
// again), after the user's Ctrl-C, when fewer than --min-nodes hosts are left,
// when no plan fits the hosts left, or when the restarts are used up: then
// one line says why and the exit status is the failed attempt's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/job_watch.h"
#include "launcher/launch.h"

namespace paraplan {

// What a failed attempt left for the decision.
struct RestartInput {
  std::optional<JobFailure> failure;  // as the supervisor saw it; nullopt: mpirun alone failed
  int exit_status = 1;
  std::vector<HostEntry> hosts;  // the attempt's; empty: every rank on this machine
  // Hosts (hostfile names) that fail the preflight now, each with its reason.
  std::vector<std::pair<std::string, std::string>> unhealthy;
  int restarts_used = 0, max_restarts = 0, min_nodes = 1;
};

struct RestartDecision {
  bool restart = false;
  std::vector<HostEntry> hosts;    // the hosts to carry on with
  std::vector<std::string> lines;  // one per decision, as printed
};

// Pure: the lines and the hosts to carry on with, from a failed attempt.
RestartDecision decide_restart(const RestartInput& input);

// The devices per node a re-plan for `hosts` uses: their slots when every
// host has as many (what launch requires of a plan's nodes); else the fewest,
// which every host can run, with `line` saying so. The plan then comes from
// the hosts, never from the options that made the first mesh (mesh_row x
// mesh_col, [cluster], a preset or world_size alone).
struct HostDevices {
  int devices_per_node = 0;
  std::string slots;  // "node1 4, node3 2" when the hosts differ, else empty
  std::string line;   // empty when the hosts agree
};
HostDevices devices_per_host(const std::vector<HostEntry>& hosts);

// The line that refuses a restart when no plan fits the hosts left: one line,
// naming the hosts' devices (and their slots when they differ) and the
// planner's first reason line.
std::string no_plan_fits_line(size_t hosts_left, const HostDevices& devices,
                              const std::string& reason);

// run_launch with --max-restarts > 0.
int run_launch_with_restarts(const LaunchOptions& options);

}  // namespace paraplan
