#pragma once
// The elastic agent's state machine, on one Boost.Asio loop:
//   INIT -> RENDEZVOUS -> HEALTHY -> (STOPPING -> RENDEZVOUS again | EXITING -> DONE)
// Every way an attempt (the workers of one round) can end arrives as an EndCause from where it
// is known: a worker's exit, the job's failure record, the rendezvous, the store, a signal.
// end_attempt() takes them all; attempt_policy's decide() says what follows; apply() does it.
// Blocking calls (a rendezvous round, store connections and round trips, the exit barrier)
// run off the loop, so signals, exits and timers are always served. Processes come from a
// WorkerSpawner (real or fake), nodes meet through a RendezvousHandler: the whole machine is
// testable without children or sockets. docs/architecture.md draws it.
#include <boost/asio/io_context.hpp>
#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include "launcher/agent/agent_options.hpp"
#include "launcher/agent/agent_state.hpp"
#include "launcher/agent/attempt_failures.hpp"
#include "launcher/agent/attempt_policy.hpp"
#include "launcher/agent/departure.hpp"
#include "launcher/agent/hang_response.hpp"
#include "launcher/agent/in_place_recovery.hpp"
#include "launcher/agent/job_watch.hpp"
#include "launcher/agent/rendezvous_calls.hpp"
#include "launcher/agent/round_history.hpp"
#include "launcher/agent/signal_watch.hpp"
#include "launcher/agent/standby_pool.hpp"
#include "launcher/agent/worker_launcher.hpp"
#include "launcher/output/error_report.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/output/log_router.hpp"
#include "launcher/process/worker_group.hpp"
#include "launcher/process/worker_spawner.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

class Agent {
 public:
  using State = AgentState;

  Agent(boost::asio::io_context& io, AgentOptions options, WorkerSpawner& spawner,
        rendezvous::RendezvousHandler& rendezvous, LogRouter& logs, EventLog& events);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the job on io (this thread) until it ends; returns the agent's exit status:
  // 0, the root-cause worker's status (128+N for signal N), 128+N when stopped by signal N.
  int run();
  // Reacts to signal sig as if it had been delivered to the agent (called by the signal_set).
  void handle_signal(int sig);

  [[nodiscard]] State state() const { return state_; }
  [[nodiscard]] int restart_count() const { return round_.restarts_spent; }
  // Failures of the last failed attempt (for tests and the summary).
  [[nodiscard]] const std::vector<WorkerFailure>& failures() const { return failures_.all(); }

 private:
  // Why the current attempt ends, and what the decision still waits for.
  struct Ending {
    EndCause cause = EndCause::kNone;
    int stop_signal = 0;                 // what the workers were sent
    bool workers_gone = false;           // stopped: the decision waits for the record or the check
    std::optional<std::string> blocker;  // RendezvousHandler::restart_blocker(), once asked
    std::optional<int> exit_after_stop;  // set: exit with it once the workers are gone
  };

  // --- rounds ---
  void start_round();
  void on_round(const rendezvous::RendezvousInfo& info, JobConnections connections);
  void on_round_error(const RendezvousCalls::RoundError& error);
  // Workers started before this node is admitted (a spare, a node joining a running group), so
  // that its admission does not wait for their start-up: parked until the round admits it.
  // False when they start at admission instead (not in place, --spare_workers cold, ...).
  bool park_workers(const std::string& reason);
  // What every round's workers start with, fresh or kept: the failure record watch, the
  // store namespace, the attempt's log files; HEALTHY.
  void begin_round(const rendezvous::RendezvousInfo& info, JobConnections connections);
  void watch_hangs();

  // --- what happens while an attempt runs ---
  void on_worker_exit(size_t index, ExitStatus status);
  void on_worker_failed(size_t index, ExitStatus status);
  // Publishes the root failure and ends the attempt (unless hung ranks still dump).
  void act_on_failure();
  void on_membership_change(rendezvous::MembershipChange change);
  void on_job_failure(const rendezvous::FailureRecord& record);
  void on_store_lost(const std::string& message, PeerLoss loss);
  void on_unkillable(const std::vector<UnkillableWorker>& gone);

  // --- the end of an attempt: one entry, one decision, one application ---
  void end_attempt(EndCause cause, int stop_signal = SIGTERM);
  void on_stopped();
  void decide_now();
  void apply(const Decision& decision);
  // What decide() needs to know now.
  [[nodiscard]] Situation situation() const;
  // Exits with the root cause's status, after saying why.
  void give_up(const Decision& decision);
  void note_failure(const std::string& kind, int rank) {
    failures_.note(kind, rank, round_.attempt);
  }
  void stop_then_finish(int exit_status);
  void finish(int exit_status);
  // The current round as the workers' env contract sees it.
  [[nodiscard]] AttemptInfo attempt_info() const;

  boost::asio::io_context& io_;
  AgentOptions options_;
  rendezvous::RendezvousHandler& rendezvous_;
  RendezvousCalls calls_;  // its blocking calls, off the loop
  LogRouter& logs_;
  EventLog& events_;
  RoundHistory round_;
  WorkerGroup group_;         // the processes
  AttemptFailures failures_;  // this node's, this attempt
  JobWatch job_;              // the job's failure record and store, as the loop sees them
  InPlaceRecovery recovery_;
  StandbyPool standbys_;     // --standby_workers: parked processes that replace dead workers
  WorkerLauncher launcher_;  // the workers' starts, and their slots
  HangResponse hangs_;
  SignalWatch signals_;  // and the first signal the agent received
  Departure departure_;  // and the exit status
  Ending ending_;
  State state_ = State::kInit;
};

}  // namespace ddp::launcher
