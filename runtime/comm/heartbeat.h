// heartbeat.h: this rank's line to `paraplan launch`, so that a rank that dies,
// stops (SIGSTOP) or drops off the network is noticed in seconds, not at the
// collective timeout, and so that a rank cut off from the launcher ends itself
// instead of lingering.
//
// `paraplan launch` (launcher/supervisor.h) listens on a TCP port and sets
// PARAPLAN_SUPERVISOR (host:port) and PARAPLAN_SUPERVISOR_TOKEN for every rank.
// The rank connects before MPI_Init, says hello, and a thread then sends a beat
// every interval saying what the rank is doing (the Watchdog's open operations
// and, per process group, how many operations it has entered:
// supervision_protocol.h). The launcher beats back. No MPI call is made on
// that thread, so MPI_THREAD_FUNNELED is enough.
//
// The thread ends this rank (a line on stderr, then _Exit(1)) when:
// - the launcher says stop (it is ending the job and has said why);
// - the connection closes (the launcher ended) or nothing has come from the
//   launcher for the timeout (this host may be cut off the network). Then the
//   Open MPI daemon that started this rank (orted, which cannot reach mpirun
//   either) is ended too, so nothing of the job lingers on this host.
//
// A rank ended by SIGTERM (mpirun ending the job, or a user) says so first,
// so that the launcher does not take it for the rank at fault.
//
// Without PARAPLAN_SUPERVISOR (a job started by mpirun directly) nothing runs
// and only the collective timeout (watchdog.h) guards the job.
#pragma once

#include <string>

namespace paraplan {

class Heartbeat {
 public:
  // When PARAPLAN_SUPERVISOR is set: connects (waiting at most 10 s), says
  // hello as world rank `world_rank`, waits for the welcome, starts the thread
  // and has the Watchdog track operations for the beats. Returns false when
  // the variable is not set. Throws, naming the address and the fix, when the
  // launcher cannot be reached or refuses the token. Call once per process.
  static bool start_from_environment(int world_rank);
  static bool active();

  // Tells the launcher that this rank ends the job with `message` (sent
  // before the caller exits). Any thread; never throws; no-op when inactive.
  static void report_error(const std::string& message) noexcept;

  // Tells the launcher this rank finished normally and stops the thread.
  static void finish() noexcept;
};

}  // namespace paraplan
