#include "launcher/agent/agent.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/peer_tolerance.hpp"
#include "launcher/agent/attempt_report.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;

namespace {

// How long after SIGKILL a worker that is still there is called unkillable (at least).
constexpr std::chrono::milliseconds kUnkillableGrace{2000};
// How long a node that published its own failure waits for the record that holds (its own, or
// an earlier one from another node) before it decides alone: normally a store round trip.
constexpr std::chrono::milliseconds kRecordWait{10000};
// How long a worker failure in an elastic job waits for a loss claim: a loss is claimed within
// a store round trip of a death (about 5 ms, docs/benchmarks.md), and a failure with no loss
// behind it still reaches every node within 0.3 s of the worker's exit.
constexpr std::chrono::milliseconds kLossClaimWindow{200};

bool ignored_at_start(int sig) {
  struct sigaction current {};
  return ::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

}  // namespace

const char* state_name(Agent::State state) {
  switch (state) {
    case Agent::State::kInit:
      return "INIT";
    case Agent::State::kRendezvous:
      return "RENDEZVOUS";
    case Agent::State::kHealthy:
      return "HEALTHY";
    case Agent::State::kStopping:
      return "STOPPING";
    case Agent::State::kExiting:
      return "EXITING";
    case Agent::State::kDone:
      break;
  }
  return "DONE";
}

Agent::Agent(asio::io_context& io, AgentOptions options, WorkerSpawner& spawner,
             rendezvous::RendezvousHandler& rendezvous, LogRouter& logs, EventLog& events)
    : io_(io),
      options_(std::move(options)),
      rendezvous_(rendezvous),
      logs_(logs),
      events_(events),
      group_(
          io, spawner,
          WorkerGroupOptions{options_.config.stop_timeout, kUnkillableGrace, options_.read_proc}),
      job_(
          io, options_.config.local_addr.value_or(options_.host), options_.config.peer_tolerance,
          events,
          JobWatch::Hooks{
              [this](const rendezvous::FailureRecord& record) { on_job_failure(record); },
              [this] { on_store_leaving(); },
              [this](const std::string& message, PeerLoss loss) { on_store_lost(message, loss); }}),
      recovery_(io, options_.config.in_place_recovery, options_.config.recovery_timeout, events,
                group_,
                InPlaceRecovery::Hooks{[this](size_t index) { return start_worker(index); },
                                       [this](size_t index) {
                                         AttemptInfo attempt{round_.info, round_.attempt,
                                                             rendezvous_.run_id(),
                                                             options_.use_agent_store};
                                         const auto identity = worker_identity(
                                             options_.config, attempt, static_cast<int>(index));
                                         return round_notice(identity, round_.attempt).to_message();
                                       },
                                       [this](size_t index) { return slots_.at(index).rank; },
                                       [this] { return state_ == State::kHealthy; }}),
      hangs_(io,
             HangResponseOptions{options_.config.hang_timeout,
                                 env_value(options_.env, env::kEnableFileTimer) == "1",
                                 env_value(options_.env, env::kTimerFile), options_.run_dir,
                                 options_.config.stop_timeout, options_.read_proc},
             events, group_, slots_,
             HangResponse::Hooks{[this] { end_attempt(EndCause::kWorkerFailed); },
                                 [this](int rank) { note_failure("hang", rank); },
                                 [this] { return state_ == State::kHealthy; }}),
      record_timer_(io),
      loss_window_timer_(io) {}

Agent::~Agent() {
  for (auto* thread : {&rendezvous_thread_, &check_thread_, &exit_thread_}) {
    if (thread->joinable()) thread->join();
  }
}

int Agent::run() {
  if (options_.handle_signals) install_signals();
  if (sets_default_omp_threads(options_.config, options_.env)) {
    DDP_LOG_INFO(
        "setting OMP_NUM_THREADS=1 for each worker (it was unset and nproc_per_node > 1); "
        "set it yourself to tune performance");
  }
  busy_.emplace(io_.get_executor());
  asio::post(io_, [this] { start_round(); });
  io_.run();
  for (auto* thread : {&rendezvous_thread_, &check_thread_, &exit_thread_}) {
    if (thread->joinable()) thread->join();
  }
  return exit_status_;
}

void Agent::install_signals() {
  signals_.emplace(io_);
  // --signals_to_handle: the others keep their default action, as under torchrun.
  for (int sig : options_.config.signals_to_handle) {
    // A signal ignored when we started (SIGHUP under nohup) stays ignored, as the user asked.
    if (!ignored_at_start(sig)) signals_->add(sig);
  }
  wait_for_signal();
}

void Agent::wait_for_signal() {
  signals_->async_wait([this](boost::system::error_code ec, int sig) {
    if (ec) return;  // cancelled when done
    handle_signal(sig);
    if (state_ != State::kDone) wait_for_signal();
  });
}

void Agent::handle_signal(int sig) {
  events_.record(event::kSignal, {{"signal", sig}, {"name", signal_name(sig)}});
  const std::string name = signal_name(sig);
  if (state_ == State::kExiting) {
    // The workers are gone; only the exit barrier (or closing the rendezvous) is left.
    DDP_LOG_INFO("received " + name + " while leaving the rendezvous; exiting now");
    if (!agent_signal_) {
      agent_signal_ = sig;
      exit_status_ = 128 + sig;
    }
    rendezvous_.interrupt();
    return;
  }
  if (agent_signal_) {
    // A second signal: the user is done waiting for the grace period.
    DDP_LOG_INFO("received " + name + " again; killing the workers now (pids " +
                 group_.running_pids() + ")");
    group_.signal_all(SIGKILL);
    return;
  }
  agent_signal_ = sig;
  switch (state_) {
    case State::kInit:
    case State::kRendezvous:
      DDP_LOG_INFO("received " + name + " during rendezvous; shutting down");
      // An in-place re-form keeps workers running through the rendezvous: they go too.
      group_.signal_all(sig);
      // The rendezvous thread returns (RendezvousClosed) and on_round* finishes.
      rendezvous_.shutdown_after_failure();
      break;
    case State::kHealthy: {
      DDP_LOG_INFO("received " + name + "; forwarding it to the workers (pids " +
                   group_.running_pids() + ")");
      // The other nodes' workers would wait for this node's in their collectives: stop them.
      rendezvous::FailureRecord record;
      record.kind = "agent_signal";
      record.signal = sig;
      record.pid = static_cast<int>(::getpid());
      record.message = name;
      publish_failure(record);
      end_attempt(EndCause::kSignal, sig);
      break;
    }
    case State::kStopping:
      DDP_LOG_INFO("received " + name + " while stopping the workers; forwarding it (pids " +
                   group_.running_pids() + ")");
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
  if (rendezvous_thread_.joinable()) rendezvous_thread_.join();
  // A round takes seconds, and so may connecting to a store that does not answer: both off
  // the loop, which keeps serving signals and exits.
  rendezvous_thread_ = std::thread([this] {
    try {
      auto info = rendezvous_.next_rendezvous();
      auto connections =
          connect_job([this] { return rendezvous_.connect_job_store(); }, info.group_world_size);
      asio::post(io_, [this, info, connections] { on_round(info, connections); });
    } catch (const std::exception& e) {
      asio::post(io_, [this, message = std::string(e.what())] { on_round_error(message); });
    }
  });
}

void Agent::on_round(const rendezvous::RendezvousInfo& info, JobConnections connections) {
  if (state_ == State::kExiting || state_ == State::kDone) return;
  if (agent_signal_) {
    stop_then_finish(128 + *agent_signal_);
    return;
  }
  // The same nodes as the round just before, after a claim: nothing changed.
  const bool same_nodes = round_.reform == Reform::kClaim && !info.members.empty() &&
                          info.members == round_.members && info.round == round_.members_round + 1;
  round_.reform = Reform::kNone;
  round_.members = info.members;
  round_.members_round = info.round;
  if (same_nodes) {
    const std::string why =
        "the group re-formed after a membership change with the same nodes as before (a "
        "member's workers failed, or the change was not real)";
    const Decision d = decide_same_nodes(round_.restarts_spent, options_.config.max_restarts);
    if (d.action == Decision::Action::kGiveUp) {
      DDP_LOG_ERROR(why + "; no restart is left (max_restarts " +
                    std::to_string(options_.config.max_restarts) + "); giving up");
      events_.record(event::kRendezvousFailed, {{"message", why}});
      stop_then_finish(1);  // workers kept through an in-place re-form are stopped first
      return;
    }
    round_.restarts_spent = d.restarts_spent;
    DDP_LOG_WARN(why + "; counting it as restart " + std::to_string(round_.restarts_spent) +
                 " of " + std::to_string(options_.config.max_restarts));
    events_.record(event::kRestart,
                   {{"restarts_spent", round_.restarts_spent}, {"reason", "same_members"}});
  }
  round_.attempt = static_cast<int>(info.round);
  events_.record(event::kRendezvous, {{"round", info.round},
                                      {"group_rank", info.group_rank},
                                      {"group_world_size", info.group_world_size},
                                      {"world_size", info.world_size},
                                      {"master_addr", info.master_addr},
                                      {"master_port", info.master_port},
                                      {"restart_count", round_.attempt},
                                      {"restarts_spent", round_.restarts_spent}});
  DDP_LOG_DEBUG("rendezvous round " + std::to_string(info.round) + ": group rank " +
                std::to_string(info.group_rank) + " of " + std::to_string(info.group_world_size) +
                ", world size " + std::to_string(info.world_size) + ", master " + info.master_addr +
                ":" + std::to_string(info.master_port));
  rendezvous_.watch([this](rendezvous::MembershipChange change) {
    asio::post(io_, [this, change] { on_membership_change(change); });
  });
  if (recovery_.under_way()) {
    logs_.end_attempt();
    begin_round(info, std::move(connections));
    for (auto& slot : slots_) slot.rank = info.rank_offset + slot.local_rank;
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
  const auto count = static_cast<size_t>(options_.config.nproc_per_node);
  slots_.assign(count, WorkerSlot{});
  // Slot index == local rank, here and in group_, started or not.
  for (size_t index = 0; index < count; ++index) slots_[index].local_rank = static_cast<int>(index);
  group_.reset(count);
  recovery_.reset(count);
  begin_round(info, std::move(connections));
  start_workers();
}

void Agent::on_round_error(const std::string& message) {
  if (agent_signal_) {
    stop_then_finish(128 + *agent_signal_);
    return;
  }
  DDP_LOG_ERROR("rendezvous failed: " + message);
  events_.record(event::kRendezvousFailed, {{"message", message}});
  stop_then_finish(1);
}

void Agent::begin_round(const rendezvous::RendezvousInfo& info, JobConnections connections) {
  round_.info = info;
  ending_ = Ending{};
  record_timer_.cancel();
  loss_window_timer_.cancel();
  // Watching (and able to publish) before any worker runs: a start failure is a failure too.
  job_.begin(info, std::move(connections), !rendezvous_.kind().elastic);
  // The attempt number workers see is the round, not restarts spent: every node of a round
  // agrees on it, so /worker/attempt_<n> keys are never shared by two different groups.
  if (options_.set_worker_namespace) {
    try {
      options_.set_worker_namespace(env::kWorkerPrefixBase + std::to_string(round_.attempt) + "/");
    } catch (const Error& e) {
      // The workers' PyTorch clients will be refused; they fail and the job restarts.
      DDP_LOG_WARN(std::string("could not declare the workers' store namespace: ") + e.what());
    }
  }
  const auto attempt_dir = options_.run_dir / ("attempt_" + std::to_string(round_.attempt));
  logs_.begin_attempt(options_.config.nproc_per_node, info.rank_offset,
                      options_.write_log_files ? std::optional(attempt_dir) : std::nullopt);
  state_ = State::kHealthy;
}

void Agent::start_workers() {
  for (size_t index = 0; index < slots_.size(); ++index) {
    if (!start_worker(index)) return;
  }
  events_.record(
      event::kWorkersStarted,
      {{"count", slots_.size()}, {"restart_count", round_.attempt}, {"round", round_.info.round}});
  watch_hangs();
}

void Agent::watch_hangs() {
  hangs_.begin([this] { return rendezvous_.connect_job_store(); }, round_.info.round,
               round_.info.group_rank, round_.info.group_world_size);
}

bool Agent::start_worker(size_t index) {
  const auto& config = options_.config;
  AttemptInfo attempt{round_.info, round_.attempt, rendezvous_.run_id(), options_.use_agent_store};
  auto& slot = slots_[index];
  slot.rank = round_.info.rank_offset + slot.local_rank;
  slot.hang.clear();
  slot.culprit = false;
  slot.dumping = false;
  const auto rank_dir = options_.run_dir / ("attempt_" + std::to_string(round_.attempt)) /
                        std::to_string(slot.local_rank);
  std::filesystem::create_directories(rank_dir);
  slot.error_file = (rank_dir / "error.json").string();
  std::filesystem::remove(slot.error_file);

  WorkerProcessSpec spec = worker_spec(
      config, options_.env, attempt, slot.local_rank, slot.error_file, hangs_.worker_env(),
      index < options_.bindings.size() ? options_.bindings[index] : CpuBinding{});
  spec.channel_fd = recovery_.open_channel(
      index, [this, index, generation = round_.generation](const recovery::Message& message) {
        if (generation == round_.generation && index < slots_.size()) {
          recovery_.on_message(index, message);
        }
      });
  if (spec.channel_fd >= 0) {
    spec.env.push_back(std::string(recovery::kEnvFd) + "=" + std::to_string(recovery::kChildFd));
  }
  WorkerCallbacks callbacks;
  const int local_rank = slot.local_rank;
  callbacks.ready_for_output = [this, local_rank](int stream) {
    return logs_.ready(local_rank, stream);
  };
  callbacks.on_output = [this, local_rank](int stream, std::string_view bytes) {
    logs_.write(local_rank, stream, bytes);
  };
  callbacks.on_exit = [this, index](ExitStatus status) { on_worker_exit(index, status); };
  int pid = 0;
  try {
    pid = group_.start(index, spec, std::move(callbacks));
  } catch (const Error& e) {
    DDP_LOG_ERROR(e.what());
    events_.record(event::kSpawnFailed, {{"local_rank", slot.local_rank}, {"message", e.what()}});
    rendezvous::FailureRecord record;
    record.rank = slot.rank;
    record.local_rank = slot.local_rank;
    record.exit_code = 127;  // what a shell reports for a command it could not run
    record.message = e.what();
    record.final = true;  // this node ends here: the others must not wait for it
    publish_failure(record);
    note_failure("spawn", slot.rank);
    ending_.exit_after_stop = 127;
    end_attempt(EndCause::kFinal);
    return false;
  }
  recovery_.worker_started(index);
  events_.record(event::kWorkerStart, {{"rank", slot.rank},
                                       {"local_rank", slot.local_rank},
                                       {"pid", pid},
                                       {"restart_count", round_.attempt}});
  DDP_LOG_DEBUG("started rank " + std::to_string(slot.rank) + " (local_rank " +
                std::to_string(slot.local_rank) + ") as pid " + std::to_string(pid));
  return true;
}

// --- what happens while an attempt runs ---

void Agent::on_worker_exit(size_t index, ExitStatus status) {
  const auto& slot = slots_.at(index);
  const int pid = group_.pid(index);
  logs_.flush(slot.local_rank);
  hangs_.worker_exited(pid);
  events_.record(event::kWorkerExit, {{"rank", slot.rank},
                                      {"local_rank", slot.local_rank},
                                      {"pid", pid},
                                      {"exit_code", status.exit_code},
                                      {"signal", status.signal},
                                      {"restart_count", round_.attempt}});
  DDP_LOG_DEBUG("rank " + std::to_string(slot.rank) + " (pid " + std::to_string(pid) +
                ") exited: " + status.describe());
  switch (recovery_.on_exit(index, status, state_ == State::kHealthy, round_.attempt)) {
    case InPlaceRecovery::ExitMeaning::kFinished:
    case InPlaceRecovery::ExitMeaning::kReplacedLater:
      return;
    case InPlaceRecovery::ExitMeaning::kReplacedNow:
      if (start_worker(index)) watch_hangs();
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
    if (failed_on_its_own(failure, ending_.stop_signal)) ending_.failures.push_back(failure);
  }
  if (group_.running_count() == 0) on_stopped();
}

void Agent::on_worker_failed(size_t index, ExitStatus status) {
  const auto& slot = slots_.at(index);
  note_failure(!slot.hang.empty() ? "hang" : status.signal != 0 ? "signal" : "exit", slot.rank);
  ending_.failures.push_back(
      assemble_failure(slot, group_.pid(index), status, logs_.stderr_tail(slot.local_rank)));
  if (ending_.loss_window) return;  // the first failure's window decides for both
  ending_.window_first = ending_.failures.size() - 1;
  // A peer's death often kills a worker here (its collective's connection resets) a moment
  // before that node's loss claim arrives: an elastic job's failure waits that long, and a
  // loss claim meanwhile makes it a re-form that spends no restart.
  const bool wait_for_loss = rendezvous_.kind().elastic && round_.info.group_world_size > 1 &&
                             slot.hang.empty() && !recovery_.enabled();
  if (wait_for_loss) {
    ending_.loss_window = true;
    loss_window_timer_.expires_after(kLossClaimWindow);
    loss_window_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || !ending_.loss_window) return;
      ending_.loss_window = false;
      if (state_ == State::kHealthy) act_on_failure();
    });
    return;
  }
  act_on_failure();
}

