#include "launcher/agent/agent.hpp"

#include <unistd.h>

#include <boost/asio/post.hpp>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/peer_tolerance.hpp"
#include "launcher/agent/agent_events.hpp"
#include "launcher/agent/attempt_report.hpp"
#include "launcher/agent/store_loss.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;

Agent::Agent(asio::io_context& io, AgentOptions options, WorkerSpawner& spawner,
             rendezvous::RendezvousHandler& rendezvous, LogRouter& logs, EventLog& events)
    : io_(io),
      options_(std::move(options)),
      rendezvous_(rendezvous),
      calls_(io, rendezvous),
      logs_(logs),
      events_(events),
      group_(io, spawner,
             WorkerGroupOptions{.stop_timeout = options_.config.stop_timeout,
                                .read_proc = options_.read_proc}),
      failures_(io, events),
      job_(
          io, options_.config.local_addr.value_or(options_.host), options_.config.peer_tolerance,
          events,
          JobWatch::Hooks{
              [this](const rendezvous::FailureRecord& record) { on_job_failure(record); },
              [this] {
                if (job_.settle()) decide_now();
              },
              [this](const std::string& message, PeerLoss loss) { on_store_lost(message, loss); }}),
      recovery_(io, options_.config.in_place_recovery, options_.config.recovery_timeout, events,
                group_,
                InPlaceRecovery::Hooks{
                    [this](size_t index) { return launcher_.replace(index); },
                    [this](size_t index) {
                      const auto identity =
                          worker_identity(options_.config, attempt_info(), static_cast<int>(index));
                      auto notice = round_notice(identity, round_.attempt);
                      // What LOCAL_RANK says (0 for each of them when virtual).
                      if (options_.config.virtual_local_rank) notice.local_rank = 0;
                      return notice.to_message();
                    },
                    [this](size_t index) { return launcher_.slot(index).rank; },
                    [this] { return state_ == State::kHealthy; }, options_.read_proc,
                    [this] { rendezvous_.workers_ready(); }, [this] { standbys_.fill(); }}),
      standbys_(
          io, spawner, events, options_.config.standby_workers, options_.config.recovery_timeout,
          options_.run_dir,
          [this](const std::string& error_file) { return launcher_.standby_spec(error_file); }),
      launcher_(options_, round_, group_, recovery_, standbys_, logs_, events_,
                WorkerLauncher::Hooks{
                    [this] { return attempt_info(); }, [this] { return hangs_.worker_env(); },
                    [this](size_t index, ExitStatus status) { on_worker_exit(index, status); },
                    [this](const WorkerSlot& slot, const std::string& error) {
                      if (recovery_.parked()) return;  // a spare's: started at admission
                      job_.publish(spawn_failure_record(slot, error));
                      note_failure("spawn", slot.rank);
                      ending_.exit_after_stop = 127;
                      end_attempt(EndCause::kFinal);
                    }}),
      hangs_(io,
             HangResponseOptions{options_.config.hang_timeout,
                                 env_value(options_.env, env::kEnableFileTimer) == "1",
                                 env_value(options_.env, env::kTimerFile), options_.run_dir,
                                 options_.config.stop_timeout, options_.config.peer_tolerance,
                                 options_.read_proc},
             events, group_, launcher_.slots(),
             HangResponse::Hooks{[this] { end_attempt(EndCause::kWorkerFailed); },
                                 [this](int rank) { note_failure("hang", rank); },
                                 [this] { return state_ == State::kHealthy; }}),
      signals_(io),
      departure_(io, options_, calls_, job_, recovery_, signals_, events) {}

Agent::~Agent() = default;

int Agent::run() {
  if (options_.handle_signals) {
    signals_.start(options_.config.signals_to_handle, [this](int sig) { handle_signal(sig); });
  }
  if (sets_default_omp_threads(options_.config, options_.env)) report_default_omp_threads();
  // Keeps run() going while the only pending work is off the loop; departure_ stops it.
  const auto busy = asio::make_work_guard(io_);
  asio::post(io_, [this] { start_round(); });
  io_.run();
  calls_.join_threads();
  return departure_.exit_status();
}

