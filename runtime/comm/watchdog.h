// watchdog.h: ends the job when a collective or a transfer does not complete
// within the configured time, instead of letting it hang.
//
// Operations register when they start and unregister when they end. A
// background thread checks the open ones every few milliseconds; the first
// one past the timeout calls the expiry handler with a message naming the
// rank, the group and the operation (by default MpiSession::abort_job, which
// ends every rank). Blocking calls use a Guard; work queued on a device (an
// NCCL call on a stream) registers with a `done` probe, an event query, which
// the thread polls, so the operation ends when the device finishes it, not
// when the host call returns.
//
// It also keeps what the heartbeat (heartbeat.h) tells the launcher: the
// process groups (name and members), how many operations this rank has
// entered on each, the operations open now, and how long the rank has been
// outside communication. From every member's counts the launcher names the
// ranks that have not arrived in a collective.
//
// One watchdog per process (instance()); disabled (timeout 0) until
// set_timeout() is called, or tracking while the heartbeat runs. Thread-safe.
// Registering allocates nothing once warm (slots are reused, names are
// formatted only when one expires or a beat reports it), since it wraps every
// tensor-parallel all-reduce of every layer.
//
// The thread makes no MPI call: the default expiry handler prints and ends
// this process (MpiSession::end_rank), which is legal under
// MPI_THREAD_FUNNELED; mpirun then ends the other ranks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace paraplan {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;

  static Watchdog& instance();

  Watchdog();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Seconds an operation may take; 0 disables the watchdog. world_rank names
  // this process in the message. Throws std::invalid_argument for a negative
  // or non-finite timeout.
  void set_timeout(double seconds, int world_rank);
  double timeout() const;

  // Called once, on the watchdog thread, with the message of the first expired
  // operation; must end the process (the default calls MpiSession::end_rank,
  // no MPI). Tests install their own.
  void set_expiry_handler(std::function<void(const std::string&)> handler);

  // What an operation is, formatted only if it expires: "<operation> of
  // <count> <unit> (to world rank T, from world rank F)<where>", the count
  // part left out when unit is empty, the peers when -1.
  struct OperationName {
    const char* operation = "";
    size_t count = 0;
    const char* unit = "floats";
    // " on group 'data' (rank 1 of 2)"; must outlive the operation.
    const std::string* where = nullptr;
    int to_rank = -1, from_rank = -1;
    int group = -1;         // register_group's id; -1 for pipeline transfers
    uint64_t sequence = 0;  // the operation's number on its group, from 1
    std::string format() const;
  };

  // Registers a process group (its name and its members' world ranks, in
  // group rank order) and returns its id for OperationName::group.
  int register_group(const std::string& name, std::vector<int> members);

  // Records operations even when the timeout is off: the heartbeat reports them.
  void set_tracking(bool on);

  // What the heartbeat sends: the groups (by id), with the number of the last
  // operation entered on each, the open operations, and the seconds since the
  // last operation ended (0 while one is open).
  struct Snapshot {
    struct Group {
      std::string name;
      std::vector<int> members;
      uint64_t entered = 0;
    };
    struct Open {
      int group = -1;
      uint64_t sequence = 0;
      double age_seconds = 0;
      std::string what;
      int to_rank = -1, from_rank = -1;
    };
    std::vector<Group> groups;
    std::vector<Open> open;
    double idle_seconds = 0;
  };
  Snapshot snapshot() const;
  // The groups registered after the first `known` ones (ids known, known + 1, ...).
  std::vector<Snapshot::Group> groups_after(size_t known) const;

  // Registers an operation that starts now. With `done`, the watchdog thread
  // polls it and retires the operation once it returns true; finish() may
  // still be called. A `done` that throws std::exception has found the
  // operation failed (NCCL's asynchronous error): the expiry handler gets
  // "error: <operation> failed (world rank R): <what>" at once, whatever
  // the timeout. Returns 0 (and registers nothing) when disabled.
  uint64_t begin(const OperationName& name, std::function<bool()> done = {});
  void finish(uint64_t ticket);

  // Registers a blocking call for its scope.
  class Guard {
   public:
    explicit Guard(const OperationName& name) : ticket_(Watchdog::instance().begin(name)) {}
    ~Guard() { Watchdog::instance().finish(ticket_); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    uint64_t ticket_;
  };

 private:
  struct Operation {
    bool open = false;
    uint32_t generation = 0;  // bumped per use, so a stale ticket finishes nothing
    OperationName name;
    std::function<bool()> done;
    Clock::time_point started;
  };
  void run();
  void start_thread();                                                // mutex_ held
  bool enabled() const { return timeout_seconds_ > 0 || tracking_; }  // mutex_ held
  void retire(size_t slot, Clock::time_point now);                    // mutex_ held
  // The message of the first expired operation, or "" (mutex_ held).
  std::string expired_message(Clock::time_point now);

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // A ticket is (generation << 32) | (slot + 1). Free slots are reused, so the
  // table stays as large as the most operations ever open at once; the
  // generation keeps the ticket of an operation a done probe already retired
  // from finishing the slot's next user.
  std::vector<Operation> slots_;
  std::vector<size_t> free_slots_;
  std::vector<Snapshot::Group> groups_;
  Clock::time_point last_finished_ = Clock::now();
  double timeout_seconds_ = 0;
  int world_rank_ = 0;
  bool tracking_ = false, fired_ = false, stopping_ = false;
  std::function<void(const std::string&)> handler_;
  std::thread thread_;
};

}  // namespace paraplan
