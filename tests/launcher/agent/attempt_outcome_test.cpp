// decide_attempt: the one rule for what ends an attempt (restart, re-form or give up).
#include "launcher/agent/attempt_outcome.hpp"

#include <catch2/catch.hpp>

using ddp::launcher::AttemptEnd;
using ddp::launcher::AttemptOutcome;
using ddp::launcher::decide_attempt;
using Action = AttemptOutcome::Action;

TEST_CASE("attempt outcome: failures spend a restart while one is left, then give up",
          "[agent][attempt]") {
  for (auto end : {AttemptEnd::kWorkerFailure, AttemptEnd::kJobFailure, AttemptEnd::kSameMembers}) {
    auto first = decide_attempt(end, 0, 2);
    CHECK(first.action == Action::kRestart);
    CHECK(first.restarts_spent == 1);
    auto second = decide_attempt(end, 1, 2);
    CHECK(second.action == Action::kRestart);
    CHECK(second.restarts_spent == 2);
    auto third = decide_attempt(end, 2, 2);
    CHECK(third.action == Action::kGiveUp);
    CHECK(third.restarts_spent == 2);                            // nothing spent on giving up
    CHECK(decide_attempt(end, 0, 0).action == Action::kGiveUp);  // --max_restarts 0
  }
}

TEST_CASE("attempt outcome: a membership change re-forms for free, a gone static node ends it",
          "[agent][attempt]") {
  auto change = decide_attempt(AttemptEnd::kMembershipChange, 3, 3);
  CHECK(change.action == Action::kReform);
  CHECK(change.restarts_spent == 3);
  auto gone = decide_attempt(AttemptEnd::kNodeGone, 0, 5);
  CHECK(gone.action == Action::kGiveUp);
  CHECK(gone.restarts_spent == 0);
}

TEST_CASE("attempt outcome: a job that can no longer restart gives up without spending",
          "[agent][attempt]") {
  using ddp::launcher::JobRestart;
  for (auto end : {AttemptEnd::kWorkerFailure, AttemptEnd::kJobFailure, AttemptEnd::kSameMembers}) {
    auto blocked = decide_attempt(end, 0, 2, JobRestart::kImpossible);
    CHECK(blocked.action == Action::kGiveUp);
    CHECK(blocked.restarts_spent == 0);
    CHECK(blocked.restart_impossible);  // restarts were left: the job stood in the way
    auto out = decide_attempt(end, 2, 2, JobRestart::kImpossible);
    CHECK(out.action == Action::kGiveUp);
    CHECK_FALSE(out.restart_impossible);  // none left anyway
    CHECK(decide_attempt(end, 0, 2, JobRestart::kPossible).action == Action::kRestart);
  }
  // Neither a free re-form nor a gone node is a restart the job could refuse.
  auto change = decide_attempt(AttemptEnd::kMembershipChange, 0, 2, JobRestart::kImpossible);
  CHECK(change.action == Action::kReform);
  CHECK_FALSE(change.restart_impossible);
  CHECK_FALSE(
      decide_attempt(AttemptEnd::kNodeGone, 0, 2, JobRestart::kImpossible).restart_impossible);
}
