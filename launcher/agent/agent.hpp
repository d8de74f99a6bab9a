#pragma once
// The elastic agent's state machine, on one Boost.Asio loop:
//   INIT -> RENDEZVOUS -> HEALTHY -> (STOPPING -> RENDEZVOUS again | EXITING -> DONE)
// EXITING leaves the rendezvous on a thread of its own (the store host waits there for the
// other nodes), so signals are still served: a signal there ends the wait.
// Child exits, output, signals, membership changes and grace-period timers are all events
// on the loop; nothing polls. Processes come from a WorkerSpawner (real or fake), nodes meet
// through a RendezvousHandler, so the whole machine is testable without children or sockets.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/agent/job_failure_link.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/hang/hang_watch.hpp"
#include "launcher/output/console.hpp"
#include "launcher/output/error_report.hpp"
#include "launcher/output/event_log.hpp"
#include "launcher/output/log_router.hpp"
#include "launcher/process/recovery_link.hpp"
#include "launcher/process/worker_command.hpp"
#include "launcher/process/worker_group.hpp"
#include "launcher/process/worker_spawner.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddp::launcher {

// The summary's view of a job-wide failure record (agent_job.cpp).
JobRootCause root_cause_of(const rendezvous::FailureRecord& record);

struct AgentOptions {
  LaunchConfig config;
  Environment env;              // the agent's environment (workers inherit it)
  bool use_agent_store = true;  // TORCHELASTIC_USE_AGENT_STORE
  // Root of this run's files: attempt_<n>/<local_rank>/{error.json,stdout.log,stderr.log}.
  std::filesystem::path run_dir;
  bool write_log_files = true;  // -r/-t selected streams go to files under run_dir
  bool handle_signals = true;   // install the signal_set (tests drive handle_signal())
  std::string host = "localhost";
  // The failure summary goes here without a console. The agent's own lines ("ddplaunch:
  // received SIGTERM; ...") go through common/log.hpp, whose sink ddplaunch points at its
  // console too.
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
  [[nodiscard]] int restart_count() const { return restart_count_; }
  // Failures of the last failed attempt (for tests and the summary).
  [[nodiscard]] const std::vector<WorkerFailure>& failures() const { return failures_; }

 private:
  // What the agent knows of a local rank's worker beyond its process (pid, running: group_,
  // whose slot index is the local rank).
  struct WorkerSlot {
    int local_rank = 0;
    int rank = 0;
    std::string error_file;
    std::string hang;      // what hang detection said of this rank (for the summary)
    bool culprit = false;  // named as the culprit of the hang
    bool dumping = false;  // sent SIGABRT for its stack; the group waits for it to exit
    // --- in-place recovery (agent_recovery.cpp) ---
    std::unique_ptr<RecoveryLink> link;  // null without --in_place_recovery
    bool hello = false;                  // the worker's runtime listens on its link
    bool respawn_on_exit = false;        // killed for the new round: start a fresh one
    bool finished = false;               // exited 0 while the group re-formed: done
    int64_t aborted_round = -1;          // the last round it aborted collectives of
    int64_t built_round = -1;            // the last round it built its group in ("built")
    int64_t replaced_round = -1;         // the round a fresh worker last replaced it in
    int64_t answered_round = -1;         // the last round it re-formed in ("joined")
    int64_t stepped_round = -1;          // ... and made its first step in ("stepped")
  };

  // The in-place recovery under way (or the last one): its phase times for the events file.
  struct Recovery {
    std::string reason;  // node_lost, node_waiting, job_failure
    int64_t from_round = 0;
    int64_t round = -1;  // the round re-formed into (-1: not yet)
    std::chrono::steady_clock::time_point noticed;
    std::optional<std::chrono::steady_clock::time_point> aborted, reformed, state_sent, first_step;
    int kept = 0;       // workers that re-formed in place
    int restarted = 0;  // workers started afresh for the round
    int64_t step = -1;  // the step the group resumed from
    int source = -1;    // the rank whose state was sent (-1: none)
    int64_t state_bytes = 0;
    bool reported = false;
  };

  // Why the workers are being stopped: decides what a job-wide failure arriving meanwhile
  // changes (a re-form becomes a failed attempt; a signal stays a signal).
  // kStoreSilent: the store was silent for the tolerance, and this node joins the job again.
  enum class StopReason { kFailure, kSignal, kMembership, kStoreSilent, kStoreLost, kOther };

