// subprocess.cc: commands run concurrently with their output captured
// (subprocess.h).
#include "launcher/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace paraplan {
namespace {

struct Running {
  size_t index = 0;
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends, -1 once closed
};

Running start(const std::vector<std::string>& command, size_t index) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  }
  std::vector<char*> argv;
  for (const std::string& argument : command) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // a timeout kills what it started too (ssh's proxies, ...)
    const int null_input = open("/dev/null", O_RDONLY);
    if (null_input >= 0) dup2(null_input, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  return {index, pid, out[0], err[0]};
}

// Reads what is there; closes the descriptor at its end.
void drain(int& fd, std::string& into) {
  char buffer[4096];
  const ssize_t n = read(fd, buffer, sizeof buffer);
  if (n > 0) {
    into.append(buffer, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    close(fd);
    fd = -1;
  }
}

}  // namespace

std::vector<ProcessOutput> run_concurrently(const std::vector<std::vector<std::string>>& commands,
                                            double timeout_seconds, size_t at_once) {
  std::vector<ProcessOutput> results(commands.size());
  for (size_t first = 0; first < commands.size(); first += at_once) {
    const size_t last = std::min(commands.size(), first + at_once);
    std::vector<Running> running;
    for (size_t i = first; i < last; ++i) running.push_back(start(commands[i], i));
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));
    bool killed = false;
    while (true) {
      std::vector<pollfd> fds;
      std::vector<std::pair<Running*, bool>> owners;  // (process, is stderr)
      for (Running& process : running) {
        if (process.out >= 0) {
          fds.push_back({process.out, POLLIN, 0});
          owners.push_back({&process, false});
        }
        if (process.err >= 0) {
          fds.push_back({process.err, POLLIN, 0});
          owners.push_back({&process, true});
        }
      }
      if (fds.empty()) break;
      if (!killed && std::chrono::steady_clock::now() > deadline) {
        for (Running& process : running) {
          kill(-process.pid, SIGKILL);
          results[process.index].timed_out = true;
        }
        killed = true;
      }
      if (poll(fds.data(), fds.size(), 100) <= 0) continue;
      for (size_t k = 0; k < fds.size(); ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto [process, is_err] = owners[k];
        ProcessOutput& result = results[process->index];
        drain(is_err ? process->err : process->out, is_err ? result.err : result.out);
      }
    }
    for (Running& process : running) {
      int status = 0;
      while (waitpid(process.pid, &status, 0) < 0 && errno == EINTR) {
      }
      ProcessOutput& result = results[process.index];
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  return results;
}

}  // namespace paraplan