void Agent::act_on_failure() {
  // The first failure of the window is the one published: the root cause.
  const auto& failure =
      ending_.failures.at(std::min(ending_.window_first, ending_.failures.size() - 1));
  const rendezvous::FailureRecord record = record_of(failure);
  publish_failure(record);
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
    DDP_LOG_WARN(rendezvous_.last_change().text +
                 "; joining the job again through the store's "
                 "successor once it is heard");
    events_.record(event::kStoreSilent, {{"message", rendezvous_.last_change().text}});
    end_attempt(EndCause::kStoreSilent);
    return;
  }
  if (change == MembershipChange::kStoreLost) {
    // The watcher's own error ("receive failed: Connection timed out") says silence or death.
    const rendezvous::ChangeReason reason = rendezvous_.last_change();
    std::string watcher = "the rendezvous watcher lost its connection";
    if (!reason.text.empty()) watcher += ": " + reason.text;
    job_.rendezvous_lost_store(watcher, reason.loss);
    return;
  }
  if (state_ != State::kHealthy) return;  // a coming rendezvous sees the new membership
  if (cause == EndCause::kNodeLost) note_failure("node_lost", -1);
  if (ending_.loss_window && cause == EndCause::kNodeLost) {
    // The worker failure just before was the lost node's doing: re-form, spend nothing.
    ending_.loss_window = false;
    loss_window_timer_.cancel();
    auto& failures = ending_.failures;
    const auto first = std::min(ending_.window_first, failures.size());
    if (first < failures.size()) {
      DDP_LOG_WARN("rank " + std::to_string(failures[first].rank) + " failed (" +
                   failures[first].status.describe() +
                   ") just before another node was found lost: taken for the loss's doing, no "
                   "restart spent");
      events_.record(event::kFailureFromLoss, {{"rank", failures[first].rank}});
    }
    failures.erase(failures.begin() + static_cast<std::ptrdiff_t>(first), failures.end());
  }
  end_attempt(cause);
}

