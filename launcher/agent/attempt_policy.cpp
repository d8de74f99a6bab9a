#include "launcher/agent/attempt_policy.hpp"

namespace ddp::launcher {
namespace {

// How grave each cause is when two meet: the graver decides the attempt.
int gravity(EndCause cause) {
  switch (cause) {
    case EndCause::kNone:
      return 0;
    case EndCause::kSucceeded:
      return 1;
    case EndCause::kClaim:
      return 2;
    case EndCause::kNodeLost:
      return 3;
    case EndCause::kStoreSilent:
      return 4;
    case EndCause::kStoreLost:
      return 5;
    case EndCause::kWorkerFailed:
    case EndCause::kJobFailed:
      return 6;
    case EndCause::kFinal:
      return 7;
    case EndCause::kSignal:
      return 8;
  }
  return 0;
}

Decision spend_or_give_up(const Situation& s, Decision::Action spend) {
  if (s.restarts_spent >= s.max_restarts) return {Decision::Action::kGiveUp, s.restarts_spent};
  if (!s.job_can_restart) return {Decision::Action::kGiveUp, s.restarts_spent, true};
  return {spend, s.restarts_spent + 1};
}

}  // namespace

const char* end_cause_name(EndCause cause) {
  switch (cause) {
    case EndCause::kNone:
      return "none";
    case EndCause::kSucceeded:
      return "succeeded";
    case EndCause::kClaim:
      return "node_waiting";
    case EndCause::kNodeLost:
      return "node_lost";
    case EndCause::kStoreSilent:
      return "store_silent";
    case EndCause::kStoreLost:
      return "store_lost";
    case EndCause::kWorkerFailed:
      return "worker_failed";
    case EndCause::kJobFailed:
      return "job_failure";
    case EndCause::kFinal:
      return "final";
    case EndCause::kSignal:
      return "signal";
  }
  return "none";
}

const char* action_name(Decision::Action action) {
  switch (action) {
    case Decision::Action::kRestart:
      return "restart";
    case Decision::Action::kReformInPlace:
      return "reform_in_place";
    case Decision::Action::kRejoin:
      return "rejoin";
    case Decision::Action::kGiveUp:
      return "give_up";
    case Decision::Action::kFinish:
      break;
  }
  return "finish";
}

bool is_failure(EndCause cause) {
  return cause == EndCause::kWorkerFailed || cause == EndCause::kJobFailed ||
         cause == EndCause::kFinal;
}

const char* stop_reason(EndCause cause) {
  switch (cause) {
    case EndCause::kClaim:
    case EndCause::kNodeLost:
      return "membership";
    case EndCause::kStoreSilent:
      return "store_silent";
    case EndCause::kStoreLost:
      return "store_lost";
    case EndCause::kSignal:
      return "signal";
    case EndCause::kWorkerFailed:
    case EndCause::kJobFailed:
    case EndCause::kFinal:
      return "failure";
    case EndCause::kNone:
    case EndCause::kSucceeded:
      break;
  }
  return "other";
}

EndCause graver(EndCause current, EndCause news) {
  return gravity(news) > gravity(current) ? news : current;
}

Decision decide(const Situation& s) {
  using Action = Decision::Action;
  switch (s.cause) {
    case EndCause::kSucceeded:
      return {Action::kFinish, s.restarts_spent};
    case EndCause::kClaim:
    case EndCause::kNodeLost:
      return {s.in_place ? Action::kReformInPlace : Action::kRejoin, s.restarts_spent};
    case EndCause::kStoreSilent:
      // An elastic job takes the node back once it is heard again (in place where its
      // workers run); a static one cannot.
      if (!s.elastic) return {Action::kGiveUp, s.restarts_spent};
      return {s.in_place ? Action::kReformInPlace : Action::kRejoin, s.restarts_spent};
    case EndCause::kWorkerFailed:
    case EndCause::kJobFailed:
      // In place (workers still run here; after a failure here, a standby can take the failed
      // worker's place: the agent says so) only the failed worker is replaced; every node
      // spends the restart all the same.
      return spend_or_give_up(s, s.in_place ? Action::kReformInPlace : Action::kRestart);
    case EndCause::kNone:
    case EndCause::kStoreLost:
    case EndCause::kFinal:
    case EndCause::kSignal:
      break;
  }
  return {Action::kGiveUp, s.restarts_spent};
}

Decision decide_same_nodes(int restarts_spent, int max_restarts) {
  Situation s;
  s.cause = EndCause::kWorkerFailed;  // counted as a failed attempt would be
  s.restarts_spent = restarts_spent;
  s.max_restarts = max_restarts;
  return spend_or_give_up(s, Decision::Action::kRestart);
}

}  // namespace ddp::launcher
