// sampler.h: `paraplan sample`: text generated from a checkpoint, one byte-level
// token at a time, with temperature and top-k sampling from a seeded
// counter-based RNG (the same seed gives the same text).
#pragma once

#include <cstdint>
#include <string>

namespace paraplan {

struct SampleOptions {
  std::string checkpoint;  // a step directory or a checkpoint dir with 'latest'
  std::string prompt;
  int tokens = 200;
  float temperature = 0.8f;  // 0: greedy
  int top_k = 40;            // 0: the whole vocabulary
  uint64_t seed = 1337;
  std::string backend = "cpu";
};

// Returns the generated continuation (without the prompt).
std::string sample_text(const SampleOptions& options);

}  // namespace paraplan
