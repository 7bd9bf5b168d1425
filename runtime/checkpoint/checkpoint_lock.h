// checkpoint_lock.h: one run writes into a checkpoint directory at a time.
// Two runs given the same --checkpoint-dir would otherwise interleave their
// step directories silently, one run's step_00000030 replacing the other's
// and `latest` naming whichever wrote last.
//
// The run's writer (world rank 0, which writes every checkpoint) holds an
// exclusive flock on DIR/.paraplan-lock for its whole life, and writes into
// the file who it is. The kernel drops the lock when the process ends, however
// it ends, so a crashed run never leaves the directory locked.
//
// A fence besides the lock: flock need not reach across hosts (NFS without
// lock support, some FUSE filesystems), so a run restarted on other hosts
// may take the directory while the failed attempt's writer, cut off from
// the launcher, still runs. Every holder's line is its own (a random run
// id in it); before publishing a checkpoint the writer checks that the file
// still holds its line (check_still_held), and stops if another run wrote
// there since.
#pragma once

#include <string>

namespace paraplan {

class CheckpointDirLock {
 public:
  // Creates `dir` when missing, then takes the lock. `holder` describes this
  // run ("paraplan train, plan job.pplan"); the host, pid and start time are
  // added. A lock held by another run is tried again for up to wait_seconds:
  // a job `launch --max-restarts` restarts waits so for a rank 0 of the failed
  // attempt that still runs (on a host cut off the network, until it stops
  // hearing the launcher) and never writes beside it. Throws
  // std::runtime_error naming the directory and the run that holds it, or why
  // the lock file cannot be made.
  CheckpointDirLock(const std::string& dir, const std::string& holder, double wait_seconds = 0);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  const std::string& path() const { return path_; }

  // Throws std::runtime_error naming the directory and the run that took
  // it, when the lock file no longer holds this run's line.
  void check_still_held() const;

 private:
  std::string dir_, path_;
  std::string line_;  // what this run wrote into the lock file
  int fd_ = -1;
};

}  // namespace paraplan
