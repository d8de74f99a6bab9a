#pragma once
// After an in-place recovery every rank of the new group states whether it holds training
// state in memory (live: a survivor) and at which step; all agree on the step to resume from
// and on who sends it. The step is the lowest over live ranks: the last step every survivor
// completed (a rank that got one step further is rolled back by the broadcast).
#include <cstdint>
#include <span>

#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

struct StateAgreement {
  bool any_live = false;    // some rank holds state (false: everyone loads the checkpoint)
  int64_t step = 0;         // min step over live ranks (0 when none is live)
  int source = -1;          // lowest live rank at that step (-1 when none is live)
  bool needs_send = false;  // some rank is not live, or a live rank is at another step

  bool operator==(const StateAgreement&) const = default;
};

// The decision from every rank's (live, step), indexed by rank. Pure.
StateAgreement decide_state(std::span<const int64_t> live_by_rank,
                            std::span<const int64_t> step_by_rank);

// One all_gather of (live, step) over group, then decide_state (same result on every rank).
StateAgreement agree_on_state(ProcessGroup& group, bool live, int64_t step);

}  // namespace ddp::worker_runtime
