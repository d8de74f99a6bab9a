#include "launcher/agent/round_history.hpp"

#include "common/log.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {

Reform reform_after(EndCause cause) {
  switch (cause) {
    case EndCause::kClaim:
      return Reform::kClaim;
    case EndCause::kNodeLost:
    case EndCause::kStoreSilent:
      return Reform::kLoss;
    default:
      return Reform::kNone;
  }
}

bool RoundHistory::same_nodes_again(const rendezvous::RendezvousInfo& next) {
  const bool same = reform == Reform::kClaim && !next.members.empty() && next.members == members &&
                    next.round == members_round + 1;
  reform = Reform::kNone;
  members = next.members;
  members_round = next.round;
  return same;
}

bool RoundHistory::count_same_nodes(int max_restarts, EventLog& events) {
  const std::string why =
      "the group re-formed after a membership change with the same nodes as before (a "
      "member's workers failed, or the change was not real)";
  const Decision d = decide_same_nodes(restarts_spent, max_restarts);
  if (d.action == Decision::Action::kGiveUp) {
    DDP_LOG_ERROR(why + "; no restart is left (max_restarts " + std::to_string(max_restarts) +
                  "); giving up");
    events.record(event::kRendezvousFailed, {{"message", why}});
    return false;
  }
  restarts_spent = d.restarts_spent;
  DDP_LOG_WARN(why + "; counting it as restart " + std::to_string(restarts_spent) + " of " +
               std::to_string(max_restarts));
  events.record(event::kRestart, {{"restarts_spent", restarts_spent}, {"reason", "same_members"}});
  return true;
}

}  // namespace ddp::launcher
