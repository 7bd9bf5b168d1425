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

// One run of the job, advanced one poll at a time: the ranks' connections,
// what JobWatch makes of them, and mpirun with what it leaves behind.
class JobKeeper {
 public:
  JobKeeper(const SupervisorOptions& options, int listen_fd, const std::string& token, pid_t mpirun,
            std::optional<JobFailure>& last_failure)
      : options_(options),
        listen_fd_(listen_fd),
        token_(token),
        mpirun_(mpirun),
        last_failure_(last_failure),
        watch_(options.mesh, options.heartbeat_timeout),
        welcome_(protocol::encode_welcome({static_cast<int>(watch_.interval().count()),
                                           static_cast<int>(options.heartbeat_timeout.count())})),
        beat_(protocol::encode_launcher_beat()),
        next_beat_(Clock::now()) {}

  // One turn: the launcher's exit status once the job has ended, else nullopt.
  std::optional<int> step() {
    const Clock::time_point now = Clock::now();
    if (received_signal != 0 && !ending_) {
      std::cerr << "paraplan launch: " << strsignal(received_signal) << "; ending the job"
                << std::endl;
      end_job(now);
    }
    serve_connections(now);
    drop_closed_and_silent(now);
    beat_and_diagnose(now);
    reap_children(now);
    if (ending_ && now >= kill_at_) kill_what_is_left();
    if (!mpirun_running_ && now - mpirun_ended_at_ >= kDrainAfterExit) return after_mpirun(now);
    return std::nullopt;
  }

 private:
  void end_job(Clock::time_point now) {
    ending_ = true;
    for (const auto& client : clients_)
      if (client->rank >= 0) send_text(client->fd, protocol::encode_stop());
    if (mpirun_running_) kill(-mpirun_, SIGTERM);
    kill_at_ = now + options_.exit_grace;
  }

  // New connections and the messages of those there.
  void serve_connections(Clock::time_point now) {
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}};
    for (const auto& client : clients_) fds.push_back({client->fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 50) <= 0) return;
    if (fds[0].revents & POLLIN) accept_connections(now);
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_messages(*clients_[i - 1]);
  }

  void accept_connections(Clock::time_point now) {
    while (true) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      auto client = std::make_unique<Client>();
      client->fd = fd;
      client->accepted = now;
      clients_.push_back(std::move(client));
    }
  }

  static void close_client(Client& client) {
    close(client.fd);
    client.fd = -1;
  }

  // Closes the client when its connection ended, it speaks no protocol, or it
  // is not one of this job's ranks.
  void read_messages(Client& client) {
    const long read = client.received.read_from(client.fd);
    if (read == 0 || (read < 0 && errno != EAGAIN && errno != EINTR) ||
        client.received.pending() > LineBuffer::kMaximumLine) {
      if (client.rank >= 0) watch_.disconnected(client.rank, Clock::now());
      close_client(client);
      return;
    }
    while (const std::optional<std::string> line = client.received.next_line()) {
      const auto message = protocol::parse_rank_message(*line);
      if (!message) continue;
      if (client.rank >= 0) {
        watch_.receive(client.rank, *message, Clock::now());
      } else if (message->type == protocol::RankMessage::Type::kHello &&
                 message->hello.token == token_ && watch_.check_in(message->hello, Clock::now())) {
        client.rank = message->hello.rank;
        send_text(client.fd, welcome_);
      } else {  // not one of this job's ranks
        close_client(client);
        return;
      }
    }
  }

  void drop_closed_and_silent(Clock::time_point now) {
    std::erase_if(clients_, [&](const std::unique_ptr<Client>& client) {
      if (client->fd >= 0 && client->rank < 0 && now - client->accepted > kHelloWithin)
        close_client(*client);
      return client->fd < 0;
    });
  }

  // Beats, the placement once every rank checked in, and a failure.
  void beat_and_diagnose(Clock::time_point now) {
    if (now >= next_beat_) {
      for (const auto& client : clients_)
        if (client->rank >= 0) send_text(client->fd, beat_);
      next_beat_ = now + watch_.interval();
    }
    if (!placement_said_) {
      if (const std::optional<std::string> placement = watch_.placement()) {
        std::cout << "paraplan launch: " << *placement << std::endl;
        placement_said_ = true;
      }
    }
    if (!ending_ && mpirun_running_) {
      if (std::optional<JobFailure> failure = watch_.diagnose(now)) {
        print_failure(failure->message);
        last_failure_ = std::move(failure);
        end_job(now);
      }
    }
  }

  // mpirun, and the orphans re-parented here (reaped as they end).
  void reap_children(Clock::time_point now) {
    for (int status = 0;;) {
      const pid_t ended = waitpid(-1, &status, WNOHANG);
      if (ended <= 0) break;
      if (ended == mpirun_) {
        mpirun_running_ = false;
        mpirun_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        mpirun_ended_at_ = now;
      }
    }
  }

  void kill_what_is_left() {
    for (const pid_t pid : descendants_of(getpid()))
      if (pid != mpirun_ || mpirun_running_) kill(pid, SIGKILL);
    if (mpirun_running_) kill(-mpirun_, SIGKILL);
  }

  // Once mpirun has gone and its last messages are read: the exit status, or
  // nullopt while what is left of the job has its grace.
  std::optional<int> after_mpirun(Clock::time_point now) {
    if (!placement_said_) {  // a job shorter than the first beat
      if (const std::optional<std::string> placement = watch_.placement())
        std::cout << "paraplan launch: " << *placement << std::endl;
      placement_said_ = true;
    }
    if (!ending_ && mpirun_status_ == 0) return 0;
    if (!ending_) {
      // mpirun ended the job itself (a rank it saw fail, a daemon it lost):
      // say what the ranks said, and end what is left of it here.
      last_failure_ = watch_.diagnose(now);
      if (last_failure_) print_failure(last_failure_->message);
      end_job(now);
      failure_status_ = last_failure_ ? 1 : mpirun_status_;
    }
    // Ranks told to stop and mpirun gone: wait out the rest of the grace for
    // anything still here, then the kill in step() has ended it.
    if (descendants_of(getpid()).empty() || now >= kill_at_) return failure_status_;
    return std::nullopt;
  }

  const SupervisorOptions& options_;
  const int listen_fd_;
  const std::string& token_;
  const pid_t mpirun_;
  std::optional<JobFailure>& last_failure_;
  JobWatch watch_;
  const std::string welcome_, beat_;
  std::vector<std::unique_ptr<Client>> clients_;
  bool placement_said_ = false, ending_ = false, mpirun_running_ = true;
  int mpirun_status_ = 0, failure_status_ = 1;
  Clock::time_point next_beat_, kill_at_{}, mpirun_ended_at_{};
};

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
  JobKeeper job(options_, listen_fd_, token_, mpirun, last_failure_);
  while (true)
    if (const std::optional<int> status = job.step()) return *status;
}

}  // namespace paraplan
