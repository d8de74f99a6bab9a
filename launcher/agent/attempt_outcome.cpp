#include "launcher/agent/attempt_outcome.hpp"

namespace ddp::launcher {

AttemptOutcome decide_attempt(AttemptEnd end, int restarts_spent, int max_restarts,
                              JobRestart job) {
  using Action = AttemptOutcome::Action;
  switch (end) {
    case AttemptEnd::kMembershipChange:
      return {Action::kReform, restarts_spent};
    case AttemptEnd::kNodeGone:
      return {Action::kGiveUp, restarts_spent};
    case AttemptEnd::kWorkerFailure:
    case AttemptEnd::kJobFailure:
    case AttemptEnd::kSameMembers:
      break;
  }
  if (restarts_spent >= max_restarts) return {Action::kGiveUp, restarts_spent};
  if (job == JobRestart::kImpossible) return {Action::kGiveUp, restarts_spent, true};
  return {Action::kRestart, restarts_spent + 1};
}

}  // namespace ddp::launcher
