// sample_source.h: where the executor's micro-batches come from — training
// data addressed by global sample index (DataLoader), or synthetic tokens for
// `paraplan replay`, which measures a plan without any data.
#pragma once

#include <cstdint>

namespace paraplan {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Fills `count` consecutive samples starting at global index first_sample into
  // inputs and targets, each count * seq_len int32 values, sample-major.
  virtual void load(int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const = 0;
};

// Pseudo-random tokens in [0, vocab_size), a pure function of (seed, sample,
// position): every plan and rank sees the same samples, and no file is read.
class SyntheticSamples final : public SampleSource {
 public:
  SyntheticSamples(int vocab_size, int seq_len, uint64_t seed = 1234);
  void load(int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const override;

 private:
  int vocab_size_, seq_len_;
  uint64_t seed_;
};

}  // namespace paraplan