void Agent::handle_signal(int sig) {
  const std::string name = signal_name(sig);
  const bool again = signals_.first().has_value() && state_ != State::kExiting;
  report_signal(events_, state_, again, sig, group_.running_pids());
  if (state_ == State::kExiting) {
    // The workers are gone; only the exit barrier (or closing the rendezvous) is left.
    if (signals_.note(sig)) departure_.signalled(sig);
    rendezvous_.interrupt();
    return;
  }
  if (again) {
    group_.signal_all(SIGKILL);  // the user is done waiting for the grace period
    return;
  }
  signals_.note(sig);
  switch (state_) {
    case State::kInit:
    case State::kRendezvous:
      // An in-place re-form keeps workers running through the rendezvous: they go too. The
      // round's call returns (RendezvousClosed) and on_round* finishes.
      group_.signal_all(sig);
      rendezvous_.shutdown_after_failure();
      break;
    case State::kHealthy:
      job_.publish(signal_record(sig, static_cast<int>(::getpid()), name));
      end_attempt(EndCause::kSignal, sig);
      break;
    case State::kStopping:
      group_.signal_all(sig);
      end_attempt(EndCause::kSignal, sig);
      break;
    case State::kExiting:
    case State::kDone:
      break;
  }
}

// --- rounds ---

void Agent::start_round() {
  state_ = State::kRendezvous;
  calls_.watch_spare([this](const rendezvous::SpareNotice& notice) {
    report_spare(events_, rendezvous_.run_id(), notice);
    using Kind = rendezvous::SpareNotice::Kind;
    if (notice.kind == Kind::kStandingBy) park_workers("spare_admitted");
    // A node joining a running group asks it to re-form once its workers are ready.
    if (notice.kind == Kind::kJoining && !park_workers("joined")) rendezvous_.workers_ready();
  });
  calls_.join([this](const rendezvous::RendezvousInfo& info,
                     JobConnections connections) { on_round(info, std::move(connections)); },
              [this](const RendezvousCalls::RoundError& error) { on_round_error(error); });
}

void Agent::on_round(const rendezvous::RendezvousInfo& info, JobConnections connections) {
  if (state_ == State::kExiting || state_ == State::kDone) return;
  if (const auto sig = signals_.first()) {
    stop_then_finish(128 + *sig);
    return;
  }
  if (round_.same_nodes_again(info) &&
      !round_.count_same_nodes(options_.config.max_restarts, events_)) {
    stop_then_finish(1);  // workers kept through an in-place re-form are stopped first
    return;
  }
  round_.attempt = static_cast<int>(info.round);
  report_round(events_, info, round_.attempt, round_.restarts_spent);
  calls_.watch([this](rendezvous::MembershipChange change) { on_membership_change(change); });
  if (recovery_.under_way()) {
    logs_.end_attempt();
    begin_round(info, std::move(connections));
    launcher_.renumber(info.rank_offset);
    switch (recovery_.resume(static_cast<int64_t>(info.round))) {
      case InPlaceRecovery::Resumed::kStartFailed:
        return;  // the attempt ended with the start
      case InPlaceRecovery::Resumed::kAllFinished:
        DDP_LOG_INFO("the workers finished while the group re-formed; nothing to resume");
        finish(0);
        return;
      case InPlaceRecovery::Resumed::kRunning:
        break;
    }
    watch_hangs();
    return;
  }
  ++round_.generation;
  launcher_.reset(static_cast<size_t>(options_.config.nproc_per_node));
  begin_round(info, std::move(connections));
  if (launcher_.start_all()) watch_hangs();
}

bool Agent::park_workers(const std::string& reason) {
  if (!recovery_.enabled() || !options_.config.hot_spares || state_ != State::kRendezvous ||
      group_.running_count() > 0 || signals_.first()) {
    return false;
  }
  ++round_.generation;
  launcher_.park(static_cast<size_t>(options_.config.nproc_per_node), reason);
  return true;
}

