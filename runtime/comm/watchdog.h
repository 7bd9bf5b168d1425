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
// One watchdog per process (instance()); disabled (timeout 0) until
// set_timeout() is called. Thread-safe. Registering allocates nothing once
// warm (slots are reused, names are formatted only when one expires), since
// it wraps every tensor-parallel all-reduce of every layer.
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
  // operation; must end the process (the default calls MpiSession::abort_job).
  // Tests install their own.
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
    std::string format() const;
  };

  // Registers an operation that starts now. With `done`, the watchdog thread
  // polls it and retires the operation once it returns true; finish() may
  // still be called. Returns 0 (and registers nothing) when disabled.
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
  double timeout_seconds_ = 0;
  int world_rank_ = 0;
  bool fired_ = false, stopping_ = false;
  std::function<void(const std::string&)> handler_;
  std::thread thread_;
};

}  // namespace paraplan
