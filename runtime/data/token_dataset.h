// token_dataset.h: one dataset of llm.c token shards, as a data argument names
// it (data_paths.h): every shard opened and its header checked when the
// dataset is opened, memory-mapped (ranks on a node share the page cache).
//
// A sample never crosses a shard: a shard of N tokens holds (N - 1) / seq_len
// samples (llm.c's loader reads each shard on its own too), and the dataset's
// samples are its shards' in order. With one shard this is the single file's
// layout: sample i covers tokens [i * seq_len, i * seq_len + seq_len + 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data/token_file.h"

namespace paraplan {

class TokenDataset {
 public:
  // Opens the files of `spec` ("train.bin", "shards/*.bin", "a.bin,b.bin");
  // `what` names it in errors ("--data"). Throws std::runtime_error naming
  // the file and field for a bad shard, both files for shards of different
  // formats (uint16 and uint32), and the spec when no shard holds a sample.
  TokenDataset(const std::string& spec, int seq_len, const std::string& what);

  const std::string& spec() const { return spec_; }
  int seq_len() const { return seq_len_; }
  TokenFormat format() const { return shards_.front().format(); }
  int64_t num_samples() const { return first_sample_.back(); }
  int64_t num_tokens() const;
  size_t num_shards() const { return shards_.size(); }
  const TokenFile& shard(size_t s) const { return shards_[s]; }

  // Sample i (0 <= i < num_samples()): seq_len inputs and the seq_len targets
  // one token later. A token >= vocab_size throws std::runtime_error naming
  // the shard and the token's position in it.
  void read_sample(int64_t i, int vocab_size, int32_t* inputs, int32_t* targets) const;

 private:
  std::string spec_;
  int seq_len_;
  std::vector<TokenFile> shards_;
  std::vector<int64_t> first_sample_;  // per shard, then the total
};

}  // namespace paraplan