  void start_rendezvous();
  void on_rendezvous(const rendezvous::RendezvousInfo& info);
  void on_rendezvous_error(const std::string& message);
  void on_membership_change(rendezvous::MembershipChange change);
  void spawn_workers(const rendezvous::RendezvousInfo& info);
  // Starts the worker of workers_[index] for the current round (info_, attempt_); false
  // (after publishing the failure and stopping the group) when it cannot be started.
  bool spawn_slot(size_t index);
  // What every round's workers start with, fresh or kept: the failure record watch, cleared
  // failures, the store namespace, the attempt's log files; HEALTHY.
  void begin_round(const rendezvous::RendezvousInfo& info);
  // With a job secret: confines the workers' store clients to /worker/attempt_<attempt_>/.
  void declare_worker_namespace();
  // Hang detection for the current workers of round info_ (no-op without it).
  void watch_hangs();
  // --- in-place recovery (agent_recovery.cpp) ---
  // True when the change can keep the workers: --in_place_recovery, HEALTHY, workers running.
  [[nodiscard]] bool can_recover_in_place() const;
  // Tells the workers to abort their collectives, keeps them, and re-joins the rendezvous.
  void recover_in_place(const std::string& reason);
  // The new round: tells kept workers their new rank, starts fresh ones where needed.
  void resume_workers(const rendezvous::RendezvousInfo& info);
  void on_worker_message(size_t index, const recovery::Message& message);
  // Kept workers that did not re-form within --recovery_timeout are restarted.
  void on_recovery_timeout();
  // A worker that ended while an in-place re-form needs it: true when it is (or will be)
  // replaced by a fresh one in the new round rather than counted as a failure.
  bool replace_in_new_round(size_t index, ExitStatus status);
  void report_recovery();
  // True when every worker still to take part (not finished) has reached round in field.
  [[nodiscard]] bool all_reached(int64_t WorkerSlot::*field, int64_t round) const;
  // Workers of the current round kept in place, and those started afresh (or about to be)
  // for it; finished ones count as neither.
  [[nodiscard]] std::pair<int, int> kept_and_replaced() const;
  // One line per completed in-place recovery with its phase times (for the end of the run).
  [[nodiscard]] std::string recovery_summary() const;
  // "round 0 -> 1 (node_lost): aborted 2 ms, ... after it was noticed; 1 kept, ..."
  [[nodiscard]] static std::string describe_recovery(const Recovery& recovery);
  [[nodiscard]] recovery::RoundNotice round_notice(const WorkerSlot& slot) const;
  // Stops the workers still running (a signal during an in-place re-form), then finish().
  void stop_then_finish(int exit_status);
  // A worker of the current group ended (group_ marked it not running already).
  void on_worker_exit(size_t index, ExitStatus status);
  void record_failure(const WorkerSlot& slot, ExitStatus status, bool must_report);
  // Records the "failure" event (kind: exit, signal, hang, node_lost...) once per attempt:
  // what stopped the group, for the events file and the health endpoint's counters.
  void note_failure(const std::string& kind, int rank);
  void begin_stop(int sig, StopReason reason, std::function<void()> then);
  void complete_stop();
  // Workers still there a while after SIGKILL (group_ gave up on them): reported as failures.
  void on_unkillable(const std::vector<UnkillableWorker>& gone);
  void after_failure();
  // after_failure() once the attempt's job-wide record is known (or after a short wait).
  void decide_after_failure();
  // Asks the rendezvous (off the loop) whether the job can still restart, then decides again.
  void ask_restart_blocker();
  // Logs why a failed attempt (what) gives up with restarts left: the job cannot restart.
  void log_cannot_restart(const std::string& what) const;
  // Multi-node: watch this attempt's failure record (failure_watch.hpp).
  void start_job_watch(const rendezvous::RendezvousInfo& info);
  // Publishes this node's failure for every node (first record of the attempt wins), and
  // records that it did.
  void publish_failure(rendezvous::FailureRecord record);
  [[nodiscard]] rendezvous::FailureRecord worker_record(const WorkerSlot& slot,
                                                        ExitStatus status) const;
  void on_job_failure(uint64_t generation, const rendezvous::FailureRecord& record);
  // A failure record that arrives while this node, its workers done, waits in the exit barrier.
  void job_failed_after_finish(const rendezvous::FailureRecord& record);
  // The store failed under a watch: message says how, loss what it means (silence or death).
  void on_store_lost(const std::string& message, PeerLoss loss);
  // Leaves the rendezvous (on exit_thread_) and then ends run() with exit_status.
  void finish(int exit_status);
  void done();
  // The worker pids still running, "123, 456", for messages.
  [[nodiscard]] std::string running_pids() const;
  // The re-formed group has the same nodes as before the change that re-formed it: count
  // it as a restart (a stranger's write or a peer's failure, never a real change). False
  // when no restart is left (the agent is finishing).
  bool spend_restart_for_same_members();
  // Writes text (whole lines: the failure summary) to the notice console, else to notice_fd.
  void emit(const std::string& text) const;
  // Hang detection (HangWatch) reports here.
  void start_hang_watch();
  void on_timer_expired(const ExpiredTimer& timer);
  void on_hang(const HangReport& report, const std::vector<RankSnapshot>& all);
  void install_signals();
  void wait_for_signal();