void Agent::on_unkillable(const std::vector<UnkillableWorker>& gone) {
  for (const auto& worker : gone) {
    auto& slot = slots_.at(worker.index);
    const auto& status = worker.status;
    DDP_LOG_ERROR("rank " + std::to_string(slot.rank) + " (pid " + std::to_string(worker.pid) +
                  ") is unkillable: still there after SIGKILL" +
                  (status ? " (state " + std::string(1, status->state) + ")" : "") +
                  "; no longer waiting for it" +
                  (status ? "\n  " + describe(*status) : std::string()));
    events_.record(event::kUnkillable, {{"rank", slot.rank},
                                        {"local_rank", slot.local_rank},
                                        {"pid", worker.pid},
                                        {"state", status ? std::string(1, status->state) : ""}});
    // It failed to go away: a failure of its own (a restart is spent on it, never a loop).
    if (slot.hang.empty()) slot.hang = "unkillable: still there after SIGKILL";
    note_failure("unkillable", slot.rank);
    const ExitStatus killed{0, SIGKILL};
    ending_.failures.push_back(assemble_failure(slot, worker.pid, killed, {}));
    rendezvous::FailureRecord record;
    record.kind = "unkillable";
    record.rank = slot.rank;
    record.local_rank = slot.local_rank;
    record.pid = worker.pid;
    record.signal = SIGKILL;
    record.message = slot.hang;
    publish_failure(record);
    ending_.cause = graver(ending_.cause, EndCause::kWorkerFailed);
  }
  if (group_.running_count() == 0) on_stopped();
}

