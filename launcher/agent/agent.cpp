#include "launcher/agent/agent.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <csignal>

#include "common/env_names.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "launcher/agent/attempt_outcome.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {
namespace asio = boost::asio;

namespace {

// How long after SIGKILL a worker that is still there is called unkillable (at least).
constexpr std::chrono::milliseconds kUnkillableGrace{2000};

bool ignored_at_start(int sig) {
  struct sigaction current {};
  return ::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

const char* change_name(rendezvous::MembershipChange change) {
  switch (change) {
    case rendezvous::MembershipChange::kNodeWaiting:
      return "node_waiting";
    case rendezvous::MembershipChange::kNodeLost:
      return "node_lost";
    case rendezvous::MembershipChange::kStoreLost:
      break;
  }
  return "store_lost";
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
      job_link_(options_.config.local_addr.value_or(options_.host), options_.config.peer_tolerance),
      record_timer_(io),
      store_cause_timer_(io),
      loss_window_timer_(io),
      hang_timer_(io),
      recovery_timer_(io) {}

Agent::~Agent() {
  if (rendezvous_thread_.joinable()) rendezvous_thread_.join();
  if (restart_check_thread_.joinable()) restart_check_thread_.join();
  if (exit_thread_.joinable()) exit_thread_.join();
}

int Agent::run() {
  if (options_.handle_signals) install_signals();
  if (sets_default_omp_threads(options_.config, options_.env)) {
    DDP_LOG_INFO(
        "setting OMP_NUM_THREADS=1 for each worker (it was unset and nproc_per_node > 1); "
        "set it yourself to tune performance");
  }
  try {
    start_hang_watch();
  } catch (const std::exception& e) {
    DDP_LOG_ERROR(std::string("cannot start hang detection: ") + e.what());
    return 1;
  }
  busy_.emplace(io_.get_executor());
  asio::post(io_, [this] { start_rendezvous(); });
  io_.run();
  if (rendezvous_thread_.joinable()) rendezvous_thread_.join();
  if (restart_check_thread_.joinable()) restart_check_thread_.join();
  if (exit_thread_.joinable()) exit_thread_.join();
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
  if (state_ == State::kExiting) {
    // The workers are gone; only the exit barrier (or closing the rendezvous) is left.
    DDP_LOG_INFO("received " + signal_name(sig) + " while leaving the rendezvous; exiting now");
    if (!agent_signal_) {
      agent_signal_ = sig;
      exit_status_ = 128 + sig;
    }
    rendezvous_.interrupt();
    return;
  }
  if (agent_signal_) {
    // A second signal: the user is done waiting for the grace period.
    DDP_LOG_INFO("received " + signal_name(sig) + " again; killing the workers now (pids " +
                 running_pids() + ")");
    group_.signal_all(SIGKILL);
    return;
  }
  agent_signal_ = sig;
  int exit_status = 128 + sig;
  switch (state_) {
    case State::kInit:
    case State::kRendezvous:
      DDP_LOG_INFO("received " + signal_name(sig) + " during rendezvous; shutting down");
      // An in-place re-form keeps workers running through the rendezvous: they go too.
      group_.signal_all(sig);
      // The rendezvous thread returns (RendezvousClosed) and on_rendezvous* finishes.
      rendezvous_.shutdown_after_failure();
      break;
    case State::kHealthy: {
      DDP_LOG_INFO("received " + signal_name(sig) + "; forwarding it to the workers (pids " +
                   running_pids() + ")");
      // The other nodes' workers would wait for this node's in their collectives: stop them.
      rendezvous::FailureRecord record;
      record.kind = "agent_signal";
      record.signal = sig;
      record.pid = static_cast<int>(::getpid());
      record.message = signal_name(sig);
      publish_failure(record);
      begin_stop(sig, StopReason::kSignal, [this, exit_status] { finish(exit_status); });
      break;
    }
    case State::kStopping:
      DDP_LOG_INFO("received " + signal_name(sig) +
                   " while stopping the workers; forwarding it (pids " + running_pids() + ")");
      group_.signal_all(sig);
      after_stop_ = [this, exit_status] { finish(exit_status); };
      stop_reason_ = StopReason::kSignal;
      if (awaiting_record_) {
        // The workers are already stopped and this node waits for the failure record before
        // deciding on a restart: there is nothing left to decide.
        awaiting_record_ = false;
        record_timer_.cancel();
        finish(exit_status);
      }
      break;
    case State::kExiting:
    case State::kDone:
      break;
  }
}

std::string Agent::running_pids() const {
  return group_.running_pids();
}

void Agent::start_rendezvous() {
  state_ = State::kRendezvous;
  if (rendezvous_thread_.joinable()) rendezvous_thread_.join();
  // next_rendezvous() blocks (multi-node rounds take seconds); the loop keeps serving signals.
  rendezvous_thread_ = std::thread([this] {
    try {
      auto info = rendezvous_.next_rendezvous();
      asio::post(io_, [this, info] { on_rendezvous(info); });
    } catch (const std::exception& e) {
      asio::post(io_, [this, message = std::string(e.what())] { on_rendezvous_error(message); });
    }
  });
}

void Agent::on_rendezvous(const rendezvous::RendezvousInfo& info) {
  if (state_ == State::kExiting || state_ == State::kDone) return;
  if (agent_signal_) {
    stop_then_finish(128 + *agent_signal_);
    return;
  }
  // The same nodes as in the round just before: a re-form that changed nothing. A node whose
  // last round is older was left out of the rounds between (found lost, then back): a real
  // change, to it as to the others, who counted it out and in again.
  const bool same_members = reform_ == Reform::kClaim && !info.members.empty() &&
                            info.members == members_ && info.round == members_round_ + 1;
  reform_ = Reform::kNone;
  members_ = info.members;
  members_round_ = info.round;
  if (same_members && !spend_restart_for_same_members()) return;
  attempt_ = static_cast<int>(info.round);
  events_.record(event::kRendezvous, {{"round", info.round},
                                      {"group_rank", info.group_rank},
                                      {"group_world_size", info.group_world_size},
                                      {"world_size", info.world_size},
                                      {"master_addr", info.master_addr},
                                      {"master_port", info.master_port},
                                      {"restart_count", attempt_},
                                      {"restarts_spent", restart_count_}});
  DDP_LOG_DEBUG("rendezvous round " + std::to_string(info.round) + ": group rank " +
                std::to_string(info.group_rank) + " of " + std::to_string(info.group_world_size) +
                ", world size " + std::to_string(info.world_size) + ", master " + info.master_addr +
                ":" + std::to_string(info.master_port));
  rendezvous_.watch([this](rendezvous::MembershipChange change) {
    asio::post(io_, [this, change] { on_membership_change(change); });
  });
  if (recovering_) {
    resume_workers(info);
    return;
  }
  spawn_workers(info);
}

bool Agent::spend_restart_for_same_members() {
  const std::string why =
      "the group re-formed after a membership change with the same nodes as before (a "
      "member's workers failed, or the change was not real)";
  const auto outcome =
      decide_attempt(AttemptEnd::kSameMembers, restart_count_, options_.config.max_restarts);
  if (outcome.action == AttemptOutcome::Action::kGiveUp) {
    DDP_LOG_ERROR(why + "; no restart is left (max_restarts " +
                  std::to_string(options_.config.max_restarts) + "); giving up");
    events_.record(event::kRendezvousFailed, {{"message", why}});
    stop_then_finish(1);  // workers kept through an in-place re-form are stopped first
    return false;
  }
  restart_count_ = outcome.restarts_spent;
  DDP_LOG_WARN(why + "; counting it as restart " + std::to_string(restart_count_) + " of " +
               std::to_string(options_.config.max_restarts));
  events_.record(event::kRestart, {{"restarts_spent", restart_count_}, {"reason", "same_members"}});
  return true;
}

void Agent::on_rendezvous_error(const std::string& message) {
  if (agent_signal_) {
    stop_then_finish(128 + *agent_signal_);
    return;
  }
  DDP_LOG_ERROR("rendezvous failed: " + message);
  events_.record(event::kRendezvousFailed, {{"message", message}});
  stop_then_finish(1);
}

void Agent::on_membership_change(rendezvous::MembershipChange change) {
  events_.record(event::kMembershipChange, {{"change", change_name(change)}});
  if (change == rendezvous::MembershipChange::kStoreLost) {
    // The watcher's own error ("receive failed: Connection timed out") says silence or death.
    const rendezvous::ChangeReason reason = rendezvous_.last_change();
    std::string watcher = "the rendezvous watcher lost its connection";
    if (!reason.text.empty()) watcher += ": " + reason.text;
    if (!job_link_.watching()) {
      on_store_lost(watcher, reason.loss);
      return;
    }
    // The job watch's connection fails the same way at about the same moment, and its error
    // says how; a death still reaches it at once, so this adds nothing to one.
    store_cause_timer_.expires_after(std::chrono::milliseconds(500));
    store_cause_timer_.async_wait(
        [this, watcher, loss = reason.loss](boost::system::error_code ec) {
          if (!ec) on_store_lost(watcher, loss);
        });
    return;
  }
  if (state_ != State::kHealthy) return;  // a coming rendezvous sees the new membership
  if (change == rendezvous::MembershipChange::kNodeLost) note_failure("node_lost", -1);
  if (loss_window_open_ && change == rendezvous::MembershipChange::kNodeLost) {
    // The worker failure just before was the lost node's doing: re-form, spend nothing.
    loss_window_open_ = false;
    loss_window_timer_.cancel();
    const auto first = static_cast<std::ptrdiff_t>(std::min(loss_window_first_, failures_.size()));
    if (first < static_cast<std::ptrdiff_t>(failures_.size())) {
      const auto& failure = failures_[static_cast<size_t>(first)];
      DDP_LOG_WARN("rank " + std::to_string(failure.rank) + " failed (" +
                   failure.status.describe() +
                   ") just before another node was found lost: taken for the loss's doing, no "
                   "restart spent");
      events_.record(event::kFailureFromLoss, {{"rank", failure.rank}});
    }
    failures_.erase(failures_.begin() + first, failures_.end());
  }
  if (can_recover_in_place()) {
    recover_in_place(change_name(change));
    return;
  }
  DDP_LOG_INFO(std::string("membership changed (") + change_name(change) +
               "); restarting the workers without spending a restart (pids " + running_pids() +
               ")");
  const Reform reform =
      change == rendezvous::MembershipChange::kNodeLost ? Reform::kLoss : Reform::kClaim;
  begin_stop(SIGTERM, StopReason::kMembership, [this, reform] {
    reform_ = reform;
    start_rendezvous();
  });
}

void Agent::spawn_workers(const rendezvous::RendezvousInfo& info) {
  ++generation_;
  workers_.clear();
  workers_.resize(static_cast<size_t>(options_.config.nproc_per_node));
  group_.reset(workers_.size());
  begin_round(info);
  // Slot index == local rank, here and in group_, started or not.
  for (size_t index = 0; index < workers_.size(); ++index) {
    workers_[index].local_rank = static_cast<int>(index);
  }
  for (size_t index = 0; index < workers_.size(); ++index) {
    if (!spawn_slot(index)) return;
  }
  events_.record(event::kWorkersStarted,
                 {{"count", workers_.size()}, {"restart_count", attempt_}, {"round", info.round}});
  watch_hangs();
}

void Agent::watch_hangs() {
  if (!hang_) return;
  std::vector<std::pair<int, int>> rank_pids;
  for (const auto& slot : workers_) rank_pids.emplace_back(slot.rank, group_.pid(slot.local_rank));
  hang_->begin_attempt([this] { return rendezvous_.connect_job_store(); }, info_.round,
                       info_.group_rank, info_.group_world_size, rank_pids);
}

void Agent::begin_round(const rendezvous::RendezvousInfo& info) {
  // Watching (and able to publish) before any worker runs: a spawn failure is a failure too.
  start_job_watch(info);
  failures_.clear();
  failure_noted_ = false;
  restart_blocker_.reset();
  stop_signal_sent_ = 0;
  declare_worker_namespace();
  const auto attempt_dir = options_.run_dir / ("attempt_" + std::to_string(attempt_));
  logs_.begin_attempt(options_.config.nproc_per_node, info.rank_offset,
                      options_.write_log_files ? std::optional(attempt_dir) : std::nullopt);
  state_ = State::kHealthy;
}

void Agent::declare_worker_namespace() {
  // The attempt number workers see is the rendezvous round, not restarts spent: every node
  // of a round agrees on it (a membership change re-forms the group on all nodes while only
  // the failing node spends a restart), so /worker/attempt_<n> keys are never shared by two
  // different groups. On one node it equals the restarts spent.
  if (!options_.set_worker_namespace) return;
  try {
    options_.set_worker_namespace(env::kWorkerPrefixBase + std::to_string(attempt_) + "/");
  } catch (const Error& e) {
    // The workers' PyTorch clients will be refused; they fail and the job restarts.
    DDP_LOG_WARN(std::string("could not declare the workers' store namespace: ") + e.what());
  }
}

bool Agent::spawn_slot(size_t index) {
  const auto& config = options_.config;
  auto attempt_dir = options_.run_dir / ("attempt_" + std::to_string(attempt_));
  AttemptInfo attempt{info_, attempt_, rendezvous_.run_id(), options_.use_agent_store};
  auto& slot = workers_[index];
  slot.rank = info_.rank_offset + slot.local_rank;
  slot.hello = false;
  slot.respawn_on_exit = false;
  slot.hang.clear();
  slot.culprit = false;
  slot.dumping = false;
  auto rank_dir = attempt_dir / std::to_string(slot.local_rank);
  std::filesystem::create_directories(rank_dir);
  slot.error_file = (rank_dir / "error.json").string();
  std::filesystem::remove(slot.error_file);

  WorkerProcessSpec spec;
  spec.local_rank = slot.local_rank;
  spec.argv = build_worker_argv(config, options_.env, slot.local_rank);
  spec.env = build_worker_env(config, options_.env, attempt, slot.local_rank, slot.error_file);
  if (index < options_.bindings.size()) spec.binding = options_.bindings[index];
  if (hang_) {
    for (auto& var : hang_->worker_env()) spec.env.push_back(var);
  }
  slot.link.reset();
  if (config.in_place_recovery) {
    slot.link = std::make_unique<RecoveryLink>(
        io_, [this, index, generation = generation_](const recovery::Message& message) {
          if (generation != generation_ || index >= workers_.size()) return;
          on_worker_message(index, message);
        });
    spec.channel_fd = slot.link->child_fd();
    spec.env.push_back(std::string(recovery::kEnvFd) + "=" + std::to_string(recovery::kChildFd));
  }
  WorkerCallbacks callbacks;
  int local_rank = slot.local_rank;
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
    record.exit_code = 127;
    record.message = e.what();
    record.final = true;  // this node ends here: the others must not wait for it
    publish_failure(record);
    note_failure("spawn", slot.rank);
    // 127: what a shell reports for a command it could not run.
    begin_stop(SIGTERM, StopReason::kFailure, [this] { finish(127); });
    return false;
  }
  if (slot.link) slot.link->close_child_end();
  events_.record(event::kWorkerStart, {{"rank", slot.rank},
                                       {"local_rank", slot.local_rank},
                                       {"pid", pid},
                                       {"restart_count", attempt_}});
  DDP_LOG_DEBUG("started rank " + std::to_string(slot.rank) + " (local_rank " +
                std::to_string(slot.local_rank) + ") as pid " + std::to_string(pid));
  return true;
}

namespace {
// How long a worker failure in an elastic job waits for a loss claim (see loss_window_timer_):
// a loss is claimed within a store round trip of a death (survivors of a killed agent hear of
// it in about 5 ms, docs/benchmarks.md), so this is ample, and it keeps a failure with no
// loss behind it under issue 27's 0.3 s from a killed worker to every survivor.
constexpr std::chrono::milliseconds kLossClaimWindow{200};
}  // namespace

void Agent::on_worker_exit(size_t index, ExitStatus status) {
  auto& slot = workers_.at(index);
  const int pid = group_.pid(index);
  logs_.flush(slot.local_rank);
  if (hang_) hang_->worker_exited(pid);
  events_.record(event::kWorkerExit, {{"rank", slot.rank},
                                      {"local_rank", slot.local_rank},
                                      {"pid", pid},
                                      {"exit_code", status.exit_code},
                                      {"signal", status.signal},
                                      {"restart_count", attempt_}});
  DDP_LOG_DEBUG("rank " + std::to_string(slot.rank) + " (pid " + std::to_string(pid) +
                ") exited: " + status.describe());
  if (replace_in_new_round(index, status)) return;
  if (state_ == State::kHealthy) {
    if (!status.success()) {
      note_failure(!slot.hang.empty() ? "hang" : status.signal != 0 ? "signal" : "exit", slot.rank);
      record_failure(slot, status, /*must_report=*/true);
      if (loss_window_open_) return;  // the first failure's window decides for both
      loss_window_first_ = failures_.size() - 1;
      const bool elastic = options_.config.rdzv_backend.value_or("") == "c10d";
      if (elastic && info_.group_world_size > 1 && slot.hang.empty() && !can_recover_in_place()) {
        loss_window_open_ = true;
        loss_window_timer_.expires_after(kLossClaimWindow);
        loss_window_timer_.async_wait([this](boost::system::error_code ec) {
          if (ec || !loss_window_open_) return;
          loss_window_open_ = false;
          if (state_ == State::kHealthy) act_on_worker_failure();
        });
        return;
      }
      act_on_worker_failure();
    } else if (group_.running_count() == 0) {
      state_ = State::kStopping;
      after_stop_ = [this] { finish(0); };
      complete_stop();
    }
    return;
  }
  if (state_ == State::kStopping) {
    if (!status.success()) record_failure(slot, status, /*must_report=*/false);
    if (group_.running_count() == 0) complete_stop();
  }
}

void Agent::act_on_worker_failure() {
  // The first failure of this attempt's window is the one published (the root cause).
  const auto& failure = failures_.at(std::min(loss_window_first_, failures_.size() - 1));
  const auto it = std::find_if(workers_.begin(), workers_.end(), [&](const auto& s) {
    return group_.pid(s.local_rank) == failure.pid;
  });
  if (it != workers_.end()) publish_failure(worker_record(*it, failure.status));
  // Other hung ranks still printing their stacks are not cut short: the dump grace
  // (hang_timer_) or the last of them to exit stops the group.
  const bool dumps_pending = std::any_of(workers_.begin(), workers_.end(), [this](const auto& s) {
    return group_.running(s.local_rank) && s.dumping;
  });
  if (!dumps_pending) begin_stop(SIGTERM, StopReason::kFailure, [this] { after_failure(); });
}

void Agent::record_failure(const WorkerSlot& slot, ExitStatus status, bool must_report) {
  WorkerFailure failure;
  failure.rank = slot.rank;
  failure.local_rank = slot.local_rank;
  failure.pid = group_.pid(slot.local_rank);
  failure.status = status;
  failure.observed = std::chrono::system_clock::now();
  failure.error_file = slot.error_file;
  failure.error = read_error_file(slot.error_file);
  failure.hang = slot.hang;
  failure.culprit = slot.culprit;
  if (status.signal != 0) failure.output_tail = logs_.stderr_tail(slot.local_rank);
  if (!failure.error && slot.culprit) {
    // A hung worker rarely records why it died: the agent does, so the error file (and
    // tools that read it) say "hang" with the stack it printed.
    std::string stack;
    for (const auto& line : failure.output_tail) stack += line + "\n";
    if (write_error_file(slot.error_file, "hang: " + slot.hang, stack)) {
      failure.error = read_error_file(slot.error_file);
      failure.output_tail.clear();  // it is the error file's traceback now
    }
  }
  // While stopping, a worker dying of the signal we sent (or SIGKILL after the grace
  // period) did not fail on its own; anything else did, and belongs in the summary.
  int sent = stop_signal_sent_;
  bool our_signal = status.signal == sent || status.signal == SIGKILL ||
                    (status.signal == 0 && status.exit_code == 128 + sent);
  if (must_report || failure.error || !our_signal || !failure.hang.empty()) {
    failures_.push_back(std::move(failure));
  }
}

void Agent::note_failure(const std::string& kind, int rank) {
  if (failure_noted_) return;
  failure_noted_ = true;
  events_.record(event::kFailure, {{"kind", kind}, {"rank", rank}, {"restart_count", attempt_}});
}

void Agent::begin_stop(int sig, StopReason reason, std::function<void()> then) {
  const char* reason_name = reason == StopReason::kFailure       ? "failure"
                            : reason == StopReason::kSignal      ? "signal"
                            : reason == StopReason::kMembership  ? "membership"
                            : reason == StopReason::kStoreSilent ? "store_silent"
                            : reason == StopReason::kStoreLost   ? "store_lost"
                                                                 : "other";
  events_.record(event::kStopping,
                 {{"reason", reason_name}, {"signal", sig}, {"pids", running_pids()}});
  state_ = State::kStopping;
  stop_reason_ = reason;
  if (hang_) hang_->end_attempt();
  hang_timer_.cancel();
  after_stop_ = std::move(then);
  stop_signal_sent_ = sig;
  group_.stop(sig, [this](const std::vector<UnkillableWorker>& gone) { on_unkillable(gone); });
  if (group_.running_count() == 0) {
    asio::post(io_, [this, generation = generation_] {
      if (generation == generation_ && state_ == State::kStopping && group_.running_count() == 0) {
        complete_stop();
      }
    });
  }
}

void Agent::on_unkillable(const std::vector<UnkillableWorker>& gone) {
  for (const auto& worker : gone) {
    auto& slot = workers_.at(worker.index);
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
    record_failure(slot, ExitStatus{0, SIGKILL}, /*must_report=*/true);
    auto record = worker_record(slot, ExitStatus{0, SIGKILL});
    record.kind = "unkillable";
    record.message = slot.hang;
    publish_failure(record);
  }
  if (group_.running_count() == 0) complete_stop();
}

void Agent::complete_stop() {
  group_.cancel_stop();
  events_.record(event::kWorkersStopped, {{"restart_count", attempt_}});
  group_.release_all();
  if (const auto escaped = group_.stop_escaped(); !escaped.empty()) {
    std::string list;
    for (const auto& process : escaped) list += (list.empty() ? "" : ", ") + process;
    DDP_LOG_WARN("killed " + std::to_string(escaped.size()) +
                 " process(es) the workers had started outside their process groups (setsid, "
                 "daemons), which would have outlived the job: " +
                 list);
    events_.record(event::kEscapedKilled, {{"processes", escaped}, {"restart_count", attempt_}});
  }
  logs_.end_attempt();
  auto then = std::move(after_stop_);
  after_stop_ = nullptr;
  if (then) then();
}

void Agent::decide_after_failure() {
  if (agent_signal_) {
    // A signal came after the workers were stopped (while the failure record or the restart
    // check was awaited): the user ends the job, so no restart is spent.
    finish(128 + *agent_signal_);
    return;
  }
  const auto& record = job_link_.failure();
  const auto end = record && !record->restartable() ? AttemptEnd::kNodeGone
                   : record                         ? AttemptEnd::kJobFailure
                                                    : AttemptEnd::kWorkerFailure;
  const auto max = options_.config.max_restarts;
  if (!restart_blocker_ && info_.group_world_size > 1 && !store_lost_ &&
      decide_attempt(end, restart_count_, max).action == AttemptOutcome::Action::kRestart) {
    // A restart is left by the count; whether the job can still take one is the rendezvous's
    // to say (a static node that finished never comes back), and asking takes the store.
    ask_restart_blocker();
    return;
  }
  const auto outcome = decide_attempt(
      end, restart_count_, max,
      restart_blocker_.value_or("").empty() ? JobRestart::kPossible : JobRestart::kImpossible);
  if (failures_.empty() && !record) {
    // Hung ranks that ended on their own (exit 0) while being stopped: still a failed
    // attempt, and it spends a restart like any other.
    if (outcome.action == AttemptOutcome::Action::kRestart) {
      restart_count_ = outcome.restarts_spent;
      DDP_LOG_WARN("worker group stopped after a hang; restarting, attempt " +
                   std::to_string(restart_count_) + " of " +
                   std::to_string(options_.config.max_restarts));
      events_.record(event::kRestart, {{"restarts_spent", restart_count_}, {"reason", "hang"}});
      start_rendezvous();
    } else {
      if (outcome.restart_impossible) log_cannot_restart("the worker group stopped after a hang");
      finish(1);
    }
    return;
  }
  if (record) {
    // Every node decides from the same record and the same count, so they agree.
    const auto& root = *record;
    if (outcome.action == AttemptOutcome::Action::kRestart) {
      restart_count_ = outcome.restarts_spent;
      DDP_LOG_WARN("the job failed (" + root.describe() + "); restarting every node, attempt " +
                   std::to_string(restart_count_) + " of " +
                   std::to_string(options_.config.max_restarts));
      events_.record(event::kRestart, {{"restarts_spent", restart_count_},
                                       {"failed_rank", root.rank},
                                       {"failed_node", root.group_rank},
                                       {"exit_code", root.exit_code},
                                       {"signal", root.signal}});
      start_rendezvous();
      return;
    }
    if (!root.restartable()) {
      DDP_LOG_ERROR("the job cannot go on: node " + std::to_string(root.group_rank) +
                    " is gone and a static job cannot replace it (" + root.describe() + ")");
    }
    if (outcome.restart_impossible) log_cannot_restart("the job failed (" + root.describe() + ")");
    emit(format_job_failure_summary(options_.config.program, options_.host, failures_,
                                    root_cause_of(root)));
    finish(root.shell_status());
    return;
  }
  const auto& root = failures_.at(root_cause_index(failures_));
  if (outcome.action == AttemptOutcome::Action::kRestart) {
    restart_count_ = outcome.restarts_spent;
    DDP_LOG_WARN("worker group failed (rank " + std::to_string(root.rank) + ": " +
                 (root.hang.empty() ? "" : "hung, ") + root.status.describe() +
                 "); restarting, attempt " + std::to_string(restart_count_) + " of " +
                 std::to_string(options_.config.max_restarts));
    events_.record(event::kRestart, {{"restarts_spent", restart_count_},
                                     {"failed_rank", root.rank},
                                     {"exit_code", root.status.exit_code},
                                     {"signal", root.status.signal}});
    start_rendezvous();
    return;
  }
  if (outcome.restart_impossible) {
    log_cannot_restart("worker group failed (rank " + std::to_string(root.rank) + ": " +
                       root.status.describe() + ")");
  }
  emit(format_failure_summary(options_.config.program, options_.host, failures_));
  finish(root.status.shell_status());
}

void Agent::ask_restart_blocker() {
  if (restart_check_thread_.joinable()) restart_check_thread_.join();
  restart_check_thread_ = std::thread([this, generation = generation_] {
    std::string blocker;
    try {
      blocker = rendezvous_.restart_blocker();
    } catch (const std::exception& e) {
      // The store did not answer: the restart's rendezvous will say what is wrong.
      DDP_LOG_DEBUG(std::string("could not ask whether the job can restart: ") + e.what());
    }
    asio::post(io_, [this, generation, blocker] {
      if (generation != generation_ || state_ != State::kStopping) return;
      restart_blocker_ = blocker;
      decide_after_failure();
    });
  });
}

void Agent::log_cannot_restart(const std::string& what) const {
  const int left = options_.config.max_restarts - restart_count_;
  DDP_LOG_ERROR(what + " and cannot restart (" + std::to_string(left) + " restart" +
                (left == 1 ? "" : "s") + " left, none spent): " + restart_blocker_.value_or(""));
}

void Agent::finish(int exit_status) {
  if (state_ == State::kExiting || state_ == State::kDone) return;
  state_ = State::kExiting;
  exit_status_ = exit_status;
  group_.cancel_stop();
  hang_timer_.cancel();
  record_timer_.cancel();
  store_cause_timer_.cancel();
  loss_window_timer_.cancel();
  // A record this node published must be out before it leaves (or it would take it along).
  // After success the watch goes on through the exit barrier: a failure elsewhere while this
  // node waits there is the job's, and this node's exit says so (on_job_failure).
  auto watch = job_link_.release(/*keep_watching=*/exit_status == 0);
  if (hang_) hang_->end_attempt();
  rendezvous_.watch([](rendezvous::MembershipChange) {});
  if (exit_thread_.joinable()) exit_thread_.join();
  // The store host may wait here for the other nodes: off the loop, so signals still work.
  exit_thread_ = std::thread([this, succeeded = exit_status == 0, watch = std::move(watch),
                              generation = generation_, store_gone = store_lost_] {
    if (watch) watch->flush(std::chrono::seconds(2));
    if (store_gone) {
      // Nothing to leave: the store is gone (and reconnecting would only wait out a timeout).
    } else if (succeeded) {
      rendezvous_.shutdown();
      // The barrier is over, so every node that failed has recorded it; its record may still
      // be on its way to this node's watch, which must not lose the race to done().
      if (auto record = watch ? watch->read_record() : std::nullopt;
          record && record->is_failure()) {
        asio::post(io_,
                   [this, generation, record = *record] { on_job_failure(generation, record); });
      }
    } else {
      rendezvous_.shutdown_after_failure();
    }
    asio::post(io_, [this] { done(); });
  });
}

void Agent::done() {
  state_ = State::kDone;
  if (!recoveries_.empty()) {
    DDP_LOG_INFO(std::to_string(recoveries_.size()) + " in-place recover" +
                 (recoveries_.size() == 1 ? "y" : "ies") + " (phase times since noticed):\n" +
                 recovery_summary());
  }
  events_.record(event::kFinish, {{"exit_code", exit_status_}, {"restarts_spent", restart_count_}});
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