  boost::asio::io_context& io_;
  AgentOptions options_;
  rendezvous::RendezvousHandler& rendezvous_;
  LogRouter& logs_;
  EventLog& events_;

  State state_ = State::kInit;
  int restart_count_ = 0;       // restarts spent by this node
  int attempt_ = 0;             // TORCHELASTIC_RESTART_COUNT of the current workers (the round)
  std::string members_;         // RendezvousInfo::members of the current round
  uint64_t members_round_ = 0;  // ... and that round
  // Why this node re-joins, when it is not after a failure: a claim (a node waiting, a member
  // re-joining: a re-form with the same nodes then counts as a restart, since a stranger can
  // make such claims), or a loss (a node found gone or silent, maybe this one: never counted).
  enum class Reform { kNone, kClaim, kLoss };
  Reform reform_ = Reform::kNone;
  uint64_t generation_ = 0;  // bumps per attempt so late callbacks of old workers are ignored
  std::vector<WorkerSlot> workers_;
  // The worker processes: slots, start, signals, the stop with its grace, exits.
  WorkerGroup group_;
  std::vector<WorkerFailure> failures_;
  bool failure_noted_ = false;  // note_failure() ran for this attempt
  std::function<void()> after_stop_;
  StopReason stop_reason_ = StopReason::kOther;
  rendezvous::RendezvousInfo info_;  // the round the workers run in
  // The job-wide failure record of this attempt (multi-node only): published and heard.
  JobFailureLink job_link_;
  bool store_lost_ = false;       // the store is gone: leaving the rendezvous is pointless
  bool store_leaving_ = false;    // the store host announced it leaves (not a failure)
  bool awaiting_record_ = false;  // after_failure waits for the record (record_timer_)
  // Why the job can no longer restart (RendezvousHandler::restart_blocker, "" when it can),
  // asked once per failed attempt of a multi-node job before a restart is spent; unset until.
  std::optional<std::string> restart_blocker_;
  std::thread restart_check_thread_;
  boost::asio::steady_timer record_timer_;
  // The rendezvous watcher lost the store: the job watch's own error (which says whether the
  // host closed the connection or fell silent) gets a moment to arrive first.
  boost::asio::steady_timer store_cause_timer_;
  // Elastic: a worker failed while every node seemed up. A peer's death often kills a worker
  // (its collective's connection resets) a moment before that node's loss claim arrives; for
  // this short window the failure waits, and a loss claim turns it into a re-form that spends
  // no restart (docs/multinode.md, "Silence or death").
  boost::asio::steady_timer loss_window_timer_;
  bool loss_window_open_ = false;
  size_t loss_window_first_ = 0;  // failures_ index of the failure that opened the window
  void act_on_worker_failure();
  int stop_signal_sent_ = 0;
  std::optional<int> agent_signal_;  // the first signal the agent received
  int exit_status_ = 0;
  std::unique_ptr<HangWatch> hang_;       // null when no hang detection was asked for
  boost::asio::steady_timer hang_timer_;  // a dumped culprit that does not die
  std::optional<boost::asio::signal_set> signals_;
  bool recovering_ = false;  // an in-place re-form: RENDEZVOUS with the workers kept running
  Recovery recovery_;
  std::vector<Recovery> recoveries_;  // completed ones, for the summary
  boost::asio::steady_timer recovery_timer_;
  std::thread rendezvous_thread_;
  std::thread exit_thread_;
  // Keeps run() going while the only pending work is a rendezvous on its thread.
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> busy_;
};

// "INIT", "RENDEZVOUS", "HEALTHY", "STOPPING", "EXITING", "DONE" (the health endpoint's words).
const char* state_name(Agent::State state);

}  // namespace ddp::launcher
