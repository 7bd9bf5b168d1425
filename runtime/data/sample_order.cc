// sample_order.cc: seeded permutations and weighted blends by index
// (sample_order.h).
#include "runtime/data/sample_order.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "common/splitmix64.h"

namespace paraplan {

namespace {

constexpr int kFeistelRounds = 6;

}  // namespace

int64_t permute(int64_t position, int64_t n, uint64_t key) {
  if (n <= 1) return 0;
  // A balanced Feistel network permutes [0, 4^h) for the smallest 4^h >= n;
  // walking the cycle until the value falls below n restricts it to a
  // permutation of [0, n) (at most 4 steps expected, as 4^h < 4n).
  int half_bits = 1;
  while (half_bits < 32 && (uint64_t{1} << (2 * half_bits)) < static_cast<uint64_t>(n)) ++half_bits;
  const uint64_t mask = (uint64_t{1} << half_bits) - 1;
  uint64_t value = static_cast<uint64_t>(position);
  do {
    uint64_t left = value >> half_bits, right = value & mask;
    for (int round = 0; round < kFeistelRounds; ++round) {
      const uint64_t next =
          left ^ (splitmix64(right ^ splitmix64(key + static_cast<uint64_t>(round))) & mask);
      left = right;
      right = next;
    }
    value = (left << half_bits) | right;
  } while (value >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(value);
}

uint64_t shuffle_key(uint64_t seed, int dataset, uint64_t epoch) {
  return splitmix64(splitmix64(seed) ^ splitmix64(0x5eedull + static_cast<uint64_t>(dataset)) ^
                    splitmix64(~epoch));
}

BlendSchedule::BlendSchedule(const std::vector<double>& weights) {
  if (weights.empty()) throw std::invalid_argument("a blend needs at least one dataset");
  double total = 0;
  for (size_t d = 0; d < weights.size(); ++d) {
    if (!(weights[d] > 0) || !std::isfinite(weights[d]))
      throw std::invalid_argument("dataset " + std::to_string(d) + "'s weight " +
                                  std::to_string(weights[d]) + " must be positive and finite");
    total += weights[d];
  }
  const int datasets = static_cast<int>(weights.size());
  const int period = datasets == 1 ? 1 : kBlendPeriod;
  if (datasets > period)
    throw std::invalid_argument("a blend of " + std::to_string(datasets) +
                                " datasets exceeds the blend period of " +
                                std::to_string(kBlendPeriod));
  // Places by largest remainder, every dataset at least one.
  places_.assign(weights.size(), 0);
  std::vector<double> remainder(weights.size());
  int given = 0;
  for (size_t d = 0; d < weights.size(); ++d) {
    const double exact = weights[d] / total * period;
    places_[d] = std::max(1, static_cast<int>(std::floor(exact)));
    remainder[d] = exact - std::floor(exact);
    given += places_[d];
  }
  std::vector<int> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return remainder[a] > remainder[b]; });
  for (size_t i = 0; given < period; i = (i + 1) % order.size(), ++given) ++places_[order[i]];
  // Too many minimum places: take them back from the largest.
  while (given > period) {
    --*std::max_element(places_.begin(), places_.end());
    --given;
  }
  // Smooth weighted round-robin: each place goes to the dataset furthest
  // behind its share; over the period each dataset gets exactly its places.
  std::vector<int64_t> credit(weights.size(), 0);
  std::vector<int> taken(weights.size(), 0);
  place_dataset_.resize(static_cast<size_t>(period));
  place_rank_.resize(static_cast<size_t>(period));
  for (int place = 0; place < period; ++place) {
    for (size_t d = 0; d < weights.size(); ++d) credit[d] += places_[d];
    const size_t chosen =
        static_cast<size_t>(std::max_element(credit.begin(), credit.end()) - credit.begin());
    credit[chosen] -= period;
    place_dataset_[static_cast<size_t>(place)] = static_cast<int>(chosen);
    place_rank_[static_cast<size_t>(place)] = taken[chosen]++;
  }
}

BlendSchedule::Draw BlendSchedule::draw(int64_t k) const {
  const int64_t period = static_cast<int64_t>(place_dataset_.size());
  const size_t place = static_cast<size_t>(k % period);
  const int dataset = place_dataset_[place];
  // (k / period) * places <= k: no overflow for any k >= 0.
  return {dataset, (k / period) * places_[static_cast<size_t>(dataset)] + place_rank_[place]};
}

}  // namespace paraplan
