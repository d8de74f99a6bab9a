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
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/agent/attempt_policy.hpp"
#include "launcher/agent/attempt_report.hpp"
#include "launcher/agent/hang_response.hpp"
#include "launcher/agent/in_place_recovery.hpp"
#include "launcher/agent/job_watch.hpp"
#include "launcher/agent/worker_slots.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/output/console.hpp"
#include "launcher/output/error_report.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/output/log_router.hpp"
#include "launcher/process/worker_command.hpp"
#include "launcher/process/worker_group.hpp"
#include "launcher/process/worker_spawner.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

struct AgentOptions {
  LaunchConfig config;
  Environment env;              // the agent's environment (workers inherit it)
  bool use_agent_store = true;  // TORCHELASTIC_USE_AGENT_STORE
  // Root of this run's files: attempt_<n>/<local_rank>/{error.json,stdout.log,stderr.log}.
  std::filesystem::path run_dir;
  bool write_log_files = true;  // -r/-t selected streams go to files under run_dir
  bool handle_signals = true;   // install the signal_set (tests drive handle_signal())
  std::string host = "localhost";
  // The failure summary goes here without a console. The agent's own lines go through
  // common/log.hpp, whose sink ddplaunch points at its console too.
  int notice_fd = 2;
  // When set, the summary goes through it instead: never blocking the loop.
  Console* notice_console = nullptr;
  // With a job secret: confines PyTorch store clients to the namespace of the attempt about
  // to start ("/worker/attempt_3/"), called before its workers spawn. Null: nothing to do.
  std::function<void(const std::string&)> set_worker_namespace;
  // How hang detection reads /proc (tests pass a fake; null: the real one).
  HangWatch::ProcReader read_proc;
  // Per local rank: the CPUs and memory its worker is bound to (empty: no binding).
  std::vector<CpuBinding> bindings;
};

class Agent {
 public:
  enum class State { kInit, kRendezvous, kHealthy, kStopping, kExiting, kDone };

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
  [[nodiscard]] const std::vector<WorkerFailure>& failures() const { return ending_.failures; }

 private:
  // Why this node re-joins when no worker failed: after a claim a re-form that brought back
  // the same nodes counts as a restart (a stranger can make claims); after a verified loss
  // (another node's, or this node's own silence) it never does.
  enum class Reform { kNone, kClaim, kLoss };

  // The round the workers run in, and what carries over from round to round.
  struct Round {
    rendezvous::RendezvousInfo info;
    int attempt = 0;          // TORCHELASTIC_RESTART_COUNT of the workers: the round number
    int restarts_spent = 0;   // by this node; every node counts the same
    uint64_t generation = 0;  // bumps per group: late callbacks of old workers are ignored
    std::string members;      // RendezvousInfo::members of the last round, and its number
    uint64_t members_round = 0;
    Reform reform = Reform::kNone;
  };

  // Why the current attempt ends, and what the decision still waits for.
  struct Ending {
    EndCause cause = EndCause::kNone;
    int stop_signal = 0;                  // what the workers were sent
    bool workers_gone = false;            // stopped: the decision waits for the record or the check
    bool awaiting_record = false;         // this node published and waits for the record that holds
    std::optional<std::string> blocker;   // RendezvousHandler::restart_blocker(), once asked
    std::optional<int> exit_after_stop;   // set: exit with it once the workers are gone
    bool loss_window = false;             // a worker failure waits for a loss claim (elastic)
    size_t window_first = 0;              // failures index of the failure that opened it
    bool noted = false;                   // the attempt's "failure" event was recorded
    std::vector<WorkerFailure> failures;  // this node's, this attempt
  };

  // --- rounds ---
  void start_round();
  void on_round(const rendezvous::RendezvousInfo& info, JobConnections connections);
  void on_round_error(const std::string& message);
  // What every round's workers start with, fresh or kept: the failure record watch, the
  // store namespace, the attempt's log files; HEALTHY.
  void begin_round(const rendezvous::RendezvousInfo& info, JobConnections connections);
  void start_workers();
  // Starts slot index's worker for the current round; false (the attempt then ends) when it
  // cannot.
  bool start_worker(size_t index);
  void watch_hangs();

  // --- what happens while an attempt runs ---
  void on_worker_exit(size_t index, ExitStatus status);
  void on_worker_failed(size_t index, ExitStatus status);
  // Publishes the window's first failure and ends the attempt (unless hung ranks still dump).
  void act_on_failure();
  void on_membership_change(rendezvous::MembershipChange change);
  void on_job_failure(const rendezvous::FailureRecord& record);
  void on_store_leaving();
  // A failure record that arrives while this node, its workers done, waits in the exit barrier.
  void job_failed_after_finish(const rendezvous::FailureRecord& record);
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
  void publish_failure(rendezvous::FailureRecord record);
  void note_failure(const std::string& kind, int rank);
  void stop_then_finish(int exit_status);
  void finish(int exit_status);
  void done();
  // Writes text (whole lines: the failure summary) to the notice console, else to notice_fd.
  void emit(const std::string& text) const;
  void install_signals();
  void wait_for_signal();

  boost::asio::io_context& io_;
  AgentOptions options_;
  rendezvous::RendezvousHandler& rendezvous_;
  LogRouter& logs_;
  EventLog& events_;
  WorkerGroup group_;              // the processes
  std::vector<WorkerSlot> slots_;  // per local rank: what the agent knows beyond the process
  JobWatch job_;                   // the job's failure record and store, as the loop sees them
  InPlaceRecovery recovery_;
  HangResponse hangs_;
  Round round_;
  Ending ending_;
  State state_ = State::kInit;
  std::optional<int> agent_signal_;  // the first signal the agent received
  int exit_status_ = 0;
  // The attempt's timers: the record awaited after publishing, the loss-claim window of an
  // elastic job's worker failure.
  boost::asio::steady_timer record_timer_, loss_window_timer_;
  // Blocking calls off the loop: the rendezvous, the restart check, leaving at the end.
  std::thread rendezvous_thread_, check_thread_, exit_thread_;
  std::optional<boost::asio::signal_set> signals_;
  // Keeps run() going while the only pending work is on one of those threads.
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> busy_;
};

// "INIT", "RENDEZVOUS", "HEALTHY", "STOPPING", "EXITING", "DONE" (the health endpoint's words).
const char* state_name(Agent::State state);

}  // namespace ddp::launcher
