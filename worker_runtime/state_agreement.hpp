#pragma once
// After an in-place recovery every rank of the new group states whether it holds training
// state in memory (live: a survivor) and at which step; all agree on the step to resume from
// and on who sends it. The step is the lowest over live ranks: the last step every survivor
// completed (a rank that got one step further is rolled back by the broadcast).
// A live rank's state belongs to a lineage: the round in which its group last agreed. Ranks of
// different lineages hold different histories even at the same step (one paused while the
// others re-formed without it, restarted from a checkpoint and caught up): the newest lineage
// is the job's, only its ranks may be the source, and the others receive its state.
#include <cstdint>
#include <span>

#include "worker_runtime/process_group.hpp"

namespace ddp::worker_runtime {

struct StateAgreement {
  bool any_live = false;    // some rank holds state (false: everyone loads the checkpoint)
  int64_t step = 0;         // min step over live ranks (0 when none is live)
  int source = -1;          // lowest live rank at that step (-1 when none is live)
  bool needs_send = false;  // some rank is not live, or at another step or lineage
  int64_t lineage = 0;      // the round every rank's state belongs to afterwards (max round)

  bool operator==(const StateAgreement&) const = default;
};

// The decision from every rank's (live, step, lineage, round), indexed by rank. Pure.
StateAgreement decide_state(std::span<const int64_t> live_by_rank,
                            std::span<const int64_t> step_by_rank,
                            std::span<const int64_t> lineage_by_rank,
                            std::span<const int64_t> round_by_rank);
// The same with every rank in lineage 0 and round 0 (one history).
StateAgreement decide_state(std::span<const int64_t> live_by_rank,
                            std::span<const int64_t> step_by_rank);

// One all_gather of (live, step, lineage, round) over group, then decide_state (the same
// result on every rank). lineage: -1 for a rank that never agreed.
StateAgreement agree_on_state(ProcessGroup& group, bool live, int64_t step, int64_t lineage = 0,
                              int64_t round = 0);

}  // namespace ddp::worker_runtime
