#pragma once
// What the agent says when an attempt ends: its lines, built from typed facts (the decision,
// the record, this node's failures), so that the state machine reads as decisions and the
// wording lives in one place.
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "launcher/agent/worker_slots.hpp"
#include "launcher/output/error_report.hpp"
#include "rendezvous/failure_record.hpp"

namespace ddp::launcher {

// The summary's view of a job-wide failure record.
JobRootCause root_cause_of(const rendezvous::FailureRecord& record);

// The job-wide record of this node's worker failure (kind "worker", or "hang" with what hang
// detection said when the error file says nothing).
rendezvous::FailureRecord record_of(const WorkerFailure& failure);

// The record of slot's worker that could not be started (what: why): exit code 127, as a shell
// reports a command it could not run, and final: this node ends there, the others must not
// wait for it.
rendezvous::FailureRecord spawn_failure_record(const WorkerSlot& slot, const std::string& what);

// The record of slot's worker (pid) still there after SIGKILL (kind "unkillable").
rendezvous::FailureRecord unkillable_record(const WorkerSlot& slot, int pid);

// The record of this agent stopped by signal sig (kind "agent_signal", with its name and pid),
// which stops the other nodes' workers, who would wait for this node's in their collectives.
rendezvous::FailureRecord signal_record(int sig, int pid, const std::string& name);

// The "failure" event's kind for another node's record: "signal" or "exit" for a worker's,
// else the record's own kind.
std::string failure_kind(const rendezvous::FailureRecord& record);

// "rank 1: exit code 7" (with "hung, " for a hang): a local failure in one phrase.
std::string describe_local(const WorkerFailure& failure);

// "the rendezvous store, silent for longer than the peer tolerance (15 s)" and the like: what
// the loss of the store's connection says of its host.
std::string store_loss_text(PeerLoss loss, std::chrono::milliseconds tolerance);

// What a store lost for good means for the job: silence in a static job (it cannot replace a
// node), or a death (the store lived in its host's agent) in a static job or in an elastic one
// whose store could not move.
std::string store_loss_advice(bool silent, bool elastic);

// "... and cannot restart (2 restarts left, none spent): <blocker>".
std::string cannot_restart_line(const std::string& what, int restarts_left,
                                const std::string& blocker);

// The line that announces a restart, and its event's fields: from the job's record when one
// holds (every node says the same), else from this node's root failure, else (hung ranks that
// ended on their own) a hang.
struct RestartNotice {
  std::string line;
  nlohmann::json event;
};
RestartNotice restart_notice(const std::optional<rendezvous::FailureRecord>& root,
                             const std::vector<WorkerFailure>& failures, int restarts_spent,
                             int max_restarts);

// What a node that gives up after a failure says, and its exit status.
struct GiveUpReport {
  std::vector<std::string> errors;  // lines for the log, in order
  std::string summary;              // the failure summary block ("" when none)
  int exit_status = 1;
};
struct GiveUpFacts {
  std::optional<rendezvous::FailureRecord> root;  // the job's record, when one holds
  std::vector<WorkerFailure> failures;            // this node's
  bool restart_impossible = false;  // restarts were left, and the job could not take one
  int restarts_left = 0;
  std::string blocker;  // why it could not
  std::string program;  // for the summary
  std::string host;
};
GiveUpReport give_up_report(const GiveUpFacts& facts);

}  // namespace ddp::launcher
