// data_loader.cc: samples of a token file by global sample index.
#include "runtime/data/data_loader.h"

#include <stdexcept>
#include <string>

namespace paraplan {

DataLoader::DataLoader(const TokenFile& tokens, int seq_len) : tokens_(tokens), seq_len_(seq_len) {
  if (seq_len <= 0)
    throw std::runtime_error(tokens.path() + ": seq_len " + std::to_string(seq_len) +
                             " must be positive");
  samples_per_epoch_ = tokens.num_tokens() > 0 ? (tokens.num_tokens() - 1) / seq_len : 0;
  if (samples_per_epoch_ == 0)
    throw std::runtime_error(tokens.path() + " holds " + std::to_string(tokens.num_tokens()) +
                             " tokens; seq_len " + std::to_string(seq_len) + " needs at least " +
                             std::to_string(int64_t{seq_len} + 1) +
                             " (a sample's targets reach one token past its inputs)");
}

void DataLoader::load(int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const {
  if (first_sample < 0 || count < 0)
    throw std::runtime_error(tokens_.path() + ": cannot load " + std::to_string(count) +
                             " samples from index " + std::to_string(first_sample) +
                             "; both must be non-negative");
  // Reduced before adding, so no index of int64's range can overflow.
  int64_t position = first_sample % samples_per_epoch_;
  for (int i = 0; i < count; ++i, position = (position + 1) % samples_per_epoch_) {
    const int64_t start = position * seq_len_;
    tokens_.read(start, seq_len_, inputs + static_cast<int64_t>(i) * seq_len_);
    tokens_.read(start + 1, seq_len_, targets + static_cast<int64_t>(i) * seq_len_);
  }
}

}  // namespace paraplan
