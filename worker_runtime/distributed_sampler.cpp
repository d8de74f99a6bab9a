#include "worker_runtime/distributed_sampler.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "common/error.hpp"

namespace ddp::worker_runtime {
namespace {

// Uniform in [0, bound) by rejection: mt19937_64 is fully specified by the standard, while
// std::uniform_int_distribution is not, and every rank must draw the same permutation.
uint64_t bounded(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % bound;
  uint64_t x = 0;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

}  // namespace

DistributedSampler::DistributedSampler(const SamplerOptions& options) : options_(options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw ConfigError("sampler rank " + std::to_string(options.rank) + " of world size " +
                      std::to_string(options.world_size) +
                      " is invalid (expected 0 <= rank < world size)");
  }
  if (options.dataset_size < 0) {
    throw ConfigError("sampler dataset size " + std::to_string(options.dataset_size) +
                      " is negative");
  }
  num_samples_ = samples_per_rank(options.dataset_size);
}

int64_t DistributedSampler::samples_per_rank(int64_t n) const {
  const int64_t w = options_.world_size;
  if (options_.drop_last && n % w != 0) {
    const int64_t floor = n / w;  // PyTorch: ceil((N - W) / W), i.e. floor(N / W) here
    if (floor == 0 && global_start_ == 0) {
      throw ConfigError("sampler with drop_last: dataset size " + std::to_string(n) +
                        " is smaller than world size " + std::to_string(w) +
                        ", no rank would get a sample");
    }
    return floor;
  }
  return (n + w - 1) / w;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  start_ = 0;
  global_start_ = 0;
  num_samples_ = samples_per_rank(options_.dataset_size);
}

void DistributedSampler::set_global_start(int64_t position) {
  if (position < 0 || position > options_.dataset_size) {
    throw ConfigError("sampler global start " + std::to_string(position) +
                      " is outside this epoch (expected 0.." +
                      std::to_string(options_.dataset_size) + ")");
  }
  global_start_ = position;
  start_ = 0;
  num_samples_ = samples_per_rank(options_.dataset_size - position);
}

int64_t DistributedSampler::global_position(int64_t taken) const {
  return std::min(options_.dataset_size, global_start_ + taken * options_.world_size);
}

void DistributedSampler::set_start(int64_t position) {
  if (position < 0 || position > num_samples_) {
    throw ConfigError("sampler start position " + std::to_string(position) +
                      " is outside this epoch (expected 0.." + std::to_string(num_samples_) +
                      " samples per rank)");
  }
  start_ = position;
}

std::vector<int64_t> DistributedSampler::indices() const {
  const int64_t n = options_.dataset_size;
  const int64_t total = total_size();
  if (n == 0) {
    return {};
  }
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), int64_t{0});
  if (options_.shuffle) {
    std::mt19937_64 rng(options_.seed + static_cast<uint64_t>(epoch_));
    for (size_t i = all.size() - 1; i > 0; --i) {
      std::swap(all[i], all[bounded(rng, i + 1)]);
    }
  }
  // Only the rest of the epoch after the global start is split; padding wraps around to the
  // permutation's beginning as PyTorch's does, so a resume at the same world size picks
  // exactly the indices the uninterrupted run would have; drop_last truncates instead.
  std::vector<int64_t> out;
  if (global_start_ == n) {
    return out;
  }
  out.reserve(static_cast<size_t>(num_samples_ - start_));
  int64_t taken = 0;
  for (int64_t i = options_.rank; i < total; i += options_.world_size, ++taken) {
    if (taken >= start_) {
      out.push_back(all[static_cast<size_t>((global_start_ + i) % n)]);
    }
  }
  return out;
}

}  // namespace ddp::worker_runtime