void Agent::on_job_failure(const rendezvous::FailureRecord& record) {
  if (state_ == State::kExiting) {
    if (exit_status_ == 0) job_failed_after_finish(record);
    return;
  }
  if (ending_.awaiting_record) {
    ending_.awaiting_record = false;
    record_timer_.cancel();
    decide_now();
    return;
  }
  if (job_.is_mine(record)) return;  // this node is stopping for it already
  if (record.kind == "node_lost" && record.group_rank == round_.info.group_rank) {
    DDP_LOG_ERROR(
        "the store lost this node's own connection (a network outage longer than the peer "
        "tolerance, --peer_tolerance " +
        tolerance_text(options_.config.peer_tolerance) + "): to the other nodes this node is gone");
  }
  const bool reforming = state_ == State::kStopping && !is_failure(ending_.cause) &&
                         ending_.cause != EndCause::kSignal;
  if (state_ == State::kHealthy || reforming) {
    note_failure(record.kind == "worker" ? (record.signal != 0 ? "signal" : "exit") : record.kind,
                 record.rank);
  }
  const EndCause cause = record.restartable() ? EndCause::kJobFailed : EndCause::kFinal;
  if (state_ == State::kHealthy) {
    Situation s = situation();
    s.cause = cause;
    if (decide(s).action != Decision::Action::kReformInPlace) {
      DDP_LOG_ERROR("the job failed on another node: " + record.describe() +
                    "; stopping this node's workers (pids " + group_.running_pids() + ")");
    }
  }
  end_attempt(cause);
}

