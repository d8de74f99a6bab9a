#include "worker_runtime/distributed_sampler.hpp"

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
  const int64_t n = options.dataset_size;
  const int64_t w = options.world_size;
  if (options.drop_last && n % w != 0) {
    num_samples_ = n / w;  // PyTorch: ceil((N - W) / W), i.e. floor(N / W) here
    if (num_samples_ == 0) {
      throw ConfigError("sampler with drop_last: dataset size " + std::to_string(n) +
                        " is smaller than world size " + std::to_string(w) +
                        ", no rank would get a sample");
    }
  } else {
    num_samples_ = (n + w - 1) / w;
  }
}

void DistributedSampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  start_ = 0;
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
  // Pad by wrapping around the (shuffled) list; drop_last truncates instead.
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_ - start_));
  int64_t taken = 0;
  for (int64_t i = options_.rank; i < total; i += options_.world_size, ++taken) {
    if (taken >= start_) {
      out.push_back(all[static_cast<size_t>(i % n)]);
    }
  }
  return out;
}

}  // namespace ddp::worker_runtime
