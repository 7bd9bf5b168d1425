// heartbeat.cc: the rank's side of the supervision connection (heartbeat.h).
#include "runtime/comm/heartbeat.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "runtime/comm/line_socket.h"
#include "runtime/comm/supervision_protocol.h"
#include "runtime/comm/watchdog.h"

namespace paraplan {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kConnectSeconds = 10;

struct Connection {
  int fd = -1;
  int world_rank = -1;
  std::string address;
  std::chrono::milliseconds interval{500}, timeout{10000};
  std::mutex write_mutex;  // the thread's beats, report_error from any thread
  std::atomic<bool> stopping{false};
  std::thread thread;
  size_t groups_sent = 0;
};

// Started once and never destroyed: a process may exit (or _Exit) with the
// thread still running, which a destroyed std::thread would turn into
// std::terminate.
std::atomic<Connection*> connection{nullptr};

// SIGTERM: tell the launcher (one write, async-signal-safe), then end as
// SIGTERM would have.
std::atomic<int> signal_fd{-1};
char sigterm_notice[64];
size_t sigterm_notice_length = 0;

void on_sigterm(int number) {
  const int fd = signal_fd.load();
  if (fd >= 0) {
    const ssize_t ignored =
        send(fd, sigterm_notice, sigterm_notice_length, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }
  signal(number, SIG_DFL);
  raise(number);
}

void say_so_on_sigterm(int fd) {
  const std::string notice = supervision::encode_signal(SIGTERM);
  sigterm_notice_length = std::min(notice.size(), sizeof sigterm_notice);
  std::memcpy(sigterm_notice, notice.data(), sigterm_notice_length);
  signal_fd = fd;
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

bool send_line(Connection& link, const std::string& line) {
  std::lock_guard<std::mutex> lock(link.write_mutex);
  return link.fd >= 0 && send_text(link.fd, line);
}

std::string seconds_text(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", duration.count() / 1000.0);
  return text;
}

// The Open MPI daemon that started this rank, when it is one (orted in Open
// MPI 4, prted in 5): it cannot reach mpirun either, and would linger.
void end_open_mpi_daemon() {
  const pid_t parent = getppid();
  std::ifstream comm("/proc/" + std::to_string(parent) + "/comm");
  std::string name;
  if (comm >> name && (name == "orted" || name == "prted")) kill(parent, SIGTERM);
}

[[noreturn]] void end_this_rank(const Connection& link, const std::string& reason) {
  std::fflush(stdout);
  std::fprintf(stderr, "paraplan: error: [rank %d] %s; ending this rank\n", link.world_rank,
               reason.c_str());
  std::fflush(stderr);
  end_open_mpi_daemon();
  std::_Exit(1);
}

supervision::Beat current_beat(Watchdog::Snapshot& snapshot) {
  supervision::Beat beat;
  beat.idle_ms = std::llround(snapshot.idle_seconds * 1000);
  for (size_t id = 0; id < snapshot.groups.size(); ++id)
    beat.entered[static_cast<int>(id)] = snapshot.groups[id].entered;
  for (Watchdog::Snapshot::Open& open : snapshot.open)
    beat.open.push_back({open.group, open.sequence, std::llround(open.age_seconds * 1000),
                         std::move(open.what), open.to_rank, open.from_rank});
  return beat;
}

// Sends the groups made since the last call: at once, not at the next beat,
// so that the launcher knows every rank's groups (and where the tensor groups
// run) even in a job that ends before its first beat.
void send_new_groups(Connection& link) {
  for (const Watchdog::Snapshot::Group& group :
       Watchdog::instance().groups_after(link.groups_sent)) {
    send_line(link, supervision::encode_group(
                        {static_cast<int>(link.groups_sent), group.name, group.members}));
    ++link.groups_sent;
  }
}

void send_beat(Connection& link) {
  Watchdog::Snapshot snapshot = Watchdog::instance().snapshot();
  send_line(link, supervision::encode_beat(current_beat(snapshot)));
}

void run(Connection& link) {
  LineBuffer received;
  auto last_heard = Clock::now();
  auto next_beat = Clock::now();
  while (!link.stopping.load()) {
    const auto now = Clock::now();
    // A failed write is the connection's end, which the read below sees.
    send_new_groups(link);
    if (now >= next_beat) {
      send_beat(link);
      next_beat = now + link.interval;
    }
    if (now - last_heard > link.timeout)
      end_this_rank(link, "nothing heard from the launcher at " + link.address + " for " +
                              seconds_text(link.timeout) +
                              ": this host may be cut off the network");
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - now);
    pollfd readable{link.fd, POLLIN, 0};
    if (poll(&readable, 1, static_cast<int>(std::clamp<long long>(wait.count(), 1, 100))) <= 0)
      continue;
    const long read = received.read_from(link.fd);
    if (read == 0 || (read < 0 && errno != EAGAIN && errno != EINTR)) {
      if (link.stopping.load()) return;
      end_this_rank(link, "the launcher at " + link.address +
                              " closed the connection (it ended or was killed)");
    }
    while (const std::optional<std::string> line = received.next_line()) {
      const auto message = supervision::parse_launcher_message(*line);
      if (!message) continue;
      last_heard = Clock::now();
      // The launcher is ending the job and has said why; it waits for nobody.
      if (message->type == supervision::LauncherMessage::Type::kStop) std::_Exit(1);
    }
  }
}

// The welcome, within the connect time: a wrong token gets the connection closed.
supervision::Welcome await_welcome(int fd, const std::string& address) {
  LineBuffer received;
  const auto deadline = Clock::now() + std::chrono::seconds(static_cast<int>(kConnectSeconds));
  while (Clock::now() < deadline) {
    pollfd readable{fd, POLLIN, 0};
    if (poll(&readable, 1, 100) <= 0) continue;
    if (received.read_from(fd) <= 0) break;
    while (const std::optional<std::string> line = received.next_line()) {
      const auto message = supervision::parse_launcher_message(*line);
      if (message && message->type == supervision::LauncherMessage::Type::kWelcome)
        return message->welcome;
    }
  }
  throw std::runtime_error("the launcher at " + address +
                           " did not accept this rank (a stale PARAPLAN_SUPERVISOR or "
                           "PARAPLAN_SUPERVISOR_TOKEN?); start the job with `paraplan launch`");
}

}  // namespace

bool Heartbeat::start_from_environment(int world_rank) {
  const char* address = std::getenv(supervision::kAddressVariable);
  if (address == nullptr || address[0] == '\0') return false;
  if (connection.load() != nullptr)
    throw std::logic_error("Heartbeat::start_from_environment called twice");
  const auto host_port = supervision::split_address(address);
  if (!host_port)
    throw std::runtime_error(std::string(supervision::kAddressVariable) + "='" + address +
                             "' is not host:port; it is set by `paraplan launch`");
  const char* token = std::getenv(supervision::kTokenVariable);
  auto link = std::make_unique<Connection>();
  link->world_rank = world_rank;
  link->address = address;
  try {
    link->fd = connect_tcp(host_port->first, host_port->second, kConnectSeconds);
  } catch (const std::exception& error) {
    throw std::runtime_error(
        std::string("rank ") + std::to_string(world_rank) +
        " cannot reach the launcher: " + error.what() +
        "; every host must reach the launching host over TCP, as Open MPI's daemons do "
        "(choose the network with `paraplan launch --network-interface`)");
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  supervision::Hello hello{token ? token : "", world_rank, static_cast<long>(getpid()), host};
  if (!send_text(link->fd, supervision::encode_hello(hello)))
    throw std::runtime_error("the launcher at " + link->address + " closed the connection");
  const supervision::Welcome welcome = await_welcome(link->fd, link->address);
  link->interval = std::chrono::milliseconds(std::max(10, welcome.interval_ms));
  link->timeout = std::chrono::milliseconds(std::max(welcome.timeout_ms, welcome.interval_ms * 2));
  Watchdog::instance().set_tracking(true);
  say_so_on_sigterm(link->fd);
  Connection* started = link.release();
  connection.store(started);
  started->thread = std::thread([started] { run(*started); });
  return true;
}

bool Heartbeat::active() {
  return connection.load() != nullptr;
}

void Heartbeat::report_error(const std::string& message) noexcept {
  Connection* link = connection.load();
  if (link == nullptr) return;
  try {
    send_line(*link, supervision::encode_error(message));
  } catch (...) {  // never throws: this runs on the way out of a failing rank
  }
}

void Heartbeat::finish() noexcept {
  Connection* link = connection.load();
  if (link == nullptr || link->stopping.exchange(true)) return;
  if (link->thread.joinable()) link->thread.join();
  try {
    send_new_groups(*link);
    send_line(*link, supervision::encode_done());
  } catch (...) {
  }
  std::lock_guard<std::mutex> lock(link->write_mutex);
  signal_fd = -1;
  close(link->fd);
  link->fd = -1;
}

}  // namespace paraplan
