// splitmix64.h: splitmix64's finaliser, a good 64-bit mix of a counter. What
// paraplan's stateless pseudo-random functions of an index are built from
// (initial weights, synthetic tokens, the data shuffle), so each value is a
// pure function of (seed, index) and never of how many came before.
#pragma once

#include <cstdint>

namespace paraplan {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace paraplan
