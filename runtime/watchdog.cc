// watchdog.cc: the collective timeout thread (see watchdog.h).
#include "runtime/watchdog.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "runtime/mpi_communicator.h"

namespace paraplan {

namespace {

// How often the thread looks at the open operations: small against any
// sensible timeout, and cheap (a map walk and, for device work, event queries).
constexpr auto kPollInterval = std::chrono::milliseconds(20);

}  // namespace

Watchdog& Watchdog::instance() {
  static Watchdog watchdog;
  return watchdog;
}

Watchdog::Watchdog()
    : handler_([](const std::string& message) { MpiSession::abort_job(message); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::set_timeout(double seconds, int world_rank) {
  if (!std::isfinite(seconds) || seconds < 0) {
    throw std::invalid_argument(
        "collective timeout must be a finite number of seconds >= 0 (0 "
        "disables it), got " +
        std::to_string(seconds));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  timeout_seconds_ = seconds;
  world_rank_ = world_rank;
  if (seconds > 0 && !thread_.joinable()) thread_ = std::thread([this] { run(); });
}

double Watchdog::timeout() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeout_seconds_;
}

void Watchdog::set_expiry_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(mutex_);
  handler_ = std::move(handler);
}

uint64_t Watchdog::begin(std::string description, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (timeout_seconds_ <= 0) return 0;
  const uint64_t ticket = next_ticket_++;
  open_.emplace(ticket, Operation{std::move(description), std::move(done), Clock::now()});
  return ticket;
}

void Watchdog::finish(uint64_t ticket) {
  if (ticket == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  open_.erase(ticket);
}

std::string Watchdog::expired_message(Clock::time_point now) {
  const auto limit = std::chrono::duration<double>(timeout_seconds_);
  for (auto it = open_.begin(); it != open_.end();) {
    Operation& operation = it->second;
    if (operation.done && operation.done()) {
      it = open_.erase(it);
      continue;
    }
    if (now - operation.started > limit) {
      std::ostringstream message;
      message << "timeout: " << operation.description << " did not complete within "
              << timeout_seconds_ << " s (world rank " << world_rank_
              << "); a peer rank may have failed or stalled. Raise --collective-timeout if "
                 "this operation is legitimately slow";
      return message.str();
    }
    ++it;
  }
  return "";
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kPollInterval);
    if (stopping_ || fired_ || timeout_seconds_ <= 0) continue;
    const std::string message = expired_message(Clock::now());
    if (message.empty()) continue;
    fired_ = true;
    const auto handler = handler_;
    lock.unlock();
    handler(message);  // by default never returns: the job ends
    lock.lock();
  }
}

}  // namespace paraplan
