// gradient_buckets.cc: cutting the gradient buffer into reduction buckets.
#include "runtime/parallel/gradient_buckets.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace paraplan {

size_t shard_unit_elements(int shards) {
  return shards > 1 ? kShardAlignmentElements * static_cast<size_t>(shards) : 1;
}

std::vector<GradientBucket> plan_gradient_buckets(size_t buffer_elements, size_t bucket_elements,
                                                  int shards) {
  const size_t z = static_cast<size_t>(std::max(shards, 1)), unit = shard_unit_elements(shards);
  if (buffer_elements % unit != 0)
    throw std::invalid_argument("gradient buckets: buffer of " + std::to_string(buffer_elements) +
                                " elements is not a multiple of " + std::to_string(unit) +
                                " (the ZeRO group size " + std::to_string(z) + " x " +
                                std::to_string(kShardAlignmentElements) + ")");
  const size_t step =
      bucket_elements == 0 ? buffer_elements : (bucket_elements + unit - 1) / unit * unit;
  // Boundaries from the end of the buffer down, each a multiple of the unit.
  std::vector<size_t> boundaries{buffer_elements};
  while (step > 0 && boundaries.back() > step) boundaries.push_back(boundaries.back() - step);
  boundaries.push_back(0);
  std::reverse(boundaries.begin(), boundaries.end());
  std::vector<GradientBucket> buckets;
  size_t shard_offset = 0;
  for (size_t i = 0; i + 1 < boundaries.size(); ++i) {
    if (boundaries[i] == boundaries[i + 1]) continue;  // an empty buffer
    GradientBucket bucket;
    bucket.begin = boundaries[i];
    bucket.end = boundaries[i + 1];
    bucket.chunk = (bucket.end - bucket.begin) / z;
    bucket.shard_offset = shard_offset;
    shard_offset += bucket.chunk;
    buckets.push_back(bucket);
  }
  return buckets;
}

}  // namespace paraplan