void Agent::on_round_error(const RendezvousCalls::RoundError& error) {
  const auto sig = signals_.first();
  stop_then_finish(sig ? 128 + *sig : report_round_error(events_, error.message, error.not_needed));
}

void Agent::begin_round(const rendezvous::RendezvousInfo& info, JobConnections connections) {
  round_.info = info;
  ending_ = Ending{};
  failures_.reset();
  // Watching (and able to publish) before any worker runs: a start failure is a failure too.
  job_.begin(info, std::move(connections), !rendezvous_.kind().elastic);
  launcher_.declare_namespace();
  logs_.begin_attempt(options_.config.nproc_per_node, info.rank_offset,
                      options_.write_log_files ? std::optional(round_.attempt_dir(options_.run_dir))
                                               : std::nullopt);
  state_ = State::kHealthy;
}

void Agent::watch_hangs() {
  hangs_.begin([this] { return rendezvous_.connect_job_store(); }, round_.info.round,
               round_.info.group_rank, round_.info.group_world_size);
}

// --- what happens while an attempt runs ---

void Agent::on_worker_exit(size_t index, ExitStatus status) {
  const auto& slot = launcher_.slot(index);
  const int pid = group_.pid(index);
  logs_.flush(slot.local_rank);
  hangs_.worker_exited(pid);
  report_worker_exit(events_, slot, pid, status, round_.attempt);
  switch (recovery_.on_exit(index, status, state_ == State::kHealthy, round_.attempt)) {
    case InPlaceRecovery::ExitMeaning::kFinished:
    case InPlaceRecovery::ExitMeaning::kReplacedLater:
      return;
    case InPlaceRecovery::ExitMeaning::kReplacedNow:
      if (recovery_.parked()) {
        if (!signals_.first()) launcher_.start(index);  // leaving: not started again
        return;
      }
      if (launcher_.replace(index)) watch_hangs();
      return;
    case InPlaceRecovery::ExitMeaning::kNone:
      break;
  }
  if (state_ == State::kHealthy) {
    if (!status.success()) {
      on_worker_failed(index, status);
    } else if (group_.running_count() == 0) {
      end_attempt(EndCause::kSucceeded);
    }
    return;
  }
  if (state_ != State::kStopping) return;
  if (!status.success()) {
    auto failure = assemble_failure(slot, pid, status, logs_.stderr_tail(slot.local_rank));
    if (failed_on_its_own(failure, ending_.stop_signal)) failures_.add(failure);
  }
  if (group_.running_count() == 0) on_stopped();
}

void Agent::on_worker_failed(size_t index, ExitStatus status) {
  const auto& slot = launcher_.slot(index);
  note_failure(!slot.hang.empty() ? "hang" : status.signal != 0 ? "signal" : "exit", slot.rank);
  failures_.add(
      assemble_failure(slot, group_.pid(index), status, logs_.stderr_tail(slot.local_rank)));
  if (failures_.waiting_for_loss()) return;  // the first failure's window decides for both
  failures_.mark_root();
  // A loss claim within the window makes the failure a re-form that spends no restart.
  const bool wait_for_loss = rendezvous_.kind().elastic && round_.info.group_world_size > 1 &&
                             slot.hang.empty() && !recovery_.enabled();
  if (wait_for_loss) {
    failures_.wait_for_loss([this] {
      if (state_ == State::kHealthy) act_on_failure();
    });
    return;
  }
  act_on_failure();
}

void Agent::act_on_failure() {
  job_.publish(record_of(failures_.root()));
  // Other hung ranks still printing their stacks are not cut short: the dump grace or the
  // last of them to exit stops the group.
  if (!hangs_.dumps_pending()) end_attempt(EndCause::kWorkerFailed);
}

