#pragma once
// A small seeded generator whose output is fixed by this file alone, so a seed gives the same
// split, data and initial weights on every rank, compiler and standard library (the std::
// distributions are implementation-defined).
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace ddp::trainer {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // Next 64 random bits (splitmix64).
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n) (n > 0); the tiny modulo bias is irrelevant here.
  uint64_t below(uint64_t n) { return next() % n; }
  // Standard normal (Box-Muller; one value per call keeps the stream simple).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log() stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

// 0..n-1 in an order fixed by seed (Fisher-Yates).
inline std::vector<std::size_t> seeded_permutation(std::size_t n, uint64_t seed) {
  std::vector<std::size_t> perm(n);
  for (std::size_t i = 0; i < n; ++i) perm[i] = i;
  Rng rng(seed);
  for (std::size_t i = n; i > 1; --i) {
    const std::size_t j = rng.below(i);
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

}  // namespace ddp::trainer
