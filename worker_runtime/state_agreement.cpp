#include "worker_runtime/state_agreement.hpp"

#include <algorithm>
#include <array>
#include <vector>

namespace ddp::worker_runtime {

StateAgreement decide_state(std::span<const int64_t> live_by_rank,
                            std::span<const int64_t> step_by_rank,
                            std::span<const int64_t> lineage_by_rank,
                            std::span<const int64_t> round_by_rank) {
  StateAgreement out;
  for (const int64_t round : round_by_rank) out.lineage = std::max(out.lineage, round);
  int64_t newest = 0;
  for (size_t r = 0; r < live_by_rank.size(); ++r) {
    if (live_by_rank[r] == 0) continue;
    newest = out.any_live ? std::max(newest, lineage_by_rank[r]) : lineage_by_rank[r];
    out.any_live = true;
  }
  if (!out.any_live) return out;
  bool found = false;
  for (size_t r = 0; r < live_by_rank.size(); ++r) {
    if (live_by_rank[r] == 0 || lineage_by_rank[r] != newest) continue;
    if (!found || step_by_rank[r] < out.step) {
      out.step = step_by_rank[r];
      out.source = static_cast<int>(r);  // ascending r: the lowest rank at the minimum wins
    }
    found = true;
  }
  for (size_t r = 0; r < live_by_rank.size(); ++r) {
    if (live_by_rank[r] == 0 || step_by_rank[r] != out.step || lineage_by_rank[r] != newest) {
      out.needs_send = true;
    }
  }
  return out;
}

StateAgreement decide_state(std::span<const int64_t> live_by_rank,
                            std::span<const int64_t> step_by_rank) {
  const std::vector<int64_t> zeros(live_by_rank.size(), 0);
  return decide_state(live_by_rank, step_by_rank, zeros, zeros);
}

StateAgreement agree_on_state(ProcessGroup& group, bool live, int64_t step, int64_t lineage,
                              int64_t round) {
  constexpr size_t kFields = 4;
  const std::array<int64_t, kFields> mine = {live ? 1 : 0, step, lineage, round};
  const auto ranks = static_cast<size_t>(group.size());
  std::vector<int64_t> all(kFields * ranks);
  group.all_gather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  std::array<std::vector<int64_t>, kFields> by_field;
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t f = 0; f < kFields; ++f) by_field[f].push_back(all[kFields * r + f]);
  }
  return decide_state(by_field[0], by_field[1], by_field[2], by_field[3]);
}

}  // namespace ddp::worker_runtime
