#pragma once
// "Did my gradients really sync?": every N steps ranks compare a checksum of their parameters
// (bit-exact FNV-1a over the float bytes) and fail loudly, naming the step and the ranks that
// differ, instead of silently training N different models.
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.hpp"
#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

// Parameters differ across ranks: what() names the step, the checksums and the ranks.
class ConsistencyError : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
};

// Bit-exact checksum of host buffers, in order.
uint64_t parameter_checksum(const std::vector<std::span<const float>>& params);

class ConsistencyChecker {
 public:
  // every_n_steps <= 0 disables the periodic check (check() still works).
  ConsistencyChecker(ProcessGroup& group, int64_t every_n_steps);

  // Runs check() when step is a multiple of every_n_steps (collective: all ranks call it).
  void maybe_check(int64_t step, const std::vector<std::span<const float>>& params);
  // Gathers every rank's checksum; throws ConsistencyError on any difference.
  void check(int64_t step, const std::vector<std::span<const float>>& params);
  // Same, with a checksum the caller computed (e.g. of a GPU model copied to the host).
  void check_checksum(int64_t step, uint64_t local_checksum);

 private:
  ProcessGroup& group_;
  int64_t every_n_steps_;
};

}  // namespace ddp::worker_runtime