void Agent::on_store_leaving() {
  if (!ending_.awaiting_record) return;
  ending_.awaiting_record = false;
  record_timer_.cancel();
  decide_now();
}

void Agent::job_failed_after_finish(const rendezvous::FailureRecord& record) {
  // An elastic job with a restart left goes on without this node: not a failure of the job.
  const bool final = !rendezvous_.kind().elastic || !record.restartable() ||
                     round_.restarts_spent >= options_.config.max_restarts;
  if (!final) return;
  exit_status_ = record.shell_status();
  DDP_LOG_ERROR(
      "the job failed on another node after this node's workers finished: " + record.describe() +
      "; this node exits " + std::to_string(exit_status_) + " once the other nodes are out");
}

void Agent::on_store_lost(const std::string& message, PeerLoss loss) {
  if (state_ == State::kExiting || state_ == State::kDone) return;
  // Already joining again after the store's silence: the other watches' errors say the same.
  if (state_ == State::kStopping && ending_.cause == EndCause::kStoreSilent) return;
  const std::string store = store_loss_text(loss, options_.config.peer_tolerance);
  const bool silent = loss == PeerLoss::kSilence;
  const bool moves = rendezvous_.kind().store_moves;
  const bool reforming = state_ == State::kStopping && (ending_.cause == EndCause::kClaim ||
                                                        ending_.cause == EndCause::kNodeLost);
  const bool running = (state_ == State::kHealthy || reforming) && !ending_.awaiting_record;
  if (moves && loss == PeerLoss::kDeath && running) {
    // The node that hosted the store is gone: a loss like any other node's, and the store
    // moves to a successor's standby (store_succession.hpp) as the group re-forms.
    DDP_LOG_WARN("lost " + store + " (" + message +
                 "): the node that hosted it is gone; the store moves to a successor and the "
                 "group re-forms without that node");
    events_.record(event::kStoreLost, {{"message", message}, {"moves", true}});
    end_attempt(EndCause::kNodeLost);
    return;
  }
  // Silence is not a death: in an elastic job the store host may well be alive and this node
  // the one cut off. It comes back as a joining node (the others re-formed without it, on the
  // store or on its successor's), and only a store that stays unreachable for the join
  // timeout ends it.
  if (silent && rendezvous_.kind().elastic && running) {
    Situation s = situation();
    s.cause = EndCause::kStoreSilent;
    const bool keep = decide(s).action == Decision::Action::kReformInPlace;
    DDP_LOG_WARN("lost " + store + " (" + message +
                 "): this node was cut off, or the store host was; " +
                 (keep ? "keeping this node's workers (pids " + group_.running_pids() +
                             ") and re-forming in place"
                       : "stopping this node's workers (pids " + group_.running_pids() +
                             ") and joining the job again as a new node"));
    events_.record(event::kStoreSilent, {{"message", message}});
    end_attempt(EndCause::kStoreSilent);
    return;
  }
  if (ending_.awaiting_record) {
    if (!moves) job_.mark_store_gone();
    ending_.awaiting_record = false;
    record_timer_.cancel();
    decide_now();
    return;
  }
  if (state_ != State::kHealthy && !reforming) return;
  // Static and silent: the store dropped this node's connections too, so to the other nodes
  // this node is gone, and a static job cannot replace a node: the job failed everywhere.
  if (!moves) job_.mark_store_gone();
  if (state_ == State::kHealthy) note_failure("store_lost", -1);
  DDP_LOG_ERROR("lost " + store + " (" + message +
                "): " + store_loss_advice(silent, rendezvous_.kind().elastic) +
                (state_ == State::kHealthy
                     ? "; stopping this node's workers (pids " + group_.running_pids() + ")"
                     : std::string()));
  events_.record(event::kStoreLost, {{"message", message}});
  end_attempt(EndCause::kStoreLost);
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
  if (const auto escaped = group_.stop_escaped(); !escaped.empty()) {
    std::string list;
    for (const auto& process : escaped) list += (list.empty() ? "" : ", ") + process;
    DDP_LOG_WARN("killed " + std::to_string(escaped.size()) +
                 " process(es) the workers had started outside their process groups (setsid, "
                 "daemons), which would have outlived the job: " +
                 list);
    events_.record(event::kEscapedKilled,
                   {{"processes", escaped}, {"restart_count", round_.attempt}});
  }
  logs_.end_attempt();
  if (ending_.exit_after_stop) {
    finish(*ending_.exit_after_stop);
    return;
  }
  if (is_failure(ending_.cause) && job_.watching() && job_.published() && !job_.failure()) {
    // The record that holds (ours, or another node's a moment earlier) is a round trip away:
    // every node must decide from the same one.
    ending_.awaiting_record = true;
    record_timer_.expires_after(kRecordWait);
    record_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || !ending_.awaiting_record) return;
      ending_.awaiting_record = false;
      DDP_LOG_WARN("the job-wide failure record did not arrive; deciding from this node alone");
      decide_now();
    });
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
  s.in_place = recovery_.enabled() && state_ == State::kHealthy && group_.running_count() > 0;
  s.restarts_spent = round_.restarts_spent;
  s.max_restarts = options_.config.max_restarts;
  s.job_can_restart = ending_.blocker.value_or("").empty();
  return s;
}

