// launch.h: `paraplan launch --plan job.pplan [--hostfile hosts] [--dry-run]
// [--mpirun PATH] [--mpirun-arg ARG]... [--network-interface auto|none|NAME|CIDR]
// [--env NAME[=VALUE]]... [--heartbeat-timeout S] -- train ...`: checks a
// hostfile against the plan's mesh, asks every host whether it can run the
// job (preflight.h), picks the network (network.h), and starts the job with
// mpirun, one rank per device, staying with it until it ends (supervisor.h).
//
// The command it builds (no shell in between):
//   mpirun -np N [--hostfile F | --oversubscribe] --map-by slot --bind-to none
//          [--mca btl_tcp_if_include NET --mca oob_tcp_if_include NET]
//          [--mpirun-arg ...] [-x VAR]... /path/to/paraplan train --plan /abs/job.pplan ...
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

// Without a hostfile every rank starts on this machine: for a plan of more
// than one node, the line that says so ("" for one node).
std::string single_machine_note(int num_nodes, int devices_per_node);

// Throws unless there are num_nodes hosts with devices_per_node slots each:
// "hosts: 2 hosts x 4 slots = 8 slots, but the plan needs 1 node x 4 devices; ...".
void check_hosts_match_mesh(const std::vector<HostEntry>& hosts, const std::string& hostfile,
                            int num_nodes, int devices_per_node);

struct LaunchOptions {
  std::string plan_path;
  std::string hostfile;              // empty: every rank on this machine
  bool dry_run = false;              // print the command and the preflight, run nothing
  std::string mpirun = "mpirun";     // a name looked up on PATH, or a path
  std::vector<std::string> command;  // the arguments after "--": "train ..." or "replay ..."
  std::string paraplan_binary;       // empty: this executable (/proc/self/exe)
  // The environment mpirun starts from ("NAME=VALUE"); unset: this process's.
  std::optional<std::vector<std::string>> environment;
  std::vector<std::string> mpirun_arguments;  // --mpirun-arg: given to mpirun as they are
  // --network-interface: auto (the subnet carrying every host's address),
  // none, interface names ("eth0", "ib0,eth0") or a subnet ("10.0.0.0/16").
  std::string network_interface = "auto";
  // --env: more variables every rank gets, by name (this environment's value)
  // or as NAME=VALUE.
  std::vector<std::string> pass_environment;
  double heartbeat_timeout_seconds = 10;  // a rank silent this long ends the job
  // --max-restarts: after a lost or silent rank, re-plan onto the hosts that
  // answer the preflight and resume from the latest checkpoint, at most this
  // many times (restart.h). --min-nodes: never on fewer hosts.
  int max_restarts = 0;
  int min_nodes = 1;
};

// What launch adds once it has looked at the hosts: the network Open MPI
// uses (btl/oob_tcp_if_include; "" leaves it to Open MPI) and variables set
// for every rank ("NAME=VALUE": the launcher's address, NCCL_SOCKET_IFNAME).
struct LaunchAdditions {
  std::string mpi_network;
  std::vector<std::string> variables;
};

// Names of the variables every rank gets (-x), sorted: PATH, LD_LIBRARY_PATH,
// PARAPLAN_*, OMP_*, OPENBLAS_*, NCCL_*, UCX_*, FI_* where set, and the
// names in `also`.
// Local ranks inherit the rest of mpirun's environment; ranks on other hosts
// get only these, and keep their own CUDA_VISIBLE_DEVICES.
std::vector<std::string> passthrough_variables(const std::vector<std::string>& environment,
                                               const std::vector<std::string>& also = {});

// The environment mpirun runs with: options.environment (or this process's)
// with `additions` and --env's NAME=VALUE entries set, and without
// OMPI_MCA_mca_base_env_list, whose entries become -x arguments instead (Open
// MPI refuses the two together).
std::vector<std::string> launch_environment(const LaunchOptions& options,
                                            const LaunchAdditions& additions = {});

// The command after "--" with the paths it names (--plan, --data, --val-data,
// --checkpoint-dir, --log-json, --report, --trace, --timeline) made absolute,
// so that ranks on other hosts, whose working directory is their home, find
// them.
std::vector<std::string> with_absolute_paths(const std::vector<std::string>& command);

// The value a command gives a flag ("--flag V" or "--flag=V"), or "" if none.
std::string command_flag_value(const std::vector<std::string>& command, const std::string& flag);

// Whether the command runs on the CUDA backend (--backend cuda): a GPU per slot.
bool command_wants_gpus(const std::vector<std::string>& command);

// The files every rank reads, as the command names them, made absolute: the
// plan, each --data and --val-data entry, and --checkpoint-dir with --resume.
// The preflight asks every host for them.
std::vector<std::string> files_every_rank_reads(const LaunchOptions& options);

// train's --checkpoint-dir, made absolute; "" when the command has none.
std::string checkpoint_directory(const LaunchOptions& options);

// The full mpirun argument list (argv[0] is options.mpirun). Loads and validates
// the plan, checks the hostfile against its mesh, and adds --plan to the
// command when it lacks one. Throws with a message naming what is wrong.
std::vector<std::string> build_launch_command(const LaunchOptions& options,
                                              const LaunchAdditions& additions = {});

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

// `paraplan launch` (launch_job.cc). With a hostfile: the preflight on every
// host and the network choice, one line each problem. Dry run: prints the
// command, the network and the preflight's findings; returns 0, or 1 when
// the preflight found problems. Otherwise starts mpirun under the
// supervisor and returns the exit status of the job (0, or 1 when it failed);
// throws for problems found before anything started.
int run_launch(const LaunchOptions& options);

// One supervised run of the job, as run_launch without restarts; `failure`
// (when given) receives why it ended, if the ranks said or showed it.
struct JobFailure;
int run_launch_once(const LaunchOptions& options, std::optional<JobFailure>* failure);

// The path execvp would run for `program` (looked up on PATH unless it names
// a path); throws "cannot run 'mpirun': not found; install Open MPI ..." when
// there is none.
std::string find_program(const std::string& program);

}  // namespace paraplan
