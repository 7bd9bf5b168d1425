// supervisor.cc: the launcher's heartbeat server and mpirun's keeper
// (supervisor.h).
#include "launcher/supervisor.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>

#include "runtime/comm/line_socket.h"
#include "runtime/comm/supervision_protocol.h"

namespace paraplan {
namespace {

using Clock = std::chrono::steady_clock;
namespace protocol = supervision;

volatile std::sig_atomic_t received_signal = 0;
void remember_signal(int number) {
  received_signal = number;
}

// A connection before its hello: dropped if it says nothing in time.
constexpr auto kHelloWithin = std::chrono::seconds(10);
// After mpirun exits, the last messages still in flight are read for this long.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(300);

struct Client {
  int fd = -1;
  int rank = -1;  // -1 until its hello
  Clock::time_point accepted;
  LineBuffer received;
};

std::string random_token() {
  std::random_device device;
  std::ostringstream token;
  token << std::hex;
  for (int i = 0; i < 4; ++i) token << device();
  return token.str();
}

// Every process whose ancestors include `root` (read from /proc at once).
std::vector<pid_t> descendants_of(pid_t root) {
  std::multimap<pid_t, pid_t> children;  // parent -> child
  if (DIR* proc = opendir("/proc")) {
    while (const dirent* entry = readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atol(entry->d_name));
      if (pid <= 0) continue;
      std::ifstream stat("/proc/" + std::string(entry->d_name) + "/stat");
      std::string text;
      std::getline(stat, text);
      const size_t end_of_name = text.rfind(')');  // the name may hold spaces and ')'
      if (end_of_name == std::string::npos) continue;
      std::istringstream fields(text.substr(end_of_name + 2));
      char state;
      pid_t parent = 0;
      if (fields >> state >> parent) children.emplace(parent, pid);
    }
    closedir(proc);
  }
  std::vector<pid_t> found;
  std::vector<pid_t> frontier = {root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    const auto [first, last] = children.equal_range(parent);
    for (auto child = first; child != last; ++child) {
      found.push_back(child->second);
      frontier.push_back(child->second);
    }
  }
  return found;
}

void print_failure(const std::string& report) {
  std::cout.flush();
  std::istringstream lines(report);
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    std::cerr << (first ? "paraplan: error: " : "paraplan: ") << line << "\n";
    first = false;
  }
  std::cerr.flush();
}

pid_t start_child(const std::vector<std::string>& arguments,
                  const std::vector<std::string>& environment) {
  std::vector<char*> argv, envp;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  for (const std::string& entry : environment) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error(std::string("launch: fork: ") + std::strerror(errno));
  if (child == 0) {
    // Its own process group: a terminal's Ctrl-C reaches the launcher, which
    // ends the job in order. And gone with the launcher if it is killed.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    std::fprintf(
        stderr, "paraplan: error: launch: cannot run '%s': %s%s\n", argv[0], std::strerror(error),
        error == ENOENT ? "; install Open MPI (mpirun on PATH) or pass --mpirun PATH" : "");
    _exit(127);
  }
  setpgid(child, child);
  return child;
}

}  // namespace

Supervisor::Supervisor(SupervisorOptions options)
    : options_(std::move(options)), token_(random_token()) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0)
    throw std::runtime_error(std::string("launch: socket: ") + std::strerror(errno));
  const int on = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  if (inet_pton(AF_INET, options_.listen_address.c_str(), &address.sin_addr) != 1 ||
      bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      listen(listen_fd_, 1024) != 0) {
    const int error = errno;
    close(listen_fd_);
    throw std::runtime_error("launch: cannot listen for the ranks' heartbeats on " +
                             options_.listen_address + ": " + std::strerror(error));
  }
  socklen_t length = sizeof address;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
}

