// token_dataset.cc: a dataset's shards and its samples (token_dataset.h).
#include "runtime/data/token_dataset.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/data/data_paths.h"

namespace paraplan {

namespace {

const char* format_name(TokenFormat format) {
  return format == TokenFormat::kUint16 ? "uint16 tokens (the GPT-2 format)"
                                        : "uint32 tokens (the Llama 3 format)";
}

}  // namespace

TokenDataset::TokenDataset(const std::string& spec, int seq_len, const std::string& what)
    : spec_(spec), seq_len_(seq_len) {
  if (seq_len <= 0)
    throw std::runtime_error(what + " " + spec + ": seq_len " + std::to_string(seq_len) +
                             " must be positive");
  for (const std::string& path : expand_data_paths(spec, what)) {
    shards_.emplace_back(path);  // checks the header and the size now
    const TokenFile& shard = shards_.back();
    if (shard.format() != shards_.front().format())
      throw std::runtime_error(what + " " + spec + ": " + shards_.front().path() + " holds " +
                               format_name(shards_.front().format()) + " but " + shard.path() +
                               " holds " + format_name(shard.format()) +
                               "; one run's shards must come from one tokenizer and format");
  }
  first_sample_.push_back(0);
  for (const TokenFile& shard : shards_)
    first_sample_.push_back(first_sample_.back() +
                            (shard.num_tokens() > 0 ? (shard.num_tokens() - 1) / seq_len : 0));
  if (num_samples() > 0) return;
  if (shards_.size() == 1)
    throw std::runtime_error(shards_.front().path() + " holds " +
                             std::to_string(shards_.front().num_tokens()) + " tokens; seq_len " +
                             std::to_string(seq_len) + " needs at least " +
                             std::to_string(int64_t{seq_len} + 1) +
                             " (a sample's targets reach one token past its inputs)");
  throw std::runtime_error(what + " " + spec + ": none of its " + std::to_string(shards_.size()) +
                           " shards holds seq_len + 1 = " + std::to_string(int64_t{seq_len} + 1) +
                           " tokens, the least one sample needs (a sample never crosses shards)");
}

int64_t TokenDataset::num_tokens() const {
  int64_t tokens = 0;
  for (const TokenFile& shard : shards_) tokens += shard.num_tokens();
  return tokens;
}

void TokenDataset::read_sample(int64_t i, int vocab_size, int32_t* inputs, int32_t* targets) const {
  const size_t s = static_cast<size_t>(
      std::upper_bound(first_sample_.begin(), first_sample_.end(), i) - first_sample_.begin() - 1);
  const TokenFile& shard = shards_[s];
  const int64_t start = (i - first_sample_[s]) * seq_len_;
  // The window is seq_len + 1 tokens: inputs are its first seq_len, targets
  // its last. Checked as read: a 10^10-token corpus is not scanned up front.
  shard.read(start, seq_len_, inputs);
  shard.read(start + 1, seq_len_, targets);
  for (int t = 0; t <= seq_len_; ++t) {
    const int32_t token = t < seq_len_ ? inputs[t] : targets[seq_len_ - 1];
    if (token < 0 || token >= vocab_size)
      throw std::runtime_error(shard.path() + ": token " +
                               std::to_string(static_cast<uint32_t>(token)) + " at position " +
                               std::to_string(start + t) + " is >= vocab_size " +
                               std::to_string(vocab_size) +
                               "; tokenize with a matching tokenizer or raise the model's "
                               "vocab_size");
  }
}

}  // namespace paraplan
