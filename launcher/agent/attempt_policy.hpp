#pragma once
// What ends an attempt (the workers of one round) and what follows it: the one rule, pure, for
// every way an attempt ends. Each cause is a value carried from where it is known (a worker's
// exit, the job's failure record, the rendezvous, the store, a signal); nothing decides by
// reading a message. Every node decides from the same record and the same count, so they agree.
namespace ddp::launcher {

enum class EndCause {
  kNone,
  kSucceeded,     // every worker of this node exited 0
  kClaim,         // a node asked to join, or a member re-joins: a claim anyone could make
  kNodeLost,      // the store verified that a node is gone (its connection closed, lease lapsed)
  kStoreSilent,   // the store did not answer for the peer tolerance: this node may be cut off
  kStoreLost,     // the store's host closed, reset or refused the connection
  kWorkerFailed,  // a worker of this node failed: an exit, a signal, a hang, unkillable
  kJobFailed,     // the job's failure record: a worker failed on another node
  kFinal,         // nobody restarts from it: a lost static node, an agent told to stop, a
                  // worker that could not start
  kSignal,        // this agent was told to stop
};

// "worker_failed", "node_lost", ...: for events and logs.
const char* end_cause_name(EndCause cause);
// A failure (of a worker here or elsewhere, restartable or not), not a membership change,
// the store or a signal: the decision waits for the job's record.
bool is_failure(EndCause cause);
// The "stopping" event's reason: "failure", "membership", "signal", "store_silent", ...
const char* stop_reason(EndCause cause);

// The cause an attempt already ending for `current` ends for once `news` arrives: the graver
// one. A re-form under way becomes a failed attempt when a failure is heard; a failure stays
// one when the store is lost meanwhile; a signal stays a signal.
EndCause graver(EndCause current, EndCause news);

// What the decision needs to know besides the cause.
struct Situation {
  EndCause cause = EndCause::kNone;
  bool elastic = false;  // the rendezvous re-forms groups (RendezvousHandler::kind())
  bool in_place =
      false;  // --in_place_recovery, workers still run (after a failure here: a standby)
  int restarts_spent = 0;
  int max_restarts = 0;
  // The job as a whole can still restart (RendezvousHandler::restart_blocker() said nothing,
  // and the store is there to restart with).
  bool job_can_restart = true;
};

struct Decision {
  enum class Action {
    kRestart,        // spend a restart; the next round starts fresh workers
    kReformInPlace,  // keep the workers through the next round (spending a restart when
                     // restarts_spent grew: another node's failure)
    kRejoin,         // a new round without spending a restart (a membership change)
    kGiveUp,         // exit with the root cause's status
    kFinish,         // exit 0
  };
  Action action = Action::kGiveUp;
  int restarts_spent = 0;  // after this decision
  // Gave up with restarts left, because the job could not restart.
  bool restart_impossible = false;
};

const char* action_name(Decision::Action action);

// The decision for an attempt that ended for s.cause.
Decision decide(const Situation& s);

// A re-form after a claim that brought back the very same nodes: nothing changed, so it
// counts as a restart (a stranger repeating a claim must not stall the job for ever); kRestart
// while one is left, else kGiveUp.
Decision decide_same_nodes(int restarts_spent, int max_restarts);

}  // namespace ddp::launcher