void Agent::on_membership_change(rendezvous::MembershipChange change) {
  using rendezvous::MembershipChange;
  const EndCause cause = change == MembershipChange::kNodeLost      ? EndCause::kNodeLost
                         : change == MembershipChange::kNodeWaiting ? EndCause::kClaim
                                                                    : EndCause::kStoreLost;
  events_.record(event::kMembershipChange, {{"change", end_cause_name(cause)}});
  if (change == MembershipChange::kSteppedDown) {
    // This node served the store and lost its majority: the others carry the store on, and
    // this node joins them once it can (its own store opens no round any more).
    if (state_ != State::kHealthy) return;
    report_stepped_down(events_, rendezvous_.last_change().text);
    end_attempt(EndCause::kStoreSilent);
    return;
  }
  if (change == MembershipChange::kStoreLost) {
    // The watcher's own error ("receive failed: Connection timed out") says silence or death.
    const rendezvous::ChangeReason reason = rendezvous_.last_change();
    job_.rendezvous_lost_store(watcher_loss_text(reason.text), reason.loss);
    return;
  }
  if (state_ != State::kHealthy) return;  // a coming rendezvous sees the new membership
  if (cause == EndCause::kNodeLost) {
    note_failure("node_lost", -1);
    failures_.absorb_loss();  // a worker failure just before was the loss's doing
  }
  end_attempt(cause);
}

void Agent::on_unkillable(const std::vector<UnkillableWorker>& gone) {
  for (const auto& worker : gone) {
    auto& slot = launcher_.slot(worker.index);
    report_unkillable(events_, slot, worker);
    // It failed to go away: a failure of its own (a restart is spent on it, never a loop).
    if (slot.hang.empty()) slot.hang = "unkillable: still there after SIGKILL";
    note_failure("unkillable", slot.rank);
    const ExitStatus killed{0, SIGKILL};
    failures_.add(assemble_failure(slot, worker.pid, killed, {}));
    job_.publish(unkillable_record(slot, worker.pid));
    ending_.cause = graver(ending_.cause, EndCause::kWorkerFailed);
  }
  if (group_.running_count() == 0) on_stopped();
}

void Agent::on_job_failure(const rendezvous::FailureRecord& record) {
  if (state_ == State::kExiting) {
    // An elastic job with a restart left goes on without this node: not a failure of the job.
    departure_.heard_failure(record, !rendezvous_.kind().elastic || !record.restartable() ||
                                         round_.restarts_spent >= options_.config.max_restarts);
    return;
  }
  if (job_.settle()) {
    decide_now();
    return;
  }
  if (job_.is_mine(record)) return;  // this node is stopping for it already
  if (record.kind == "node_lost" && record.group_rank == round_.info.group_rank) {
    report_own_connection_lost(options_.config.peer_tolerance);
  }
  const bool reforming = state_ == State::kStopping && !is_failure(ending_.cause) &&
                         ending_.cause != EndCause::kSignal;
  if (state_ == State::kHealthy || reforming) {
    note_failure(failure_kind(record), record.rank);
  }
  const EndCause cause = record.restartable() ? EndCause::kJobFailed : EndCause::kFinal;
  if (state_ == State::kHealthy) {
    Situation s = situation();
    s.cause = cause;
    if (decide(s).action != Decision::Action::kReformInPlace) {
      report_failed_elsewhere(record, group_.running_pids());
    }
  }
  end_attempt(cause);
}

void Agent::on_store_lost(const std::string& message, PeerLoss loss) {
  const auto kind = rendezvous_.kind();
  const StoreLossFacts facts{.loss = loss,
                             .store_moves = kind.store_moves,
                             .elastic = kind.elastic,
                             .leaving = state_ == State::kExiting || state_ == State::kDone,
                             .healthy = state_ == State::kHealthy,
                             .stopping = state_ == State::kStopping,
                             .ending = ending_.cause,
                             .awaiting_record = job_.awaiting_record()};
  const std::string store = store_loss_text(loss, options_.config.peer_tolerance);
  switch (store_loss_step(facts)) {
    case StoreLossStep::kIgnore:
      return;
    case StoreLossStep::kHostGone:
      report_store_host_gone(events_, store, message);
      end_attempt(EndCause::kNodeLost);
      return;
    case StoreLossStep::kCutOff: {
      Situation s = situation();
      s.cause = EndCause::kStoreSilent;
      const bool keep = decide(s).action == Decision::Action::kReformInPlace;
      report_cut_off(events_, store, message, keep, group_.running_pids());
      end_attempt(EndCause::kStoreSilent);
      return;
    }
    case StoreLossStep::kSettle:
      if (!kind.store_moves) job_.mark_store_gone();
      job_.settle();
      decide_now();
      return;
    case StoreLossStep::kLost:
      // Static and silent: the store dropped this node's connections too, so to the other
      // nodes this node is gone, and a static job cannot replace a node: the job failed
      // everywhere.
      if (!kind.store_moves) job_.mark_store_gone();
      if (facts.healthy) note_failure("store_lost", -1);
      report_store_lost(events_, store, message,
                        store_loss_advice(loss == PeerLoss::kSilence, kind.elastic),
                        facts.healthy ? std::optional(group_.running_pids()) : std::nullopt);
      end_attempt(EndCause::kStoreLost);
      return;
  }
}

