// restart.cc: the restart decision and loop of `paraplan launch --max-restarts`
// (restart.h).
#include "launcher/restart.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/atomic_file.h"
#include "launcher/preflight.h"
#include "launcher/supervisor.h"
#include "planner/replan.h"
#include "schema/plan_io.h"

namespace paraplan {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// The name a rank reported (gethostname) and the hostfile's name for the same
// machine: equal, or equal up to the domain ("node2" and "node2.cluster").
bool same_host(const std::string& hostfile_name, const std::string& reported) {
  const auto short_name = [](const std::string& name) {  // an address stays whole
    const bool address = name.find_first_not_of("0123456789.") == std::string::npos;
    return address ? name : name.substr(0, name.find('.'));
  };
  return hostfile_name == reported || short_name(hostfile_name) == short_name(reported);
}

// The command without --flag (and its value when it takes one).
std::vector<std::string> without_flag(const std::vector<std::string>& command,
                                      const std::string& flag, bool takes_value) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == flag) {
      if (takes_value) ++i;
      continue;
    }
    if (command[i].rfind(flag + "=", 0) == 0) continue;
    kept.push_back(command[i]);
  }
  return kept;
}

// What DIR/latest names ("step_00000012"), or "" when there is none.
std::string read_latest(const std::string& directory) {
  std::ifstream in(fs::path(directory) / "latest");
  std::string name;
  return in >> name ? name : "";
}

// The step DIR/latest names (step_00000012 -> 12), or -1 when there is none.
long latest_checkpoint_step(const std::string& directory) {
  const std::string name = read_latest(directory);
  if (name.rfind("step_", 0) != 0) return -1;
  try {
    return std::stol(name.substr(5));
  } catch (const std::exception&) {
    return -1;
  }
}

// The last step a --log-json file holds, or -1.
long last_logged_step(const std::string& path) {
  if (path.empty()) return -1;
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  try {
    return last.empty() ? -1 : nlohmann::json::parse(last).at("step").get<long>();
  } catch (const std::exception&) {
    return -1;
  }
}

// The hosts the preflight finds a problem with now (preflight.h: unreachable,
// another build, a file they cannot read, too few GPUs, the checkpoint
// directory not shared), each with the first.
std::vector<std::pair<std::string, std::string>> unhealthy_hosts(
    const LaunchOptions& options, const std::vector<HostEntry>& hosts) {
  PreflightRequest request;
  request.hosts = hosts;
  request.binary = options.paraplan_binary.empty() ? this_executable() : options.paraplan_binary;
  request.files = files_every_rank_reads(options);
  request.count_gpus = command_wants_gpus(options.command);
  request.environment = launch_environment(options);
  request.remote_shell = remote_shell(options.mpirun_arguments, request.environment);
  request.timeout_seconds = 20;
  std::optional<SharedDirectoryMarker> marker;  // a host that lost the shared mount is unhealthy
  ask_about_checkpoint_directory(options, request, marker);
  std::vector<std::pair<std::string, std::string>> unhealthy;
  const std::vector<HostFindings> findings = run_preflight(request);
  for (size_t i = 0; i < findings.size(); ++i) {
    const std::vector<std::string> problems =
        host_problems(findings[i], hosts[i].slots, request, paraplan_version(), this_build_id());
    if (!problems.empty()) unhealthy.emplace_back(findings[i].host, first_line(problems.front()));
  }
  return unhealthy;
}

