#pragma once
// What the agent records in the events file, and logs, as its rounds and workers come and go:
// each fact in one function, so the state machine reads as decisions, and the events' fields
// and the lines' wording live in one place.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/agent/agent_state.hpp"
#include "launcher/agent/worker_slots.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/process/exit_status.hpp"
#include "launcher/process/worker_group.hpp"
#include "rendezvous/failure_record.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

// A round joined: attempt is what the workers see (TORCHELASTIC_RESTART_COUNT).
void report_round(EventLog& events, const rendezvous::RendezvousInfo& info, int attempt,
                  int restarts_spent);
void report_worker_start(EventLog& events, const WorkerSlot& slot, int pid, int attempt);
void report_worker_exit(EventLog& events, const WorkerSlot& slot, int pid, ExitStatus status,
                        int attempt);
// A standby worker (pid) took slot's place; hello: it listened already; waited_ms: since it
// started.
void report_standby_promoted(EventLog& events, const WorkerSlot& slot, int pid, bool hello,
                             int64_t waited_ms);
// The worker could not be started (what: the spawner's error).
void report_spawn_failed(EventLog& events, const WorkerSlot& slot, const std::string& what);
// The worker is still there after SIGKILL.
void report_unkillable(EventLog& events, const WorkerSlot& slot, const UnkillableWorker& worker);
// Processes the workers started outside their process groups, killed with them.
void report_escaped(EventLog& events, const std::vector<std::string>& escaped, int attempt);
// Another node's failure spends a restart while this node re-forms in place.
void report_in_place_restart(EventLog& events, const std::optional<rendezvous::FailureRecord>& root,
                             int restarts_spent, int max_restarts);
// A worker of this node failed (failures: this attempt's) and the group re-forms in place: only
// it is replaced (by a standby worker when standby), a restart spent on every node.
void report_own_failure_in_place(EventLog& events, const std::vector<WorkerFailure>& failures,
                                 int restarts_spent, int max_restarts, bool standby);
// This node stands by as a spare for job run_id, or was admitted (notice.kind).
void report_spare(EventLog& events, const std::string& run_id,
                  const rendezvous::SpareNotice& notice);
// The round could not be joined (error.not_needed: the job ended without this spare). Returns
// the exit status it means: 0 when not needed, else 1.
int report_round_error(EventLog& events, const std::string& message, bool not_needed);
// The workers (pids) are kept while the group re-forms in place after reason, for attempt.
void report_recovery_started(EventLog& events, const std::string& reason, int attempt,
                             const std::string& pids);

// What the agent says of signal name in state (again: a second one, outside EXITING), with
// the workers' pids; "" when it says nothing.
std::string signal_notice(AgentState state, bool again, const std::string& name,
                          const std::string& pids);
// The signal event, and signal_notice's line when there is one.
void report_signal(EventLog& events, AgentState state, bool again, int sig,
                   const std::string& pids);
// OMP_NUM_THREADS=1 is set for the workers (sets_default_omp_threads): said once.
void report_default_omp_threads();
// This node served the store and lost its majority (why: the rendezvous's reason).
void report_stepped_down(EventLog& events, const std::string& why);
// The store lost this node's own connection: to the other nodes this node is gone.
void report_own_connection_lost(std::chrono::milliseconds tolerance);
// Another node's record ends this node's attempt: its workers (pids) stop.
void report_failed_elsewhere(const rendezvous::FailureRecord& record, const std::string& pids);
// The job failed elsewhere after this node's workers finished: it exits with exit_status.
void report_failed_after_finish(const rendezvous::FailureRecord& record, int exit_status);

}  // namespace ddp::launcher
