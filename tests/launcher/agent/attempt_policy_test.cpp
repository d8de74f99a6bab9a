// decide() and graver(): the one rule for what follows the end of an attempt, as a table.
#include "launcher/agent/attempt_policy.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using ddp::launcher::decide;
using ddp::launcher::decide_same_nodes;
using ddp::launcher::Decision;
using ddp::launcher::EndCause;
using ddp::launcher::graver;
using ddp::launcher::Situation;
using Action = Decision::Action;

namespace {

struct Row {
  EndCause cause;
  bool elastic;
  bool in_place;
  int spent;
  int max;
  bool job_can_restart;
  Action action;
  int spent_after;
  bool impossible;
};

}  // namespace

TEST_CASE("attempt policy: what follows each end, as a table", "[agent][attempt]") {
  const std::vector<Row> rows = {
      // cause                   elastic in_place spent max can  -> action    spent impossible
      {EndCause::kSucceeded, false, false, 0, 3, true, Action::kFinish, 0, false},
      {EndCause::kSucceeded, true, true, 2, 3, true, Action::kFinish, 2, false},
      // Membership changes cost nothing, restarts left or not; in place where the workers run.
      {EndCause::kClaim, true, false, 3, 3, true, Action::kRejoin, 3, false},
      {EndCause::kClaim, true, true, 0, 0, true, Action::kReformInPlace, 0, false},
      {EndCause::kNodeLost, true, false, 0, 0, false, Action::kRejoin, 0, false},
      {EndCause::kNodeLost, true, true, 1, 3, true, Action::kReformInPlace, 1, false},
      // Silence: an elastic job takes the node back; a static one cannot replace it.
      {EndCause::kStoreSilent, true, false, 0, 3, true, Action::kRejoin, 0, false},
      {EndCause::kStoreSilent, true, true, 1, 3, true, Action::kReformInPlace, 1, false},
      {EndCause::kStoreSilent, false, false, 0, 3, true, Action::kGiveUp, 0, false},
      {EndCause::kStoreLost, true, false, 0, 3, true, Action::kGiveUp, 0, false},
      // This node's failure: a restart while one is left and the job can take it; in place
      // (a standby can take the failed worker's place) only the
      // failed worker is replaced, and the restart is spent all the same.
      {EndCause::kWorkerFailed, false, false, 0, 2, true, Action::kRestart, 1, false},
      {EndCause::kWorkerFailed, true, false, 1, 2, true, Action::kRestart, 2, false},
      {EndCause::kWorkerFailed, true, true, 1, 2, true, Action::kReformInPlace, 2, false},
      {EndCause::kWorkerFailed, true, true, 2, 2, true, Action::kGiveUp, 2, false},
      {EndCause::kWorkerFailed, false, false, 2, 2, true, Action::kGiveUp, 2, false},
      {EndCause::kWorkerFailed, false, false, 0, 0, true, Action::kGiveUp, 0, false},
      {EndCause::kWorkerFailed, false, false, 0, 2, false, Action::kGiveUp, 0, true},
      {EndCause::kWorkerFailed, false, false, 2, 2, false, Action::kGiveUp, 2, false},
      // Another node's failure: the same count, in place where this node's workers run.
      {EndCause::kJobFailed, false, false, 0, 1, true, Action::kRestart, 1, false},
      {EndCause::kJobFailed, true, true, 0, 1, true, Action::kReformInPlace, 1, false},
      {EndCause::kJobFailed, true, true, 1, 1, true, Action::kGiveUp, 1, false},
      {EndCause::kJobFailed, false, false, 0, 1, false, Action::kGiveUp, 0, true},
      // Nobody restarts from these, restarts left or not.
      {EndCause::kFinal, true, true, 0, 5, true, Action::kGiveUp, 0, false},
      {EndCause::kSignal, true, true, 0, 5, true, Action::kGiveUp, 0, false},
      {EndCause::kNone, false, false, 0, 5, true, Action::kGiveUp, 0, false},
  };
  for (const auto& row : rows) {
    Situation s;
    s.cause = row.cause;
    s.elastic = row.elastic;
    s.in_place = row.in_place;
    s.restarts_spent = row.spent;
    s.max_restarts = row.max;
    s.job_can_restart = row.job_can_restart;
    const Decision d = decide(s);
    INFO(ddp::launcher::end_cause_name(row.cause)
         << (row.elastic ? " elastic" : " static") << (row.in_place ? " in place" : "") << " "
         << row.spent << "/" << row.max << (row.job_can_restart ? "" : " blocked") << " -> "
         << ddp::launcher::action_name(d.action));
    CHECK(d.action == row.action);
    CHECK(d.restarts_spent == row.spent_after);
    CHECK(d.restart_impossible == row.impossible);
  }
}

TEST_CASE("attempt policy: the graver cause decides an attempt ending for two",
          "[agent][attempt]") {
  // A re-form under way becomes a failed attempt when a failure is heard.
  CHECK(graver(EndCause::kNodeLost, EndCause::kJobFailed) == EndCause::kJobFailed);
  CHECK(graver(EndCause::kClaim, EndCause::kNodeLost) == EndCause::kNodeLost);
  // Already joining again after silence: a later error of another watch changes nothing.
  CHECK(graver(EndCause::kStoreSilent, EndCause::kStoreSilent) == EndCause::kStoreSilent);
  CHECK(graver(EndCause::kClaim, EndCause::kStoreSilent) == EndCause::kStoreSilent);
  CHECK(graver(EndCause::kStoreSilent, EndCause::kStoreLost) == EndCause::kStoreLost);
  // A failure stays one when the store goes; a signal stays a signal.
  CHECK(graver(EndCause::kWorkerFailed, EndCause::kStoreLost) == EndCause::kWorkerFailed);
  CHECK(graver(EndCause::kWorkerFailed, EndCause::kJobFailed) == EndCause::kWorkerFailed);
  CHECK(graver(EndCause::kJobFailed, EndCause::kFinal) == EndCause::kFinal);
  CHECK(graver(EndCause::kSignal, EndCause::kFinal) == EndCause::kSignal);
  CHECK(graver(EndCause::kFinal, EndCause::kSignal) == EndCause::kSignal);
  CHECK(graver(EndCause::kNone, EndCause::kSucceeded) == EndCause::kSucceeded);
}

TEST_CASE("attempt policy: a re-form that brought back the same nodes spends a restart",
          "[agent][attempt]") {
  CHECK(decide_same_nodes(0, 2).action == Action::kRestart);
  CHECK(decide_same_nodes(0, 2).restarts_spent == 1);
  CHECK(decide_same_nodes(2, 2).action == Action::kGiveUp);
  CHECK(decide_same_nodes(2, 2).restarts_spent == 2);
  CHECK(decide_same_nodes(0, 0).action == Action::kGiveUp);
}