// --- the end of an attempt ---

void Agent::end_attempt(EndCause cause, int stop_signal) {
  if (state_ == State::kStopping) {
    ending_.cause = graver(ending_.cause, cause);
    // Waiting for the record or the restart check: what just arrived may settle it.
    if (ending_.workers_gone) decide_now();
    return;
  }
  if (state_ != State::kHealthy) return;
  ending_.cause = cause;
  if (const Decision early = decide(situation());
      early.action == Decision::Action::kReformInPlace) {
    apply(early);
    return;
  }
  if (cause == EndCause::kClaim || cause == EndCause::kNodeLost) {
    DDP_LOG_INFO(std::string("membership changed (") + end_cause_name(cause) +
                 "); restarting the workers without spending a restart (pids " +
                 group_.running_pids() + ")");
  }
  state_ = State::kStopping;
  ending_.stop_signal = stop_signal;
  hangs_.end();
  if (group_.running_count() == 0) {
    on_stopped();
    return;
  }
  events_.record(
      event::kStopping,
      {{"reason", stop_reason(cause)}, {"signal", stop_signal}, {"pids", group_.running_pids()}});
  group_.stop(stop_signal,
              [this](const std::vector<UnkillableWorker>& gone) { on_unkillable(gone); });
}

void Agent::on_stopped() {
  if (ending_.workers_gone || state_ != State::kStopping) return;
  ending_.workers_gone = true;
  group_.cancel_stop();
  events_.record(event::kWorkersStopped, {{"restart_count", round_.attempt}});
  group_.release_all();
  report_escaped(events_, group_.stop_escaped(), round_.attempt);
  logs_.end_attempt();
  if (ending_.exit_after_stop) {
    finish(*ending_.exit_after_stop);
    return;
  }
  if (is_failure(ending_.cause) && job_.watching() && job_.published() && !job_.failure()) {
    // The record that holds (ours, or another node's a moment earlier) is a round trip away:
    // every node must decide from the same one.
    job_.await_record([this] { decide_now(); });
    return;
  }
  decide_now();
}

Situation Agent::situation() const {
  Situation s;
  s.cause = ending_.cause;
  // Another node's record settles what this node's failure is: restartable or not.
  if (is_failure(s.cause) && job_.failure()) {
    s.cause = job_.failure()->restartable() ? EndCause::kJobFailed : EndCause::kFinal;
  }
  s.elastic = rendezvous_.kind().elastic;
  // In place: the workers that still run re-form. After a failure here, only when a standby
  // can take the failed worker's place; without one this node restarts its workers as before.
  const bool failed_here = ending_.cause == EndCause::kWorkerFailed;
  s.in_place = recovery_.enabled() && state_ == State::kHealthy &&
               (failed_here ? standbys_.available() : group_.running_count() > 0);
  s.restarts_spent = round_.restarts_spent;
  s.max_restarts = options_.config.max_restarts;
  s.job_can_restart = ending_.blocker.value_or("").empty();
  return s;
}