void write_hostfile(const std::string& path, const std::vector<HostEntry>& hosts) {
  std::string text = "# written by paraplan launch --max-restarts: the hosts a restart runs on\n";
  for (const HostEntry& host : hosts)
    text += host.name + " slots=" + std::to_string(host.slots) + "\n";
  write_file_atomically(path, text);
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

void say(const std::string& line) {
  std::cout << "paraplan launch: " << line << std::endl;
}

// Where the train command keeps its checkpoints, and what was there before.
struct CheckpointPlace {
  std::string directory;  // absolute
  std::string log_json;   // absolute, or "" without --log-json
  bool resumes = false;   // the command had --resume
  std::string latest_at_launch;
};

// Checks the options a restart needs and creates the checkpoint directory.
CheckpointPlace checkpoint_place(const LaunchOptions& options) {
  const std::string checkpoint_dir = command_flag_value(options.command, "--checkpoint-dir");
  if (checkpoint_dir.empty() || options.command.empty() || options.command.front() != "train")
    throw std::runtime_error(
        "launch: --max-restarts needs a train command with --checkpoint-dir DIR (a restart "
        "resumes from DIR's latest checkpoint; add --checkpoint-every K to bound what is redone)");
  if (options.min_nodes < 1)
    throw std::runtime_error("launch: --min-nodes must be at least 1, got " +
                             std::to_string(options.min_nodes));
  CheckpointPlace place;
  place.directory = with_absolute_paths({"--checkpoint-dir", checkpoint_dir})[1];
  place.log_json = command_flag_value(options.command, "--log-json");
  if (!place.log_json.empty())
    place.log_json = with_absolute_paths({"--log-json", place.log_json})[1];
  fs::create_directories(place.directory);
  // A checkpoint already there belongs to this job only when the command
  // resumes from it; else a restart resumes only from one this job wrote.
  place.resumes = std::find(options.command.begin(), options.command.end(), "--resume") !=
                  options.command.end();
  place.latest_at_launch = read_latest(place.directory);
  return place;
}

// What the restarts cost so far, for the summary at the end.
struct RestartCosts {
  int restarts = 0;
  long steps_redone = 0;
  double seconds_lost = 0;
};

// The decision after a failed attempt, its lines said.
RestartDecision decide_and_say(const LaunchOptions& options, const LaunchOptions& attempt,
                               const std::vector<HostEntry>& hosts, int restarts, int status,
                               const std::optional<JobFailure>& failure) {
  RestartInput input;
  input.failure = failure;
  input.exit_status = status;
  input.hosts = hosts;
  input.restarts_used = restarts;
  input.max_restarts = options.max_restarts;
  input.min_nodes = options.min_nodes;
  if (!hosts.empty() && restarts < options.max_restarts)  // else nothing to decide
    input.unhealthy = unhealthy_hosts(attempt, hosts);
  RestartDecision decision = decide_restart(input);
  for (const std::string& line : decision.lines) say(line);
  return decision;
}

// Plans the job again for hosts_left (written to plan_path), leaving out the
// hosts the best plan does not use. False, said why, when no plan fits.
bool replan_for_hosts_left(const LoadedPlan& current, const LaunchOptions& options,
                           const std::string& plan_path, const HostDevices& devices,
                           std::vector<HostEntry>& hosts_left, LaunchOptions& attempt) {
  FallbackPlan fallback;
  try {
    fallback =
        plan_for_nodes_left(current.plan(), attempt.plan_path, static_cast<int>(hosts_left.size()),
                            devices.devices_per_node, options.min_nodes);
  } catch (const std::exception& error) {
    say(no_plan_fits_line(hosts_left.size(), devices, error.what()));
    return false;
  }
  if (!devices.line.empty()) say(devices.line);
  write_plan(plan_path, fallback.outcome.plan.data(), fallback.outcome.plan.size());
  const LoadedPlan replanned = load_plan(plan_path);
  if (fallback.num_nodes < static_cast<int>(hosts_left.size())) {
    std::string left_out;
    for (size_t i = static_cast<size_t>(fallback.num_nodes); i < hosts_left.size(); ++i)
      left_out += (left_out.empty() ? "" : ", ") + hosts_left[i].name;
    say("leaving out " + left_out + ": the best plan uses " + std::to_string(fallback.num_nodes) +
        " of the " + std::to_string(hosts_left.size()) + " hosts left");
    hosts_left.resize(static_cast<size_t>(fallback.num_nodes));
  }
  say("re-planned for " + std::to_string(fallback.num_nodes) + " node(s): " +
      plan_summary(replanned.plan()) + " (was " + plan_summary(current.plan()) + "), " + plan_path);
  attempt.plan_path = plan_path;
  return true;
}

// Moves the attempt onto the hosts the decision keeps: the plan for them (the
// same when their count did not change) and their hostfile. False when no
// plan fits them.
bool move_to_hosts_left(const LaunchOptions& options, const std::string& directory, int restarts,
                        RestartDecision& decision, std::vector<HostEntry>& hosts,
                        LaunchOptions& attempt) {
  const std::string tag = "restart-" + std::to_string(restarts);
  const LoadedPlan current = load_plan(attempt.plan_path);
  const schema::Mesh& mesh = *current.plan().mesh();
  const HostDevices devices = devices_per_host(decision.hosts);
  for (HostEntry& host : decision.hosts) host.slots = devices.devices_per_node;
  if (!hosts.empty() && (static_cast<int>(decision.hosts.size()) != mesh.num_nodes() ||
                         devices.devices_per_node != mesh.devices_per_node())) {
    const std::string plan_path = (fs::path(directory) / (tag + ".pplan")).string();
    if (!replan_for_hosts_left(current, options, plan_path, devices, decision.hosts, attempt))
      return false;
  } else if (!devices.line.empty()) {
    say(devices.line);
  }
  if (!hosts.empty()) {
    hosts = decision.hosts;
    attempt.hostfile = (fs::path(directory) / (tag + ".hosts")).string();
    write_hostfile(attempt.hostfile, hosts);
  }
  return true;
}

// Points the attempt's command at the latest checkpoint, or at step 0 when
// there is none, and counts what the failure cost.
void resume_from_latest(const LaunchOptions& options, const CheckpointPlace& place,
                        Clock::time_point started, Clock::time_point failed_at, RestartCosts& costs,
                        LaunchOptions& attempt) {
  const std::string& directory = place.directory;
  std::vector<std::string> command = without_flag(attempt.command, "--plan", true);
  command = without_flag(command, "--resume", false);
  const bool ours = place.resumes || read_latest(directory) != place.latest_at_launch;
  const long resumed = ours ? latest_checkpoint_step(directory) : -1;
  const long reached = last_logged_step(place.log_json);
  const long redone = reached > resumed ? reached - std::max(resumed, 0L) : 0;
  costs.steps_redone += redone;
  const std::string restart =
      "restart " + std::to_string(costs.restarts) + " of " + std::to_string(options.max_restarts);
  if (resumed >= 0) {
    // --init-from starts a run; a resumed one continues it (train refuses both).
    command = without_flag(command, "--init-from", true);
    command.push_back("--resume");
    const auto written = fs::last_write_time(fs::path(directory) / "latest");
    // The work between the checkpoint and the failure; the restart's own
    // time is added by the caller.
    const double since_checkpoint =
        std::chrono::duration<double>(fs::file_time_type::clock::now() - written).count() -
        std::chrono::duration<double>(Clock::now() - failed_at).count();
    costs.seconds_lost += std::max(since_checkpoint, 0.0);
    say(restart + ": resuming from step " + std::to_string(resumed) + " (" + directory +
        "/latest)" +
        (redone > 0 ? ", redoing steps " + std::to_string(resumed + 1) + "-" +
                          std::to_string(reached) + " (" + std::to_string(redone) + ")"
                    : ""));
  } else {
    costs.seconds_lost += std::chrono::duration<double>(failed_at - started).count();
    say(restart + ": no checkpoint in " + directory + " yet: starting again from step 0");
  }
  attempt.command = command;
}

}  // namespace