void Agent::decide_now() {
  if (ending_.awaiting_record || state_ != State::kStopping) return;
  const Decision d = decide(situation());
  if (d.action == Decision::Action::kRestart && !ending_.blocker &&
      round_.info.group_world_size > 1 && !job_.store_gone()) {
    // A restart is left by the count; whether the job can still take one is the rendezvous's
    // to say (a static node that finished never comes back), and asking takes the store.
    if (check_thread_.joinable()) check_thread_.join();
    check_thread_ = std::thread([this, generation = round_.generation] {
      std::string blocker;
      try {
        blocker = rendezvous_.restart_blocker();
      } catch (const std::exception& e) {
        // The store did not answer: the restart's rendezvous will say what is wrong.
        DDP_LOG_DEBUG(std::string("could not ask whether the job can restart: ") + e.what());
      }
      asio::post(io_, [this, generation, blocker] {
        if (generation != round_.generation || state_ != State::kStopping) return;
        ending_.blocker = blocker;
        decide_now();
      });
    });
    return;
  }
  apply(d);
}

void Agent::apply(const Decision& d) {
  const auto& root = job_.failure();
  const std::string of_max = " of " + std::to_string(options_.config.max_restarts);
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
        // Another node's failure: the same count every node keeps, nothing stopped here.
        round_.restarts_spent = d.restarts_spent;
        events_.record(event::kRestart, {{"restarts_spent", round_.restarts_spent},
                                         {"failed_rank", root ? root->rank : -1},
                                         {"failed_node", root ? root->group_rank : -1},
                                         {"in_place", true}});
        DDP_LOG_WARN("the job failed on another node (" + (root ? root->describe() : "") +
                     "); re-forming in place, restart " + std::to_string(round_.restarts_spent) +
                     of_max);
      }
      recovery_.begin(reason, round_.attempt);
      events_.record(
          event::kRecoveryStarted,
          {{"reason", reason}, {"round", round_.attempt}, {"pids", group_.running_pids()}});
      DDP_LOG_INFO("membership changed (" + reason + "); keeping the workers (pids " +
                   group_.running_pids() + ") and re-forming the group in place");
      hangs_.end();
      // The failure record of the round being left means nothing in the next one.
      job_.stop();
      round_.reform =
          ending_.cause == EndCause::kClaim ? Reform::kClaim
          : ending_.cause == EndCause::kNodeLost || ending_.cause == EndCause::kStoreSilent
              ? Reform::kLoss
              : Reform::kNone;
      start_round();
      return;
    }
    case Decision::Action::kRestart: {
      round_.restarts_spent = d.restarts_spent;
      const auto notice = restart_notice(root, ending_.failures, round_.restarts_spent,
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
    finish(128 + agent_signal_.value_or(ending_.stop_signal));
    return;
  }
  if (!is_failure(cause)) {
    finish(1);  // the store is lost (said when it was): nothing to restart with
    return;
  }
  GiveUpFacts facts;
  facts.root = job_.failure();
  facts.failures = ending_.failures;
  facts.restart_impossible = d.restart_impossible;
  facts.restarts_left = options_.config.max_restarts - round_.restarts_spent;
  facts.blocker = ending_.blocker.value_or("");
  facts.program = options_.config.program;
  facts.host = options_.host;
  const GiveUpReport report = give_up_report(facts);
  for (const auto& line : report.errors) DDP_LOG_ERROR(line);
  if (!report.summary.empty()) emit(report.summary);
  finish(report.exit_status);
}