void Agent::decide_now() {
  if (job_.awaiting_record() || state_ != State::kStopping) return;
  const Decision d = decide(situation());
  if (d.action == Decision::Action::kRestart && !ending_.blocker &&
      round_.info.group_world_size > 1 && !job_.store_gone()) {
    // A restart is left by the count; whether the job can still take one is the rendezvous's
    // to say (a static node that finished never comes back), and asking takes the store.
    calls_.ask_restart_blocker([this, generation = round_.generation](const std::string& blocker) {
      if (generation != round_.generation || state_ != State::kStopping) return;
      ending_.blocker = blocker;
      decide_now();
    });
    return;
  }
  apply(d);
}

void Agent::apply(const Decision& d) {
  const auto& root = job_.failure();
  switch (d.action) {
    case Decision::Action::kFinish:
      finish(0);
      return;
    case Decision::Action::kRejoin:
      round_.reform = ending_.cause == EndCause::kClaim ? Reform::kClaim : Reform::kLoss;
      start_round();
      return;
    case Decision::Action::kReformInPlace: {
      const std::string reason = end_cause_name(ending_.cause);
      if (d.restarts_spent > round_.restarts_spent) {
        // A failure, here or on another node: the same count every node keeps, and only the
        // failed worker is replaced.
        round_.restarts_spent = d.restarts_spent;
        if (ending_.cause == EndCause::kWorkerFailed) {
          report_own_failure_in_place(events_, failures_.all(), round_.restarts_spent,
                                      options_.config.max_restarts, standbys_.available());
        } else {
          report_in_place_restart(events_, root, round_.restarts_spent,
                                  options_.config.max_restarts);
        }
      }
      recovery_.begin(reason, round_.attempt);
      report_recovery_started(events_, reason, round_.attempt, group_.running_pids());
      hangs_.end();
      // The failure record of the round being left means nothing in the next one.
      job_.stop();
      round_.reform = reform_after(ending_.cause);
      start_round();
      return;
    }
    case Decision::Action::kRestart: {
      round_.restarts_spent = d.restarts_spent;
      const auto notice = restart_notice(root, failures_.all(), round_.restarts_spent,
                                         options_.config.max_restarts);
      DDP_LOG_WARN(notice.line);
      events_.record(event::kRestart, notice.event);
      start_round();
      return;
    }
    case Decision::Action::kGiveUp:
      give_up(d);
      return;
  }
}

void Agent::give_up(const Decision& d) {
  const EndCause cause = situation().cause;
  if (cause == EndCause::kSignal) {
    finish(128 + signals_.first().value_or(ending_.stop_signal));
    return;
  }
  if (!is_failure(cause)) {
    finish(1);  // the store is lost (said when it was): nothing to restart with
    return;
  }
  GiveUpFacts facts;
  facts.root = job_.failure();
  facts.failures = failures_.all();
  facts.restart_impossible = d.restart_impossible;
  facts.restarts_left = options_.config.max_restarts - round_.restarts_spent;
  facts.blocker = ending_.blocker.value_or("");
  facts.program = options_.config.program;
  facts.host = options_.host;
  const GiveUpReport report = give_up_report(facts);
  for (const auto& line : report.errors) DDP_LOG_ERROR(line);
  if (!report.summary.empty()) departure_.emit(report.summary);
  finish(report.exit_status);
}

void Agent::stop_then_finish(int exit_status) {
  recovery_.abandon();
  if (group_.running_count() == 0) {
    finish(exit_status);
    return;
  }
  state_ = State::kHealthy;  // the workers kept through an in-place re-form run: stop them
  ending_.exit_after_stop = exit_status;
  end_attempt(EndCause::kSignal, signals_.first().value_or(SIGTERM));
}

void Agent::finish(int exit_status) {
  if (state_ == State::kExiting || state_ == State::kDone) return;
  state_ = State::kExiting;
  standbys_.stop_all();
  group_.cancel_stop();
  hangs_.end();
  failures_.close_window();
  departure_.leave(exit_status, round_.restarts_spent, [this] { state_ = State::kDone; });
}

AttemptInfo Agent::attempt_info() const {
  return {round_.info, round_.attempt, rendezvous_.run_id(), options_.use_agent_store,
          recovery_.parked()};
}

}  // namespace ddp::launcher
