// supervisor.h: `paraplan launch` staying with its job. It listens for the
// ranks' heartbeats (runtime/comm/heartbeat.h), starts mpirun as its child,
// and ends the job within a bounded time when a rank fails, dies, stops or
// drops off the network, printing what JobWatch says (rank, host, stage,
// groups, who waits for whom). Ending a job: every rank is told to stop (the
// ones it can reach exit at once), mpirun gets SIGTERM, and after the grace
// period mpirun and everything it started on this host (ssh to a host that
// no longer answers, ranks stopped with SIGSTOP) get SIGKILL. Ranks on a host
// cut off from the launcher end themselves and their orted when they stop
// hearing from it. The launcher is a child subreaper, so nothing it started
// escapes it by being orphaned.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/job_watch.h"

namespace paraplan {

struct SupervisorOptions {
  MeshShape mesh;
  std::chrono::milliseconds heartbeat_timeout{10000};
  // From the stop order to SIGKILL of whatever of the job is left here.
  std::chrono::milliseconds exit_grace{5000};
  // The address ranks connect to (this host's on the job's network).
  std::string listen_address = "127.0.0.1";
};

// True once the launcher got SIGINT, SIGTERM or SIGHUP while supervising: the
// user ended the job, which is no failure to restart from.
bool supervision_interrupted();

class Supervisor {
 public:
  // Listens on listen_address (a port the kernel picks). Throws naming the
  // address when it cannot.
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // For the ranks' environment (supervision::kAddressVariable, kTokenVariable).
  std::string address() const;
  const std::string& token() const { return token_; }

  // Starts arguments (mpirun: execvp in its own process group, killed if the
  // launcher dies) with `environment` ("NAME=VALUE" entries) and watches the
  // job until it ends. Returns the launcher's exit status: 0 when mpirun
  // succeeded, 1 when the job was ended for a failure, else mpirun's status.
  int run(const std::vector<std::string>& arguments, const std::vector<std::string>& environment);

  // Why the last run() ended the job, when the ranks said or showed it
  // (nullopt after success, or when mpirun failed without a rank's word).
  const std::optional<JobFailure>& last_failure() const { return last_failure_; }

 private:
  SupervisorOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::string token_;
  std::optional<JobFailure> last_failure_;
};

}  // namespace paraplan
