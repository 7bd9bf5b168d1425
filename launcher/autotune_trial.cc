// autotune_trial.cc: running one experiment as a child process group with a time limit.
#include "launcher/autotune_trial.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace paraplan {

const char* experiment_status_name(ExperimentStatus status) {
  switch (status) {
    case ExperimentStatus::kMeasured:
      return "measured";
    case ExperimentStatus::kOutOfMemory:
      return "out of memory";
    case ExperimentStatus::kTimedOut:
      return "timed out";
    case ExperimentStatus::kFailed:
      return "failed";
  }
  return "unknown";
}

namespace {

bool all_dashes(const std::string& line) {
  return !line.empty() && line.find_first_not_of('-') == std::string::npos;
}

// The log's error line: paraplan's own, else the first line of mpirun's
// banner (the text between rows of dashes, where mpirun explains itself),
// else the last non-empty line.
std::string error_line(const std::string& log_path) {
  std::ifstream log(log_path);
  std::string line, last, error, banner;
  bool in_banner = false, banner_started = false;
  while (std::getline(log, line)) {
    if (line.empty()) continue;
    if (all_dashes(line)) {
      in_banner = !in_banner;
      banner_started = false;
      continue;
    }
    last = line;
    if (line.find("paraplan: error:") != std::string::npos) error = line;
    // A banner's first line; the last banner that is not a warning (Open MPI
    // warns at start-up about transports it skips).
    if (in_banner && !banner_started && line.rfind("WARNING", 0) != 0) banner = line;
    banner_started = true;
  }
  if (!error.empty()) return error;
  if (banner.find("attempt to run as root") != std::string::npos)
    return "mpirun refuses to run as root: set OMPI_ALLOW_RUN_AS_ROOT=1 and "
           "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (as containers do), or run as another user";
  if (banner.empty()) return last;
  return banner.rfind("mpirun", 0) == 0 ? banner : "mpirun: " + banner;
}

}  // namespace

ExperimentOutcome run_experiment(const std::vector<std::string>& arguments,
                                 const std::string& log_path, double timeout_seconds) {
  if (arguments.empty()) throw std::invalid_argument("run_experiment: no command");
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    setpgid(0, 0);  // its own group: a timeout kills mpirun and every rank
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    const int null_input = open("/dev/null", O_RDONLY);
    if (null_input >= 0) dup2(null_input, STDIN_FILENO);
    std::vector<char*> argv;
    for (const std::string& argument : arguments)
      argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  setpgid(child, child);  // also here, whichever runs first
  ExperimentOutcome outcome;
  int status = 0;
  bool timed_out = false;
  while (true) {
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR)
      throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!timed_out && elapsed > timeout_seconds) {
      timed_out = true;
      kill(-child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (timed_out) {
    outcome.status = ExperimentStatus::kTimedOut;
    outcome.message = "killed after " + std::to_string(static_cast<int>(timeout_seconds)) + " s";
    return outcome;
  }
  if (outcome.exit_code == 0) {
    outcome.status = ExperimentStatus::kMeasured;
    return outcome;
  }
  outcome.message = error_line(log_path);
  const bool memory = outcome.message.find("out of device memory") != std::string::npos ||
                      outcome.message.find("out of memory") != std::string::npos;
  outcome.status = memory ? ExperimentStatus::kOutOfMemory : ExperimentStatus::kFailed;
  if (outcome.exit_code == 127 && outcome.message.empty())
    outcome.message = "cannot run '" + arguments.front() + "'";
  return outcome;
}

}  // namespace paraplan