Supervisor::~Supervisor() {
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::string Supervisor::address() const {
  return options_.listen_address + ":" + std::to_string(port_);
}

bool supervision_interrupted() {
  return received_signal != 0;
}

int Supervisor::run(const std::vector<std::string>& arguments,
                    const std::vector<std::string>& environment) {
  // Whatever mpirun leaves behind when it dies (its ssh, its local ranks) is
  // re-parented here instead of to init, so it can be found and ended.
  last_failure_.reset();
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::signal(SIGPIPE, SIG_IGN);
  for (const int number : {SIGINT, SIGTERM, SIGHUP}) std::signal(number, remember_signal);
  const pid_t mpirun = start_child(arguments, environment);

  JobWatch watch(options_.mesh, options_.heartbeat_timeout);
  const std::string welcome =
      protocol::encode_welcome({static_cast<int>(watch.interval().count()),
                                static_cast<int>(options_.heartbeat_timeout.count())});
  const std::string beat = protocol::encode_launcher_beat();
  std::vector<std::unique_ptr<Client>> clients;
  bool placement_said = false, ending = false, mpirun_running = true;
  int mpirun_status = 0, failure_status = 1;
  Clock::time_point next_beat = Clock::now(), kill_at{}, mpirun_ended_at{};

  const auto end_job = [&](Clock::time_point now) {
    ending = true;
    for (const auto& client : clients)
      if (client->rank >= 0) send_text(client->fd, protocol::encode_stop());
    if (mpirun_running) kill(-mpirun, SIGTERM);
    kill_at = now + options_.exit_grace;
  };

  while (true) {
    const Clock::time_point now = Clock::now();
    if (received_signal != 0 && !ending) {
      std::cerr << "paraplan launch: " << strsignal(received_signal) << "; ending the job"
                << std::endl;
      end_job(now);
    }
    // ---- connections and messages
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
    for (const auto& client : clients) fds.push_back({client->fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 50) > 0) {
      if (fds[0].revents & POLLIN) {
        while (true) {
          const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          auto client = std::make_unique<Client>();
          client->fd = fd;
          client->accepted = now;
          clients.push_back(std::move(client));
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Client& client = *clients[i - 1];
        const long read = client.received.read_from(client.fd);
        if (read == 0 || (read < 0 && errno != EAGAIN && errno != EINTR) ||
            client.received.pending() > LineBuffer::kMaximumLine) {
          if (client.rank >= 0) watch.disconnected(client.rank, Clock::now());
          close(client.fd);
          client.fd = -1;
          continue;
        }
        while (const std::optional<std::string> line = client.received.next_line()) {
          const auto message = protocol::parse_rank_message(*line);
          if (!message) continue;
          if (client.rank >= 0) {
            watch.receive(client.rank, *message, Clock::now());
          } else if (message->type == protocol::RankMessage::Type::kHello &&
                     message->hello.token == token_ &&
                     watch.check_in(message->hello, Clock::now())) {
            client.rank = message->hello.rank;
            send_text(client.fd, welcome);
          } else {  // not one of this job's ranks
            close(client.fd);
            client.fd = -1;
            break;
          }
        }
      }
    }
    std::erase_if(clients, [&](const std::unique_ptr<Client>& client) {
      if (client->fd >= 0 && client->rank < 0 && now - client->accepted > kHelloWithin) {
        close(client->fd);
        client->fd = -1;
      }
      return client->fd < 0;
    });
    // ---- beats, placement, failures
    if (now >= next_beat) {
      for (const auto& client : clients)
        if (client->rank >= 0) send_text(client->fd, beat);
      next_beat = now + watch.interval();
    }
    if (!placement_said) {
      if (const std::optional<std::string> placement = watch.placement()) {
        std::cout << "paraplan launch: " << *placement << std::endl;
        placement_said = true;
      }
    }
    if (!ending && mpirun_running) {
      if (std::optional<JobFailure> failure = watch.diagnose(now)) {
        print_failure(failure->message);
        last_failure_ = std::move(failure);
        end_job(now);
      }
    }
    // ---- mpirun and what it left
    // mpirun, and the orphans re-parented here (reaped as they end).
    for (int status = 0;;) {
      const pid_t ended = waitpid(-1, &status, WNOHANG);
      if (ended <= 0) break;
      if (ended == mpirun) {
        mpirun_running = false;
        mpirun_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        mpirun_ended_at = now;
      }
    }
    if (ending && now >= kill_at) {
      for (const pid_t pid : descendants_of(getpid()))
        if (pid != mpirun || mpirun_running) kill(pid, SIGKILL);
      if (mpirun_running) kill(-mpirun, SIGKILL);
    }
    if (!mpirun_running && now - mpirun_ended_at >= kDrainAfterExit) {
      if (!placement_said) {  // a job shorter than the first beat
        if (const std::optional<std::string> placement = watch.placement())
          std::cout << "paraplan launch: " << *placement << std::endl;
        placement_said = true;
      }
      if (!ending && mpirun_status == 0) return 0;
      if (!ending) {
        // mpirun ended the job itself (a rank it saw fail, a daemon it lost):
        // say what the ranks said, and end what is left of it here.
        last_failure_ = watch.diagnose(now);
        if (last_failure_) print_failure(last_failure_->message);
        end_job(now);
        failure_status = last_failure_ ? 1 : mpirun_status;
      }
      // Ranks told to stop and mpirun gone: wait out the rest of the grace for
      // anything still here, then the kill above has ended it.
      if (descendants_of(getpid()).empty() || now >= kill_at) return failure_status;
    }
  }
}

}  // namespace paraplan
