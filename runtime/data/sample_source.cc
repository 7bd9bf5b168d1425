// sample_source.cc: synthetic samples (counter-based hashing, no state).
#include "runtime/data/sample_source.h"

#include <stdexcept>
#include <string>

#include "common/splitmix64.h"

namespace paraplan {

SyntheticSamples::SyntheticSamples(int vocab_size, int seq_len, uint64_t seed)
    : vocab_size_(vocab_size), seq_len_(seq_len), seed_(seed) {
  if (vocab_size <= 0 || seq_len <= 0)
    throw std::invalid_argument("synthetic samples: vocab_size " + std::to_string(vocab_size) +
                                " and seq_len " + std::to_string(seq_len) +
                                " must both be positive");
}

void SyntheticSamples::load(int64_t first_sample, int count, int32_t* inputs,
                            int32_t* targets) const {
  for (int i = 0; i < count; ++i) {
    // Token t + 1 of a sample is the target of position t, as in real data.
    const uint64_t base = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(first_sample + i)));
    auto token = [&](int t) {
      return static_cast<int32_t>(splitmix64(base + static_cast<uint64_t>(t)) %
                                  static_cast<uint64_t>(vocab_size_));
    };
    int32_t* in = inputs + static_cast<int64_t>(i) * seq_len_;
    int32_t* out = targets + static_cast<int64_t>(i) * seq_len_;
    for (int t = 0; t < seq_len_; ++t) {
      in[t] = token(t);
      out[t] = token(t + 1);
    }
  }
}

}  // namespace paraplan
