#pragma once
// The round this node's workers run in, and what carries over from round to round: the attempt
// number the workers see, the restarts spent, the last round's members, and why the node
// re-joins when no worker failed. A claim that brings back the very same nodes changed nothing
// (a stranger can make claims), so it counts as a restart; a verified loss never does.
#include <cstdint>
#include <filesystem>
#include <string>

#include "launcher/agent/attempt_policy.hpp"
#include "launcher/output/event_log.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

// Why this node re-joins when no worker failed.
enum class Reform { kNone, kClaim, kLoss };

// The Reform of leaving a round for cause (a claim, a loss, or neither).
Reform reform_after(EndCause cause);

struct RoundHistory {
  rendezvous::RendezvousInfo info;
  int attempt = 0;          // TORCHELASTIC_RESTART_COUNT of the workers: the round number
  int restarts_spent = 0;   // by this node; every node counts the same
  uint64_t generation = 0;  // bumps per group: late callbacks of old workers are ignored
  std::string members;      // RendezvousInfo::members of the last round, and its number
  uint64_t members_round = 0;
  Reform reform = Reform::kNone;

  // Where this attempt's files go under run_dir: attempt_<n>.
  [[nodiscard]] std::filesystem::path attempt_dir(const std::filesystem::path& run_dir) const {
    return run_dir / ("attempt_" + std::to_string(attempt));
  }
  // Takes next's membership: true when a claim re-formed the group with the same nodes as the
  // round just before it.
  bool same_nodes_again(const rendezvous::RendezvousInfo& next);
  // Counts the same nodes again as a restart (logged, recorded); false, logged and recorded
  // as a failed rendezvous, when no restart is left.
  bool count_same_nodes(int max_restarts, EventLog& events);
};

}  // namespace ddp::launcher