RestartDecision decide_restart(const RestartInput& input) {
  RestartDecision decision;
  auto stop = [&](const std::string& why) {
    decision.restart = false;
    decision.lines.push_back("not restarting: " + why);
    return decision;
  };
  const auto unhealthy_reason = [&](const std::string& host) -> const std::string* {
    for (const auto& [name, reason] : input.unhealthy)
      if (name == host) return &reason;
    return nullptr;
  };
  if (input.failure && input.failure->kind == JobFailure::Kind::kRankError)
    return stop("a rank reported an error of its own (above), which a restart would meet again");
  if (input.restarts_used >= input.max_restarts)
    return stop("all " + std::to_string(input.max_restarts) + " restart(s) of --max-restarts used");
  if (!input.failure && input.unhealthy.empty())
    return stop("the job failed (mpirun's exit status " + std::to_string(input.exit_status) +
                ") without a lost or silent rank and every host answers");

  // Each failed host, and any other that no longer answers.
  if (input.failure && input.failure->by_signal)
    decision.lines.push_back(
        "the ranks named above were ended by mpirun; the preflight decides which host failed");
  const std::string how = !input.failure ? "mpirun failed"
                          : input.failure->kind == JobFailure::Kind::kLost
                              ? "its ranks ended without finishing"
                          : input.failure->kind == JobFailure::Kind::kNotArrived
                              ? "its ranks did not arrive where others waited"
                              : "nothing was heard from its ranks";
  for (const HostEntry& host : input.hosts) {
    const bool failed =
        input.failure && !input.failure->by_signal &&
        std::any_of(input.failure->hosts.begin(), input.failure->hosts.end(),
                    [&](const std::string& name) { return same_host(host.name, name); });
    const std::string* reason = unhealthy_reason(host.name);
    if (reason != nullptr) {
      decision.lines.push_back("dropping host " + host.name + (failed ? " (" + how + ")" : "") +
                               ": it fails the preflight now: " + *reason);
    } else {
      decision.hosts.push_back(host);
      if (failed)
        decision.lines.push_back(
            "host " + host.name + " failed (" + how +
            ") but answers the preflight again: a transient fault; keeping it");
    }
  }
  if (input.hosts.empty())
    decision.lines.push_back("every rank runs on this machine: retrying here (" + how + ")");
  if (!input.hosts.empty() && static_cast<int>(decision.hosts.size()) < input.min_nodes)
    return stop(std::to_string(decision.hosts.size()) + " host(s) left, fewer than --min-nodes " +
                std::to_string(input.min_nodes));
  if (decision.hosts.size() == input.hosts.size() && !input.hosts.empty())
    decision.lines.push_back("retrying on the same " + std::to_string(input.hosts.size()) +
                             " host(s)");
  decision.restart = true;
  return decision;
}

