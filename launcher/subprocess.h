// subprocess.h: running commands (no shell) and collecting what they print:
// how `paraplan launch` asks every host, over ssh and all at once, for its
// preflight findings.
#pragma once

#include <string>
#include <vector>

namespace paraplan {

struct ProcessOutput {
  int exit_code = -1;  // 128 + signal when killed; 127 when it could not be started
  bool timed_out = false;
  std::string out, err;
};

// Runs every command (argv[0] looked up on PATH), at most `at_once` at a
// time, each killed (its process group) after timeout_seconds. Results are in
// the order of `commands`.
std::vector<ProcessOutput> run_concurrently(const std::vector<std::vector<std::string>>& commands,
                                            double timeout_seconds, size_t at_once = 64);

}  // namespace paraplan
