// preflight.h: before any rank starts, `paraplan launch` asks every host of
// the hostfile what it offers the job: reached the way mpirun will reach it
// (its ssh agent), each host runs `paraplan preflight` (the same binary path)
// and answers with one JSON line; this host answers in process. The launcher
// refuses a job that could not run, one line per problem naming the host and
// the fix: a host ssh cannot reach, a paraplan missing or of another build, a
// plan or data file it cannot read, fewer GPUs than slots, no interface on
// the chosen network, a checkpoint directory that is not the same directory
// on every host. `--dry-run` prints the findings.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/launch.h"
#include "launcher/network.h"

namespace paraplan {

// A directory every host must see as one: the checkpoint directory, where
// ranks on every host write their share of each save (DESIGN: sharded
// checkpoints). The launcher puts a marker file there before the hosts are
// asked; each host looks for it and creates a file of its own.
struct SharedDirectory {
  std::string path;       // absolute
  std::string marker;     // a file name in it, unique to this launch
  std::string placed_by;  // the launcher's hostname, for the message
};

struct HostFindings {
  std::string host;  // as the hostfile names it
  bool this_host = false;
  std::string failure;  // why the host could not be asked; empty when it answered
  std::string hostname, version, build_id;
  // Each file the job reads: path and "" when readable here, else the reason.
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<InterfaceAddress> interfaces;
  int cores = 0;
  int cuda_devices = -1;  // -1: not asked (CPU backend)
  // The shared directory asked about: "" when this host sees the marker and
  // can write there, else what is wrong; nullopt when not asked.
  std::optional<std::string> shared_directory_problem;
};

// This paraplan: its version and the GNU build id of its executable ("" if
// it has none), which two hosts must share.
std::string paraplan_version();
std::string this_build_id();

// `paraplan preflight`: this host's findings for the given files (and the
// shared directory, when given), as JSON.
nlohmann::json this_host_findings(const std::vector<std::string>& files, bool count_gpus,
                                  const std::optional<SharedDirectory>& shared = std::nullopt);

// The launcher's marker in a shared directory, removed when this goes.
class SharedDirectoryMarker {
 public:
  // Places the marker in `directory` (absolute), creating the directory when
  // `create`; without `create` a missing directory is left unchecked.
  SharedDirectoryMarker(const std::string& directory, bool create);
  ~SharedDirectoryMarker();
  SharedDirectoryMarker(const SharedDirectoryMarker&) = delete;
  SharedDirectoryMarker& operator=(const SharedDirectoryMarker&) = delete;

  // What to ask the hosts; nullopt when the marker could not be placed.
  const std::optional<SharedDirectory>& shared() const { return shared_; }
  // Why this host could not place it ("" when it did, or when the directory
  // was missing and not to be created).
  const std::string& problem() const { return problem_; }

 private:
  std::optional<SharedDirectory> shared_;
  std::string problem_;
};
// The findings a host answered with (throws on a malformed answer).
HostFindings findings_from_json(const std::string& host, const nlohmann::json& answer);

// True when the hostfile's name means this machine (its hostname, localhost,
// or an address of one of its interfaces).
bool is_this_host(const std::string& host);

// How mpirun reaches other hosts: plm_rsh_agent from the mpirun arguments or
// OMPI_MCA_plm_rsh_agent in the environment mpirun runs with (NAME=VALUE
// entries: launch_environment, so `--env` counts as it does for mpirun),
// else ssh, then plm_rsh_args (from either) as Open MPI appends them; split
// into words.
std::vector<std::string> remote_shell(const std::vector<std::string>& mpirun_arguments,
                                      const std::vector<std::string>& environment);

struct PreflightRequest {
  std::vector<HostEntry> hosts;
  std::string binary;              // paraplan's absolute path, the same on every host
  std::vector<std::string> files;  // absolute paths every host must read
  bool count_gpus = false;         // --backend cuda: a device per slot
  std::optional<SharedDirectory> shared_directory;  // train's --checkpoint-dir
  std::vector<std::string> remote_shell = {"ssh"};
  // NAME=VALUE entries the remote shell runs with: mpirun's environment
  // (launch_environment), so what `--env` gives mpirun's ssh (SSH_AUTH_SOCK,
  // a PATH that finds the agent, ...) reaches the preflight's too. Empty:
  // this process's environment.
  std::vector<std::string> environment;
  double timeout_seconds = 30;
};

// Asks the hosts about the command's --checkpoint-dir, if it has one: places
// the marker (creating the directory unless --dry-run) and names it in the
// request. The marker goes with `marker`.
void ask_about_checkpoint_directory(const LaunchOptions& options, PreflightRequest& request,
                                    std::optional<SharedDirectoryMarker>& marker);

// Every host's findings, in hostfile order (the remote ones asked at once).
std::vector<HostFindings> run_preflight(const PreflightRequest& request);

// What is wrong with one host for the job, a line each with the fix (without
// the host's name); empty when it can take its `slots` ranks.
std::vector<std::string> host_problems(const HostFindings& host, int slots,
                                       const PreflightRequest& request, const std::string& version,
                                       const std::string& build_id);

// One line per problem, each naming the host and the fix; empty when the job
// can start. `reference` is this host's answer (its version and build id).
std::vector<std::string> preflight_problems(const std::vector<HostFindings>& findings,
                                            const PreflightRequest& request,
                                            const std::string& version,
                                            const std::string& build_id);

// One line per host, for --dry-run.
std::string describe_findings(const std::vector<HostFindings>& findings);

}  // namespace paraplan
