// src/sim/rng.h: the simulator's pseudo-random numbers.
//
// xoshiro256** seeded through SplitMix64, with bounded integers by Lemire's
// method. Unlike std::mt19937 + std::uniform_int_distribution (whose mapping is
// implementation-defined), a seed gives the same sequence with every compiler
// and standard library, so published figures can be reproduced anywhere.
// Thread-compatible.
#pragma once

#include <cstdint>

namespace prism::sim {

__extension__ typedef unsigned __int128 Uint128;  // GCC/Clang extension; -Wpedantic-safe.

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& word : s_) word = SplitMix64(&x);
  }

  // 64 random bits.
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Uniform(uint64_t n) {
    // Lemire, "Fast Random Integer Generation in an Interval" (2019).
    Uint128 m = static_cast<Uint128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<Uint128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t SplitMix64(uint64_t* x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  uint64_t s_[4];
};

}  // namespace prism::sim
