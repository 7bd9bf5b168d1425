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
// set_timeout() is called. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

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

  // Registers an operation that starts now. description reads like
  // "all_reduce of 4096 floats on group 'data' (rank 1 of 2)". With `done`, the
  // watchdog thread polls it and retires the operation once it returns true;
  // finish() may still be called. Returns 0 (and registers nothing) when
  // disabled.
  uint64_t begin(std::string description, std::function<bool()> done = {});
  void finish(uint64_t ticket);

  // Registers a blocking call for its scope.
  class Guard {
   public:
    explicit Guard(std::string description)
        : ticket_(Watchdog::instance().begin(std::move(description))) {}
    ~Guard() { Watchdog::instance().finish(ticket_); }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

   private:
    uint64_t ticket_;
  };

 private:
  struct Operation {
    std::string description;
    std::function<bool()> done;
    Clock::time_point started;
  };
  void run();
  // The message of the oldest expired operation, or "" (mutex_ held).
  std::string expired_message(Clock::time_point now);

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, Operation> open_;
  uint64_t next_ticket_ = 1;
  double timeout_seconds_ = 0;
  int world_rank_ = 0;
  bool fired_ = false, stopping_ = false;
  std::function<void(const std::string&)> handler_;
  std::thread thread_;
};

}  // namespace paraplan
