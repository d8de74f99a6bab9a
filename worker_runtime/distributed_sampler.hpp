#pragma once
// torch.utils.data.DistributedSampler's semantics for native workers: num_samples =
// ceil(N / world) (floor with drop_last), padding by wrapping the (shuffled) list, rank-strided
// split, shuffle seeded by seed + epoch so every rank agrees without communicating.
// Plus a start offset, so a resumed epoch continues where it stopped instead of repeating,
// and a global start: after a world-size change mid-epoch (in-place recovery) the rest of the
// epoch's permutation, perm[p..N), is split over the new world with the same rules (padding,
// rank stride), so no sample is skipped or repeated.
// The shuffle is our own permutation (std::mt19937_64), not torch.randperm's: for shuffle=true
// the partition/coverage properties match PyTorch, the exact order does not.
#include <cstdint>
#include <vector>

namespace ddp::worker_runtime {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // ConfigError when rank is outside [0, world_size), dataset_size < 0, or drop_last leaves
  // no sample per rank.
  explicit DistributedSampler(const SamplerOptions& options);

  // Selects the epoch's permutation (seed + epoch) and resets the start offset to 0.
  void set_epoch(int64_t epoch);
  // Skips the first `position` of this rank's indices in the current epoch (resume).
  // ConfigError when position > num_samples().
  void set_start(int64_t position);
  // Splits only perm[position..N) of the current epoch over the ranks (num_samples() follows
  // the remaining count; padding wraps to perm[0..)); resets the start offset. position counts
  // samples taken by all ranks so far in this epoch (see global_position). ConfigError when outside
  // [0, N].
  void set_global_start(int64_t position);
  // The epoch position once every rank took `taken` indices from the current split:
  // global start + taken * world size, at most N (padding adds nothing new).
  [[nodiscard]] int64_t global_position(int64_t taken) const;

  // This rank's dataset indices for the current epoch, from the start offset on.
  [[nodiscard]] std::vector<int64_t> indices() const;
  // Indices per rank per epoch (ceil or floor of N / world).
  [[nodiscard]] int64_t num_samples() const { return num_samples_; }
  // num_samples() * world_size.
  [[nodiscard]] int64_t total_size() const { return num_samples_ * options_.world_size; }
  [[nodiscard]] int64_t epoch() const { return epoch_; }
  [[nodiscard]] int64_t start() const { return start_; }
  [[nodiscard]] int64_t global_start() const { return global_start_; }

 private:
  // ceil(n / world), or floor with drop_last: the per-rank share of n remaining samples.
  [[nodiscard]] int64_t samples_per_rank(int64_t n) const;

  SamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
  int64_t start_ = 0;
  int64_t global_start_ = 0;
};

}  // namespace ddp::worker_runtime
