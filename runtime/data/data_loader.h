// data_loader.h: training samples addressed by global sample index, so the
// data order depends only on the index, never on the rank or the plan. Sample
// k of a token file with N tokens covers tokens [(k mod S) * seq_len,
// (k mod S) * seq_len + seq_len + 1), where S = (N - 1) / seq_len samples make
// an epoch: the inputs are its first seq_len tokens, the targets the same
// window shifted by one token.
#pragma once

#include <cstdint>

#include "runtime/data/sample_source.h"
#include "runtime/data/token_file.h"

namespace paraplan {

class DataLoader final : public SampleSource {
 public:
  // Keeps a reference to `tokens`, which must outlive the loader. Throws
  // std::runtime_error if the file cannot hold one sample of seq_len tokens.
  DataLoader(const TokenFile& tokens, int seq_len);

  int seq_len() const { return seq_len_; }
  int64_t samples_per_epoch() const { return samples_per_epoch_; }

  // Fills `count` consecutive samples starting at global index first_sample
  // (wrapping around at each epoch end) into inputs and targets, each
  // count * seq_len int32 values, sample-major.
  void load(int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const override;

 private:
  const TokenFile& tokens_;
  int seq_len_;
  int64_t samples_per_epoch_;
};

}  // namespace paraplan
