// data_loader.h: training samples addressed by global sample index, so the
// data order depends only on the index, never on the rank or the plan.
//
// Global index k reads, in turn:
//   1. a dataset: with several, the blend's by weight (sample_order.h);
//      k itself with one;
//   2. that dataset's draw j -> epoch j / S and position j mod S, S being the
//      dataset's samples (token_dataset.h);
//   3. the stored sample: the position itself in file order, or with
//      shuffling the epoch's seeded permutation of it (a new one each epoch,
//      per dataset).
// One dataset in file order is the single file's layout: sample k covers
// tokens [(k mod S) * seq_len, (k mod S) * seq_len + seq_len + 1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/sample_order.h"
#include "runtime/data/sample_source.h"
#include "runtime/data/token_dataset.h"

namespace paraplan {

// A dataset of a blend: its files (data_paths.h) and its weight.
struct DataSource {
  std::string paths;
  double weight = 1.0;
};

struct DataOrder {
  bool shuffle = false;  // false: each dataset in file order
  uint64_t seed = 0;     // the permutations' seed when shuffling
};

class DataLoader final : public SampleSource {
 public:
  // Opens every dataset (data_paths.h, token_dataset.h); `what` names the
  // data in errors ("--data"). Tokens >= vocab_size are refused as loaded.
  // Throws std::runtime_error for bad files, and for no source or a weight
  // that is not positive and finite.
  DataLoader(const std::vector<DataSource>& sources, int seq_len, int vocab_size, DataOrder order,
             const std::string& what);
  // One dataset (a path, glob or list), in file order.
  DataLoader(const std::string& paths, int seq_len, int vocab_size, const std::string& what);

  int seq_len() const { return seq_len_; }
  const DataOrder& order() const { return order_; }
  size_t num_datasets() const { return datasets_.size(); }
  const TokenDataset& dataset(size_t d) const { return *datasets_[d]; }
  const BlendSchedule& blend() const { return blend_; }
  // Samples of one pass over every dataset (with one dataset: its epoch).
  int64_t samples_per_epoch() const;

  // Fills `count` consecutive samples starting at global index first_sample
  // into inputs and targets, each count * seq_len int32 values, sample-major.
  void load(int64_t first_sample, int count, int32_t* inputs, int32_t* targets) const override;

  // The dataset and stored sample global index k reads (k >= 0).
  struct Location {
    int dataset;
    int64_t sample;
  };
  Location locate(int64_t k) const;

 private:
  Location locate(int64_t first, int offset) const;

  std::string name_;  // the flag or key and the files, for errors
  int seq_len_, vocab_size_;
  DataOrder order_;
  std::vector<std::unique_ptr<TokenDataset>> datasets_;
  BlendSchedule blend_;
};

}  // namespace paraplan
