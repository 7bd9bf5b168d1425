// checkpoint_lock.cc: the checkpoint directory's writer lock (checkpoint_lock.h).
#include "runtime/checkpoint/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <thread>

#include "common/printable_text.h"

namespace paraplan {

namespace {

constexpr const char* kLockFile = ".paraplan-lock";

std::string now_text() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char text[32];
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return text;
}

// The lock file's text (at most a line's worth), as it is.
std::string lock_text(int fd) {
  char text[1024];
  const ssize_t got = ::pread(fd, text, sizeof text, 0);
  return got > 0 ? std::string(text, static_cast<size_t>(got)) : std::string();
}

// What the holder wrote into the lock file, for a message.
std::string holder_of(int fd) {
  std::string holder = lock_text(fd);
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
  if (holder.empty()) return "a run that did not say who it is";
  return printable_text(holder, 400);
}

// 64 random bits as hex: two runs never write the same line.
std::string run_id() {
  std::random_device random;
  const uint64_t id = (uint64_t{random()} << 32) ^ random();
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir, const std::string& holder,
                                     double wait_seconds)
    : dir_(dir), path_((std::filesystem::path(dir) / kLockFile).string()) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw std::runtime_error("--checkpoint-dir " + dir + ": cannot create it: " + error.message());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw std::runtime_error("--checkpoint-dir " + dir + ": cannot open its lock file " + path_ +
                             ": " + std::strerror(errno));
  // At most a day: a mistyped huge or non-finite wait stays a wait.
  const double wait = std::isfinite(wait_seconds) ? std::clamp(wait_seconds, 0.0, 86400.0) : 0.0;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long long>(wait * 1000));
  int locked = ::flock(fd_, LOCK_EX | LOCK_NB);
  while (locked != 0 && errno == EWOULDBLOCK && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    locked = ::flock(fd_, LOCK_EX | LOCK_NB);
  }
  if (locked != 0) {
    const int lock_error = errno;
    const std::string other = holder_of(fd_);
    ::close(fd_);
    fd_ = -1;
    if (lock_error == EWOULDBLOCK)
      throw std::runtime_error(
          "--checkpoint-dir " + dir + " is in use by another run (" + other + ")" +
          (wait_seconds > 0 ? " after waiting " + seconds_text(wait_seconds) + " for it to end"
                            : "") +
          "; two runs in one directory would overwrite each other's checkpoints: give this run "
          "another directory, or stop that run");
    throw std::runtime_error("--checkpoint-dir " + dir + ": cannot lock " + path_ + ": " +
                             std::strerror(lock_error));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  line_ = holder + ", pid " + std::to_string(::getpid()) + " on host " + host + ", since " +
          now_text() + ", run " + run_id() + "\n";
  // The previous holder's words go; a reader sees the whole line or none of it
  // only when it raced a starting run, and then the lock decides, not the text.
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, line_.data(), line_.size(), 0) != static_cast<ssize_t>(line_.size())) {
    line_.clear();  // the lock holds without its description, and without the fence
  }
}

void CheckpointDirLock::check_still_held() const {
  if (fd_ < 0 || line_.empty()) return;
  // By path: a lock file made anew is another file than the one held.
  const int now = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  const std::string text = now >= 0 ? lock_text(now) : std::string();
  const std::string other = now >= 0 ? holder_of(now) : "its lock file " + path_ + " was removed";
  if (now >= 0) ::close(now);
  if (text == line_) return;
  std::string ours = line_;
  ours.pop_back();
  throw std::runtime_error("--checkpoint-dir " + dir_ + " was taken by another run (" + other +
                           ") while this one (" + printable_text(ours, 400) +
                           ") ran: its lock did not reach across hosts. This run publishes no "
                           "checkpoint there and stops; the directory stays the other run's");
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace paraplan