HostDevices devices_per_host(const std::vector<HostEntry>& hosts) {
  HostDevices devices;
  if (hosts.empty()) return devices;
  const auto fewest =
      std::min_element(hosts.begin(), hosts.end(),
                       [](const HostEntry& a, const HostEntry& b) { return a.slots < b.slots; });
  devices.devices_per_node = fewest->slots;
  const bool uniform = std::all_of(hosts.begin(), hosts.end(), [&](const HostEntry& host) {
    return host.slots == fewest->slots;
  });
  if (!uniform) {
    for (const HostEntry& host : hosts)
      devices.slots +=
          (devices.slots.empty() ? "" : ", ") + host.name + " " + std::to_string(host.slots);
    devices.line = "the hosts left have different slots (" + devices.slots + "): planning " +
                   std::to_string(fewest->slots) + " device(s) on each, as many as " +
                   fewest->name + " has";
  }
  return devices;
}

std::string no_plan_fits_line(size_t hosts_left, const HostDevices& devices,
                              const std::string& reason) {
  std::string each = std::to_string(devices.devices_per_node) + " device(s) each";
  if (!devices.slots.empty())
    each += ", the fewest slots of any: their slots differ (" + devices.slots + ")";
  return "not restarting: no plan fits the " + std::to_string(hosts_left) + " host(s) left (" +
         each + "): " + first_line(reason);
}

int run_launch_with_restarts(const LaunchOptions& options) {
  const CheckpointPlace place = checkpoint_place(options);
  LaunchOptions attempt = options;
  attempt.max_restarts = 0;
  std::vector<HostEntry> hosts;
  if (!options.hostfile.empty()) hosts = parse_hostfile(options.hostfile);
  RestartCosts costs;
  while (true) {
    std::optional<JobFailure> failure;
    const Clock::time_point started = Clock::now();
    const int status = run_launch_once(attempt, &failure);
    const Clock::time_point failed_at = Clock::now();
    if (status == 0) {
      if (costs.restarts > 0)
        say("finished after " + std::to_string(costs.restarts) +
            " restart(s): " + std::to_string(costs.steps_redone) + " step(s) redone, about " +
            seconds_text(costs.seconds_lost) +
            " of wall time lost (work since the checkpoints resumed from, and the restarts)");
      return 0;
    }
    if (supervision_interrupted()) return status;

    RestartDecision decision =
        decide_and_say(options, attempt, hosts, costs.restarts, status, failure);
    if (!decision.restart || supervision_interrupted()) return status;
    ++costs.restarts;
    if (!move_to_hosts_left(options, place.directory, costs.restarts, decision, hosts, attempt))
      return status;
    if (supervision_interrupted()) return status;  // Ctrl-C while deciding

    resume_from_latest(options, place, started, failed_at, costs, attempt);
    // A failed attempt's rank 0 on a host cut off the network runs on until it
    // stops hearing the launcher (the heartbeat timeout), holding DIR's lock:
    // the new rank 0 waits for it rather than writing beside it.
    attempt.pass_environment = options.pass_environment;
    attempt.pass_environment.push_back(
        "PARAPLAN_CHECKPOINT_LOCK_WAIT=" +
        std::to_string(static_cast<int>(3 * options.heartbeat_timeout_seconds + 10)));
    costs.seconds_lost += std::chrono::duration<double>(Clock::now() - failed_at).count();
  }
}

}  // namespace paraplan
