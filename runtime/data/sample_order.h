// sample_order.h: which stored sample a global sample index reads, as pure
// functions of the index (no state, no tables that grow with the run), so any
// rank computes any sample, every plan reads the same ones, and a resumed run
// continues exactly.
//
// Shuffling (Megatron's: a seeded permutation of the samples in each epoch):
// `permute` is a bijection of [0, n) chosen by a key, a Feistel network on the
// next power of four with cycle walking, O(1) memory and time per index, so a
// corpus of 10^10 samples needs no index file.
//
// Blending (Megatron's BlendedDataset): `BlendSchedule` interleaves datasets
// by weight in a fixed period of kBlendPeriod indices. Within a period each
// dataset takes round(weight * period) places, spread by smooth weighted
// round-robin (any prefix is within one sample of its share), and a dataset's
// draws count 0, 1, 2, ... in index order, so the k-th index's place in its
// dataset is known without counting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace paraplan {

// position -> sample: a pseudo-random bijection of [0, n) for each key.
// n >= 1, 0 <= position < n.
int64_t permute(int64_t position, int64_t n, uint64_t key);

// The key of dataset `dataset`'s permutation in `epoch` under `seed`.
uint64_t shuffle_key(uint64_t seed, int dataset, uint64_t epoch);

class BlendSchedule {
 public:
  static constexpr int kBlendPeriod = 4096;

  // Weights: positive and finite, normalized here. One weight: the identity
  // (period 1). Throws std::invalid_argument otherwise.
  explicit BlendSchedule(const std::vector<double>& weights);

  struct Draw {
    int dataset;
    int64_t index;  // the dataset's own sample index (its draws so far)
  };
  // Global index k >= 0 -> the dataset it reads and that dataset's index.
  Draw draw(int64_t k) const;

  int period() const { return static_cast<int>(place_dataset_.size()); }
  // Places of each dataset per period: its share is places(d) / period().
  int places(int dataset) const { return places_[static_cast<size_t>(dataset)]; }

 private:
  std::vector<int> places_;         // per dataset, summing to the period
  std::vector<int> place_dataset_;  // per place in the period
  std::vector<int> place_rank_;     // per place: the dataset's draws before it in the period
};

}  // namespace paraplan
