#pragma once
// What the end of an attempt leads to: the one rule, written once, for every place the agent
// ends an attempt (a worker that failed or hung, another node's failure record, a static
// node that is gone, a membership change, a re-form that brought back the same nodes). Pure:
// the agent logs, records and acts on what it returns; every node decides from the same
// record and count, so they agree.
namespace ddp::launcher {

enum class AttemptEnd {
  kWorkerFailure,     // a worker of this node failed or hung
  kJobFailure,        // the attempt's record names a worker that failed on another node
  kNodeGone,          // the record says a node of a static job is gone: none can replace it
  kMembershipChange,  // a node left or joined an elastic job
  kSameMembers,       // a re-form brought back the very same nodes: not a real change
};

// Whether the job as a whole can still restart its workers, whatever restarts are left: a
// static job one of whose nodes already finished cannot (its ranks will never come back).
enum class JobRestart { kPossible, kImpossible };

struct AttemptOutcome {
  enum class Action { kRestart, kReform, kGiveUp };
  Action action = Action::kGiveUp;
  int restarts_spent = 0;  // after this decision
  // Giving up with restarts left, because the job cannot restart (JobRestart::kImpossible).
  bool restart_impossible = false;
};

// A membership change re-forms and spends nothing; a gone static node ends the job; any other
// end spends a restart while one is left (restarts_spent < max_restarts) and the job can
// restart, else gives up (restart_impossible when only the job stood in the way).
AttemptOutcome decide_attempt(AttemptEnd end, int restarts_spent, int max_restarts,
                              JobRestart job = JobRestart::kPossible);

}  // namespace ddp::launcher
