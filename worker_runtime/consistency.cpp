#include "worker_runtime/consistency.hpp"

#include <cstring>
#include <map>
#include <string>

namespace ddp::worker_runtime {

uint64_t parameter_checksum(const std::vector<std::span<const float>>& params) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  for (const auto& p : params) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(p.data());
    for (size_t i = 0; i < p.size_bytes(); ++i) {
      h = (h ^ bytes[i]) * 1099511628211ULL;
    }
  }
  return h;
}

ConsistencyChecker::ConsistencyChecker(ProcessGroup& group, int64_t every_n_steps)
    : group_(group), every_n_steps_(every_n_steps) {}

void ConsistencyChecker::maybe_check(int64_t step,
                                     const std::vector<std::span<const float>>& params) {
  if (every_n_steps_ > 0 && step % every_n_steps_ == 0) {
    check(step, params);
  }
}

void ConsistencyChecker::check(int64_t step, const std::vector<std::span<const float>>& params) {
  check_checksum(step, parameter_checksum(params));
}

void ConsistencyChecker::check_checksum(int64_t step, uint64_t local_checksum) {
  int64_t mine = 0;
  std::memcpy(&mine, &local_checksum, sizeof(mine));
  std::vector<int64_t> all(static_cast<size_t>(group_.size()));
  group_.all_gather(std::span<const int64_t>(&mine, 1), std::span<int64_t>(all));
  std::map<int64_t, std::vector<int>> ranks_by_sum;
  for (size_t r = 0; r < all.size(); ++r) {
    ranks_by_sum[all[r]].push_back(static_cast<int>(r));
  }
  if (ranks_by_sum.size() == 1) {
    return;
  }
  std::string groups;
  char hex[32];
  for (const auto& [sum, ranks] : ranks_by_sum) {
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(sum));
    groups += std::string(groups.empty() ? "" : "; ") + "checksum " + hex + " on ranks";
    for (int r : ranks) {
      groups += " " + std::to_string(r);
    }
  }
  throw ConsistencyError("parameters differ across ranks at step " + std::to_string(step) +
                         " (seen by rank " + std::to_string(group_.rank()) + "): " + groups +
                         ". Gradients were not synchronized the same way on every rank");
}

}  // namespace ddp::worker_runtime
