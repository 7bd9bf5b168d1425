// job_watch.h: what `paraplan launch` knows of each rank while its job runs,
// from the ranks' hellos and beats (runtime/comm/supervision_protocol.h), and
// what it decides from that: when the job must end, and the message that
// names the rank(s) at fault, their host, pid, pipeline stage and groups, and
// which ranks the others wait for (in a collective: the members that have
// not arrived). Pure: time is passed in, so tests drive it directly.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/comm/supervision_protocol.h"

namespace paraplan {

struct MeshShape {
  int pipeline = 1, data = 1, tensor = 1, context = 1;
  int world() const { return pipeline * data * context * tensor; }
};

// Why a job must end, as JobWatch decides it: what failure() says, and the
// kind and hosts a restart decides by.
struct JobFailure {
  enum class Kind {
    kRankError,   // a rank reported an error (its own, or a collective timeout)
    kLost,        // ranks ended without finishing: killed, crashed, host down
    kSilent,      // ranks silent past the timeout: stopped, hung, cut off
    kNotArrived,  // a rank's collective or transfer timed out: hosts are the absent peers'
  };
  Kind kind = Kind::kRankError;
  std::string message;
  std::vector<std::string> hosts;  // of the ranks at fault, sorted
  // kLost by a SIGTERM the ranks reported: ended by mpirun (or a user), so
  // their hosts are where the job was ended, not necessarily what failed.
  bool by_signal = false;
};

class JobWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // A rank is silent once nothing came from it for heartbeat_timeout; a
  // connection that ends without "done" is a lost rank once `settle` has
  // passed (so that every rank of a host that died is named together).
  JobWatch(MeshShape mesh, std::chrono::milliseconds heartbeat_timeout,
           std::chrono::milliseconds settle = std::chrono::milliseconds(300));

  // A rank said hello. False (and nothing recorded) for a rank outside the
  // world or one that already checked in.
  bool check_in(const supervision::Hello& hello, Clock::time_point now);
  void receive(int rank, const supervision::RankMessage& message, Clock::time_point now);
  void disconnected(int rank, Clock::time_point now);

  // Why the job must end now, or nullopt: the error a rank reported, ranks
  // whose connection ended without "done", ranks silent past the timeout. The
  // first line says what happened; one line follows per rank at fault and
  // per rank waiting for them.
  std::optional<std::string> failure(Clock::time_point now) const;
  // The same, with its kind and the hosts at fault.
  std::optional<JobFailure> diagnose(Clock::time_point now) const;

  // How often ranks and launcher beat: a fifth of the timeout (50 ms to 1 s).
  std::chrono::milliseconds interval() const { return interval_; }

  bool all_checked_in() const;
  bool all_finished() const;
  // Once every rank has checked in and made its tensor group: where the ranks
  // run, and whether each tensor-parallel group stays inside one host.
  std::optional<std::string> placement() const;
  // The pids of the ranks that said they run on `host`.
  std::vector<long> pids_on(const std::string& host) const;

 private:
  struct Rank {
    bool checked_in = false, finished = false, lost = false;
    supervision::Hello hello;
    Clock::time_point last_heard, lost_at;
    std::map<int, supervision::GroupInfo> groups;  // by this rank's group id
    supervision::Beat beat;
    std::string error;
    long error_order = -1;  // errors are reported in the order they came
    int signal = 0;         // the signal that ended it (SIGTERM), if it said so
  };

  std::string describe(int rank) const;                         // "rank 2 on node2 (pid 7)"
  std::string placement_of(int rank) const;                     // stage, data, tensor; groups
  std::string state_of(int rank, Clock::time_point now) const;  // what it is doing
  // Lines naming the members of the collectives `rank` waits in that have
  // not arrived.
  // `absent`, when given, receives their world ranks.
  std::vector<std::string> not_arrived(int rank, Clock::time_point now,
                                       std::vector<int>* absent = nullptr) const;
  // Lines naming the live ranks that wait for one of `culprits`.
  std::vector<std::string> waiting_for(const std::vector<int>& culprits) const;
  JobFailure report(JobFailure::Kind kind, const std::string& headline,
                    const std::vector<int>& culprits) const;
  // Where some hosts lost every rank they had, drops the others from
  // lost_by_host (host -> its lost ranks); else leaves it as it is.
  void keep_whole_hosts(std::map<std::string, std::vector<int>>& lost_by_host) const;

  MeshShape mesh_;
  std::chrono::milliseconds timeout_, settle_, interval_;
  std::vector<Rank> ranks_;
  long errors_seen_ = 0;
};

// "0-3,6" for {0, 1, 2, 3, 6}.
std::string rank_ranges(std::vector<int> ranks);

}  // namespace paraplan
