// sample_order_test.cc: permutations are bijections that differ by key and
// look shuffled; blends give each dataset its share in every period and
// count each dataset's draws 0, 1, 2, ... in order.
#include "runtime/data/sample_order.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

namespace paraplan {
namespace {

std::vector<int64_t> permutation(int64_t n, uint64_t key) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = permute(i, n, key);
  return order;
}

TEST(PermuteTest, IsABijectionForEverySizeAndKey) {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 4097}) {
    for (uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
      const std::vector<int64_t> order = permutation(n, key);
      const std::set<int64_t> values(order.begin(), order.end());
      ASSERT_EQ(static_cast<int64_t>(values.size()), n) << "n " << n << " key " << key;
      EXPECT_EQ(*values.begin(), 0);
      EXPECT_EQ(*values.rbegin(), n - 1);
    }
  }
}

TEST(PermuteTest, LooksShuffledAndDependsOnTheKey) {
  const int64_t n = 10000;
  const std::vector<int64_t> a = permutation(n, shuffle_key(1234, 0, 0));
  EXPECT_EQ(a, permutation(n, shuffle_key(1234, 0, 0)));  // reproducible
  for (const std::vector<int64_t>& other :
       {permutation(n, shuffle_key(1235, 0, 0)), permutation(n, shuffle_key(1234, 1, 0)),
        permutation(n, shuffle_key(1234, 0, 1))}) {
    int same = 0;
    for (int64_t i = 0; i < n; ++i)
      same += a[static_cast<size_t>(i)] == other[static_cast<size_t>(i)];
    EXPECT_LT(same, 10);  // a random pair agrees in about one place
  }
  // Neighbours land far apart and few samples stay put (a random
  // permutation: 1 fixed point expected, mean |a[i+1] - a[i]| about n / 3).
  int fixed = 0;
  double gap = 0;
  for (int64_t i = 0; i < n; ++i) {
    fixed += a[static_cast<size_t>(i)] == i;
    if (i + 1 < n)
      gap +=
          std::abs(static_cast<double>(a[static_cast<size_t>(i + 1)] - a[static_cast<size_t>(i)]));
  }
  EXPECT_LT(fixed, 10);
  EXPECT_NEAR(gap / (n - 1) / n, 1.0 / 3.0, 0.02);
  // Each tenth of the positions draws about a tenth from each tenth of the samples.
  for (int block = 0; block < 10; ++block) {
    int low = 0;
    for (int64_t i = block * n / 10; i < (block + 1) * n / 10; ++i)
      low += a[static_cast<size_t>(i)] < n / 10;
    EXPECT_NEAR(low, 100, 40) << "block " << block;
  }
}

TEST(PermuteTest, HugeDomainsStayInRange) {
  const int64_t n = (int64_t{1} << 62) + 12345;
  for (int64_t position : {int64_t{0}, int64_t{1}, n / 2, n - 1}) {
    const int64_t sample = permute(position, n, 99);
    EXPECT_GE(sample, 0);
    EXPECT_LT(sample, n);
  }
}

TEST(BlendScheduleTest, OneDatasetIsTheIdentity) {
  const BlendSchedule blend({3.0});
  EXPECT_EQ(blend.period(), 1);
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{12345678901}}) {
    EXPECT_EQ(blend.draw(k).dataset, 0);
    EXPECT_EQ(blend.draw(k).index, k);
  }
}

TEST(BlendScheduleTest, SharesArePlacesAndDrawsCountUpInOrder) {
  const BlendSchedule blend({0.7, 0.2, 0.1});
  const int period = blend.period();
  EXPECT_EQ(blend.places(0) + blend.places(1) + blend.places(2), period);
  EXPECT_EQ(blend.places(0), 2867);  // round(0.7 * 4096) = 2867.2
  EXPECT_EQ(blend.places(1), 819);
  EXPECT_EQ(blend.places(2), 410);
  std::vector<int64_t> next(3, 0);
  std::vector<double> drawn(3, 0);
  const double share[3] = {0.7, 0.2, 0.1};
  for (int64_t k = 0; k < 3 * period + 17; ++k) {
    const BlendSchedule::Draw draw = blend.draw(k);
    ASSERT_EQ(draw.index, next[static_cast<size_t>(draw.dataset)]++) << "k " << k;
    drawn[static_cast<size_t>(draw.dataset)] += 1;
    // Smooth: every prefix within 1.5 samples of its share (plus rounding).
    for (int d = 0; d < 3; ++d)
      ASSERT_LE(std::abs(drawn[static_cast<size_t>(d)] - share[d] * static_cast<double>(k + 1)),
                1.5 + static_cast<double>(k + 1) / period)
          << "dataset " << d << " after " << k + 1;
  }
  // Far away, the draw is computed directly: period q's draws start at q * places.
  const int64_t q = 1000000007;
  const BlendSchedule::Draw far = blend.draw(q * period);
  EXPECT_EQ(far.dataset, blend.draw(0).dataset);
  EXPECT_EQ(far.index, q * blend.places(far.dataset));
}

TEST(BlendScheduleTest, TinyWeightsGetAPlaceAndBadWeightsAreRefused) {
  const BlendSchedule blend({1.0, 1e-9});
  EXPECT_EQ(blend.places(1), 1);
  EXPECT_EQ(blend.places(0), blend.period() - 1);
  EXPECT_THROW(BlendSchedule({}), std::invalid_argument);
  EXPECT_THROW(BlendSchedule({1.0, 0.0}), std::invalid_argument);
  EXPECT_THROW(BlendSchedule({1.0, -2.0}), std::invalid_argument);
  EXPECT_THROW(BlendSchedule({1.0, std::nan("")}), std::invalid_argument);
}

}  // namespace
}  // namespace paraplan