void Agent::publish_failure(rendezvous::FailureRecord record) {
  const std::string kind = record.kind;
  const int rank = record.rank;
  if (!job_.publish(std::move(record))) return;
  events_.record(event::kFailurePublished, {{"kind", kind}, {"rank", rank}});
}

void Agent::note_failure(const std::string& kind, int rank) {
  if (ending_.noted) return;
  ending_.noted = true;
  events_.record(event::kFailure,
                 {{"kind", kind}, {"rank", rank}, {"restart_count", round_.attempt}});
}

void Agent::stop_then_finish(int exit_status) {
  recovery_.abandon();
  if (group_.running_count() == 0) {
    finish(exit_status);
    return;
  }
  state_ = State::kHealthy;  // the workers kept through an in-place re-form run: stop them
  ending_.exit_after_stop = exit_status;
  end_attempt(EndCause::kSignal, agent_signal_.value_or(SIGTERM));
}

void Agent::finish(int exit_status) {
  if (state_ == State::kExiting || state_ == State::kDone) return;
  state_ = State::kExiting;
  exit_status_ = exit_status;
  group_.cancel_stop();
  hangs_.end();
  record_timer_.cancel();
  loss_window_timer_.cancel();
  // A record this node published must be out before it leaves (or it would take it along).
  // After success the watch goes on through the exit barrier: a failure elsewhere while this
  // node waits there is the job's, and this node's exit says so (on_job_failure).
  auto watch = job_.release(/*keep_watching=*/exit_status == 0);
  rendezvous_.watch([](rendezvous::MembershipChange) {});
  if (exit_thread_.joinable()) exit_thread_.join();
  // The store host may wait here for the other nodes: off the loop, so signals still work.
  exit_thread_ = std::thread([this, succeeded = exit_status == 0, watch = std::move(watch),
                              store_gone = job_.store_gone()] {
    if (watch) watch->flush(std::chrono::seconds(2));
    if (store_gone) {
      // Nothing to leave: the store is gone (and reconnecting would only wait out a timeout).
    } else if (succeeded) {
      rendezvous_.shutdown();
      // The barrier is over, so every node that failed has recorded it; its record may still
      // be on its way to this node's watch, which must not lose the race to done().
      if (auto record = watch ? watch->read_record() : std::nullopt;
          record && record->is_failure()) {
        asio::post(io_, [this, record = *record] { job_.hear(record); });
      }
    } else {
      rendezvous_.shutdown_after_failure();
    }
    asio::post(io_, [this] { done(); });
  });
}

void Agent::done() {
  state_ = State::kDone;
  if (const std::string summary = recovery_.summary(); !summary.empty()) DDP_LOG_INFO(summary);
  events_.record(event::kFinish,
                 {{"exit_code", exit_status_}, {"restarts_spent", round_.restarts_spent}});
  if (signals_) signals_->cancel();
  busy_.reset();
  io_.stop();
}

void Agent::emit(const std::string& text) const {
  if (options_.notice_console != nullptr) {
    options_.notice_console->write(text);
    return;
  }
  ssize_t ignored = ::write(options_.notice_fd, text.data(), text.size());
  (void)ignored;
}

}  // namespace ddp::launcher
