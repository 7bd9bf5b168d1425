// launch.h: `paraplan launch --plan job.pplan [--hostfile hosts] [--dry-run]
// [--mpirun PATH] -- train ...`: checks a hostfile against the plan's mesh and
// starts the job with mpirun, one rank per device.
//
// The command it builds (no shell in between):
//   mpirun -np N [--hostfile F | --oversubscribe] --map-by slot --bind-to none
//          [-x VAR]... /path/to/paraplan train --plan job.pplan ...
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace paraplan {

// One line of a hostfile: "hostname slots=N" (the Open MPI and DeepSpeed form).
struct HostEntry {
  std::string name;
  int slots = 0;
  int line = 0;  // 1-based, for messages
};

// Parses a hostfile: one "hostname slots=N [max_slots=M]" per line; '#' starts
// a comment; blank lines are skipped. Errors name the file and the line
// ("hosts:3: 'slots=x' is not a number").
std::vector<HostEntry> parse_hostfile(const std::string& path);
// The same over text already read; name stands for the file in messages.
std::vector<HostEntry> parse_hostfile_text(const std::string& text, const std::string& name);

// Throws unless there are num_nodes hosts with devices_per_node slots each:
// "hosts: 2 hosts x 4 slots = 8 slots, but the plan needs 1 node x 4 devices; ...".
void check_hosts_match_mesh(const std::vector<HostEntry>& hosts, const std::string& hostfile,
                            int num_nodes, int devices_per_node);

struct LaunchOptions {
  std::string plan_path;
  std::string hostfile;              // empty: every rank on this machine
  bool dry_run = false;              // print the command instead of running it
  std::string mpirun = "mpirun";     // a name looked up on PATH, or a path
  std::vector<std::string> command;  // the arguments after "--": "train ..." or "replay ..."
  std::string paraplan_binary;       // empty: this executable (/proc/self/exe)
  // "NAME=VALUE" entries to pick passthrough variables from; unset: this
  // process's environment.
  std::optional<std::vector<std::string>> environment;
};

// Names of the variables mpirun passes on to every rank (-x): PARAPLAN_*,
// OMP_*, OPENBLAS_*, NCCL_* and CUDA_VISIBLE_DEVICES, sorted.
std::vector<std::string> passthrough_variables(const std::vector<std::string>& environment);

// The full mpirun argument list (argv[0] is options.mpirun). Loads and validates
// the plan, checks the hostfile against its mesh, and adds --plan to the
// command when it lacks one. Throws with a message naming what is wrong.
std::vector<std::string> build_launch_command(const LaunchOptions& options);

// mpirun -np N --oversubscribe ... (as for a plan without a hostfile), then this
// executable with paraplan_arguments: how `paraplan profile` starts its ranks.
std::vector<std::string> local_mpirun_command(int ranks,
                                              const std::vector<std::string>& paraplan_arguments,
                                              const std::string& mpirun = "mpirun");

// The path of this executable (/proc/self/exe).
std::string this_executable();

// Replaces this process with arguments[0] (execvp); returns only by throwing.
void exec_command(const std::vector<std::string>& arguments);

// The arguments as one line a shell would read back the same (for --dry-run).
std::string shell_quote_command(const std::vector<std::string>& arguments);

// Dry run: prints the command and returns 0. Otherwise replaces this process
// with mpirun (execvp) and returns only by throwing (mpirun not found, ...).
int run_launch(const LaunchOptions& options);

}  // namespace paraplan
