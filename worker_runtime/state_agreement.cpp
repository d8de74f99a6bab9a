#include "worker_runtime/state_agreement.hpp"

#include <array>
#include <vector>

namespace ddp::worker_runtime {

StateAgreement decide_state(std::span<const int64_t> live_by_rank,
                            std::span<const int64_t> step_by_rank) {
  StateAgreement out;
  for (size_t r = 0; r < live_by_rank.size(); ++r) {
    if (live_by_rank[r] == 0) continue;
    if (!out.any_live || step_by_rank[r] < out.step) {
      out.step = step_by_rank[r];
      out.source = static_cast<int>(r);  // ascending r: the lowest rank at the minimum wins
    }
    out.any_live = true;
  }
  if (!out.any_live) return out;
  for (size_t r = 0; r < live_by_rank.size(); ++r) {
    if (live_by_rank[r] == 0 || step_by_rank[r] != out.step) out.needs_send = true;
  }
  return out;
}

StateAgreement agree_on_state(ProcessGroup& group, bool live, int64_t step) {
  const std::array<int64_t, 2> mine = {live ? 1 : 0, step};
  std::vector<int64_t> all(2 * static_cast<size_t>(group.size()));
  group.all_gather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  std::vector<int64_t> lives;
  std::vector<int64_t> steps;
  for (size_t r = 0; r < static_cast<size_t>(group.size()); ++r) {
    lives.push_back(all[2 * r]);
    steps.push_back(all[2 * r + 1]);
  }
  return decide_state(lives, steps);
}

}  // namespace ddp::worker_runtime
