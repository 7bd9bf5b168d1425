// watchdog.cc: the collective timeout thread (see watchdog.h).
#include "runtime/comm/watchdog.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <sstream>
#include <stdexcept>

#include "runtime/comm/mpi_session.h"

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
    : handler_([](const std::string& message) { MpiSession::end_rank(message); }) {}

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
  if (seconds > 0) start_thread();
}

void Watchdog::set_tracking(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  tracking_ = on;
  if (on) start_thread();  // retires the operations a device finishes
}

void Watchdog::start_thread() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

int Watchdog::register_group(const std::string& name, std::vector<int> members) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.push_back({name, std::move(members), 0});
  return static_cast<int>(groups_.size()) - 1;
}

std::vector<Watchdog::Snapshot::Group> Watchdog::groups_after(size_t known) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (known >= groups_.size()) return {};
  return {groups_.begin() + static_cast<std::ptrdiff_t>(known), groups_.end()};
}

Watchdog::Snapshot Watchdog::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point now = Clock::now();
  Snapshot snapshot;
  snapshot.groups = groups_;
  for (const Operation& operation : slots_) {
    if (!operation.open) continue;
    snapshot.open.push_back({operation.name.group, operation.name.sequence,
                             std::chrono::duration<double>(now - operation.started).count(),
                             operation.name.format(), operation.name.to_rank,
                             operation.name.from_rank});
  }
  // The oldest first: that is the one the rank waits in.
  std::sort(snapshot.open.begin(), snapshot.open.end(),
            [](const Snapshot::Open& a, const Snapshot::Open& b) {
              return a.age_seconds > b.age_seconds;
            });
  if (snapshot.open.empty())
    snapshot.idle_seconds = std::chrono::duration<double>(now - last_finished_).count();
  return snapshot;
}

double Watchdog::timeout() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeout_seconds_;
}

void Watchdog::set_expiry_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(mutex_);
  handler_ = std::move(handler);
}

std::string Watchdog::OperationName::format() const {
  std::string text = operation;
  if (unit[0] != '\0') text += " of " + std::to_string(count) + " " + unit;
  if (to_rank >= 0 || from_rank >= 0) {
    text += " (";
    if (to_rank >= 0) text += "to world rank " + std::to_string(to_rank);
    if (to_rank >= 0 && from_rank >= 0) text += ", ";
    if (from_rank >= 0) text += "from world rank " + std::to_string(from_rank);
    text += ")";
  }
  if (where != nullptr) text += *where;
  return text;
}

uint64_t Watchdog::begin(const OperationName& name, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled()) return 0;
  if (name.group >= 0 && static_cast<size_t>(name.group) < groups_.size())
    groups_[static_cast<size_t>(name.group)].entered =
        std::max(groups_[static_cast<size_t>(name.group)].entered, name.sequence);
  if (free_slots_.empty()) {
    slots_.emplace_back();
    free_slots_.push_back(slots_.size() - 1);
  }
  const size_t slot = free_slots_.back();
  free_slots_.pop_back();
  Operation& operation = slots_[slot];
  operation.open = true;
  operation.generation += 1;
  operation.name = name;
  operation.done = std::move(done);
  operation.started = Clock::now();
  return (uint64_t{operation.generation} << 32) | (slot + 1);
}

void Watchdog::finish(uint64_t ticket) {
  if (ticket == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t slot = (ticket & 0xffffffffu) - 1;
  Operation& operation = slots_[slot];
  // Already retired by its done probe (and maybe reused since).
  if (!operation.open || operation.generation != static_cast<uint32_t>(ticket >> 32)) return;
  retire(slot, Clock::now());
}

void Watchdog::retire(size_t slot, Clock::time_point now) {
  Operation& operation = slots_[slot];
  operation.open = false;
  operation.done = nullptr;
  free_slots_.push_back(slot);
  last_finished_ = now;
}

std::string Watchdog::expired_message(Clock::time_point now) {
  const auto limit = std::chrono::duration<double>(timeout_seconds_);
  for (size_t slot = 0; slot < slots_.size(); ++slot) {
    Operation& operation = slots_[slot];
    if (!operation.open) continue;
    if (operation.done) {
      // A probe that throws has found the operation failed (NCCL's
      // asynchronous error): that ends the job now, in the probe's words.
      bool done = false;
      try {
        done = operation.done();
      } catch (const std::exception& error) {
        std::ostringstream message;
        message << "error: " << operation.name.format() << " failed (world rank " << world_rank_
                << "): " << error.what();
        return message.str();
      }
      if (done) {
        retire(slot, now);
        continue;
      }
    }
    if (timeout_seconds_ > 0 && now - operation.started > limit) {
      std::ostringstream message;
      message << "timeout: " << operation.name.format() << " did not complete within "
              << timeout_seconds_ << " s (world rank " << world_rank_
              << "); a peer rank may have failed or stalled. Raise --collective-timeout if "
                 "this operation is legitimately slow";
      return message.str();
    }
  }
  return "";
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kPollInterval);
    if (stopping_ || fired_ || !enabled()) continue;
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
