#pragma once
// In-place recovery on the trainer side (docs/trainer.md): after a membership change the
// ranks of the new group agree on the state to continue from (worker_runtime/
// state_agreement.hpp) and, when some rank lacks it or holds another step, the source rank
// broadcasts it: parameters, optimizer buffers and scalar state, and the loop position.
// Every rank, survivor or fresh, runs the same collective sequence.
#include <cstdint>

#include "trainer/model.hpp"
#include "worker_runtime/process_group.hpp"
#include "worker_runtime/state_agreement.hpp"

namespace ddp::trainer {

// Where the training loop stands; sent with the model so every rank continues from one point.
struct TrainingPosition {
  int64_t epoch = 0;
  int64_t global_position = 0;  // samples all ranks consumed in epoch's permutation
  int64_t step = 0;
  int64_t samples_seen = 0;
  // The LR schedule's length: fixed at the job's first start (a fresh worker at another
  // world size would compute another one), so it travels with the state.
  int64_t schedule_steps = 1;

  bool operator==(const TrainingPosition&) const = default;
};

struct SyncOutcome {
  worker_runtime::StateAgreement agreement;
  int64_t state_bytes = 0;  // bytes broadcast (0: nothing was sent)
};

// Agreement over group on (live, position.step), then, when needed, the broadcast from the
// agreed source of model state and position (receivers' model and position are replaced).
// Host buffers on every backend (NCCL stages them through the device). CollectiveError
// when a collective fails (another membership change: recover again).
// live: this rank holds state of its own; set false while it receives another's (the caller
// marks it live again once the sync returned). round: the group's; lineage (when given): the
// round this rank's state was last agreed in (-1: never), set to the agreed one afterwards
// (state_agreement.hpp: a newer lineage wins over an older one at the same step).
SyncOutcome sync_training_state(worker_runtime::ProcessGroup& group, Model& model,
                                TrainingPosition& position, bool& live, int64_t round = 0,
                                int64_t* lineage = nullptr);

}  // namespace ddp::trainer
