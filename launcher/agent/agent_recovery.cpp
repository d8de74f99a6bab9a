// The agent's side of in-place recovery (docs/recovery.md). With --in_place_recovery a
// membership change (a node lost or joining, a failure on another node) does not stop this
// node's workers: they are told to abort their collectives, the agent re-joins the rendezvous
// with them running, and then tells each its new rank over its recovery channel
// (recovery_link.hpp). A worker that cannot take part (it died meanwhile, never spoke the
// protocol, or does not re-form within --recovery_timeout) is started afresh in the new round
// and gets the training state from the survivors. Phase times go to the events file.
#include <algorithm>
#include <csignal>

#include "common/log.hpp"
#include "launcher/agent/agent.hpp"
#include "launcher/output/event_names.hpp"

namespace ddp::launcher {

namespace {

using Clock = std::chrono::steady_clock;

int64_t ms_between(Clock::time_point from, const std::optional<Clock::time_point>& to) {
  if (!to) return -1;
  return std::chrono::duration_cast<std::chrono::milliseconds>(*to - from).count();
}

}  // namespace

bool Agent::can_recover_in_place() const {
  return options_.config.in_place_recovery && state_ == State::kHealthy &&
         group_.running_count() > 0;
}

void Agent::recover_in_place(const std::string& reason) {
  recovery_ = Recovery{};
  recovery_.reason = reason;
  recovery_.from_round = attempt_;
  recovery_.noticed = Clock::now();
  state_ = State::kRendezvous;
  recovering_ = true;
  events_.record(event::kRecoveryStarted,
                 {{"reason", reason}, {"round", attempt_}, {"pids", running_pids()}});
  DDP_LOG_INFO("membership changed (" + reason + "); keeping the workers (pids " + running_pids() +
               ") and re-forming the group in place");
  recovery_timer_.cancel();
  if (hang_) hang_->end_attempt();
  hang_timer_.cancel();
  // The failure record of the round being left means nothing in the next one.
  job_link_.stop();
  recovery::Message abort;
  abort.type = std::string(recovery::kAbort);
  abort.set("round", static_cast<int64_t>(attempt_)).set("reason", reason);
  for (auto& slot : workers_) {
    if (group_.running(slot.local_rank) && slot.link) slot.link->send(abort);
  }
  reform_ = reason == "node_lost"      ? Reform::kLoss
            : reason == "node_waiting" ? Reform::kClaim
                                       : Reform::kNone;
  start_rendezvous();
}

recovery::RoundNotice Agent::round_notice(const WorkerSlot& slot) const {
  // Built from the identity a worker started now gets its environment from.
  AttemptInfo attempt{info_, attempt_, rendezvous_.run_id(), options_.use_agent_store};
  return launcher::round_notice(worker_identity(options_.config, attempt, slot.local_rank),
                                attempt_);
}

void Agent::resume_workers(const rendezvous::RendezvousInfo& info) {
  recovering_ = false;
  recovery_.round = static_cast<int64_t>(info.round);
  recovery_.reformed = Clock::now();
  logs_.end_attempt();
  begin_round(info);
  for (size_t index = 0; index < workers_.size(); ++index) {
    auto& slot = workers_[index];
    if (!group_.running(index) && slot.finished) continue;
    if (!group_.running(index)) {
      slot.replaced_round = attempt_;
      if (!spawn_slot(index)) return;
      continue;
    }
    slot.rank = info.rank_offset + slot.local_rank;
    if (!slot.hello) {
      // It never opened its end of the channel: it cannot be told; it is restarted.
      DDP_LOG_WARN("rank " + std::to_string(slot.rank) + " (pid " +
                   std::to_string(group_.pid(index)) +
                   ") never spoke on its recovery channel; restarting it for the new round");
      slot.respawn_on_exit = true;
      group_.signal(index, SIGKILL);
      continue;
    }
    slot.link->send(round_notice(slot).to_message());
  }
  if (group_.running_count() == 0) {
    // Every worker finished its job while the group re-formed: this node is done.
    DDP_LOG_INFO("the workers finished while the group re-formed; nothing to resume");
    finish(0);
    return;
  }
  const auto [kept, restarted] = kept_and_replaced();
  events_.record(event::kWorkersResumed, {{"round", info.round},
                                          {"kept", kept},
                                          {"restarted", restarted},
                                          {"restart_count", attempt_}});
  recovery_timer_.expires_after(options_.config.recovery_timeout);
  recovery_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_recovery_timeout();
  });
  watch_hangs();
}

void Agent::on_worker_message(size_t index, const recovery::Message& message) {
  auto& slot = workers_[index];
  try {
    if (message.type == recovery::kHello) {
      slot.hello = true;
      events_.record(event::kWorkerChannel, {{"rank", slot.rank}, {"pid", group_.pid(index)}});
      return;
    }
    if (message.type == recovery::kAborted) {
      const int64_t from = message.integer("round");
      if (from != recovery_.from_round || recovery_.aborted) return;
      slot.aborted_round = from;
      const bool all =
          std::all_of(workers_.begin(), workers_.end(), [this, from](const WorkerSlot& s) {
            return !group_.running(s.local_rank) || !s.hello || s.aborted_round == from;
          });
      if (all) recovery_.aborted = Clock::now();
      return;
    }
    const int64_t round = message.integer("round");
    if (round != attempt_ || round != recovery_.round) return;
    if (message.type == recovery::kBuilt) {
      slot.built_round = round;
    } else if (message.type == recovery::kJoined) {
      slot.answered_round = round;
      recovery_.step = message.integer("step", -1);
      recovery_.source = static_cast<int>(message.integer("source", -1, INT32_MAX));
      recovery_.state_bytes = message.integer("state_bytes");
      if (all_reached(&WorkerSlot::answered_round, round)) {
        recovery_timer_.cancel();
        recovery_.state_sent = Clock::now();
      }
    } else if (message.type == recovery::kStepped) {
      slot.stepped_round = round;
      if (all_reached(&WorkerSlot::stepped_round, round)) {
        recovery_.first_step = Clock::now();
        report_recovery();
      }
    }
  } catch (const std::exception& e) {
    DDP_LOG_WARN("rank " + std::to_string(slot.rank) + " sent a bad recovery message: " + e.what());
  }
}

bool Agent::all_reached(int64_t WorkerSlot::*field, int64_t round) const {
  return std::all_of(workers_.begin(), workers_.end(),
                     [&](const WorkerSlot& s) { return s.finished || s.*field == round; });
}

bool Agent::replace_in_new_round(size_t index, ExitStatus status) {
  if (!options_.config.in_place_recovery) return false;
  auto& slot = workers_[index];
  if (recovering_ && state_ == State::kRendezvous && status.success()) {
    // It finished its training while the group re-formed: done, not to be started again.
    slot.finished = true;
    group_.release(index);
    return true;
  }
  if (recovering_ && state_ == State::kRendezvous) {
    // Died while the group re-forms (its collectives failed it): started afresh in the round.
    events_.record(
        "recovery_worker_lost",
        {{"rank", slot.rank}, {"exit_code", status.exit_code}, {"signal", status.signal}});
    group_.release(index);
    return true;
  }
  if (state_ != State::kHealthy) return false;
  const bool awaited = recovery_.round == attempt_ && slot.answered_round != attempt_;
  if (!slot.respawn_on_exit && !(awaited && !status.success())) return false;
  // One fresh worker per rank and round: one that fails again fails the group as before
  // (published, a restart spent), instead of being replaced over and over.
  if (!slot.respawn_on_exit && slot.replaced_round == attempt_) return false;
  slot.replaced_round = attempt_;
  // Killed for not answering, or failed before it re-formed: a fresh worker takes its rank.
  group_.release(index);
  spawn_slot(index);
  watch_hangs();
  return true;
}

void Agent::on_recovery_timeout() {
  if (state_ != State::kHealthy) return;
  for (auto& slot : workers_) {
    // Built its group, so it waits in the state agreement for a slower peer: left alone.
    if (!group_.running(slot.local_rank) || slot.built_round == attempt_) continue;
    DDP_LOG_WARN("rank " + std::to_string(slot.rank) + " (pid " +
                 std::to_string(group_.pid(slot.local_rank)) +
                 ") did not build its group of the new round within --recovery_timeout (" +
                 std::to_string(options_.config.recovery_timeout.count()) + " ms); restarting it");
    events_.record(event::kRecoveryTimeout,
                   {{"rank", slot.rank}, {"pid", group_.pid(slot.local_rank)}});
    slot.respawn_on_exit = true;
    group_.signal(slot.local_rank, SIGKILL);
  }
}

void Agent::report_recovery() {
  if (recovery_.reported) return;
  recovery_.reported = true;
  std::tie(recovery_.kept, recovery_.restarted) = kept_and_replaced();
  const auto t0 = recovery_.noticed;
  const int64_t total = ms_between(t0, recovery_.first_step);
  events_.record(event::kInPlaceRecovery, {{"reason", recovery_.reason},
                                           {"from_round", recovery_.from_round},
                                           {"round", recovery_.round},
                                           {"kept", recovery_.kept},
                                           {"restarted", recovery_.restarted},
                                           {"step", recovery_.step},
                                           {"source", recovery_.source},
                                           {"state_bytes", recovery_.state_bytes},
                                           {"aborted_ms", ms_between(t0, recovery_.aborted)},
                                           {"reformed_ms", ms_between(t0, recovery_.reformed)},
                                           {"state_sent_ms", ms_between(t0, recovery_.state_sent)},
                                           {"first_step_ms", total}});
  DDP_LOG_INFO("in-place recovery " + describe_recovery(recovery_));
  recoveries_.push_back(recovery_);
}

std::pair<int, int> Agent::kept_and_replaced() const {
  int kept = 0;
  int replaced = 0;
  for (const auto& slot : workers_) {
    if (slot.finished) continue;
    const bool fresh = slot.replaced_round == attempt_ || slot.respawn_on_exit;
    ++(fresh ? replaced : kept);
  }
  return {kept, replaced};
}

// "round 0 -> 1 (node_lost): aborted 2 ms, ... after it was noticed; 1 kept, ..."
std::string Agent::describe_recovery(const Recovery& r) {
  return "round " + std::to_string(r.from_round) + " -> " + std::to_string(r.round) + " (" +
         r.reason + "): aborted " + std::to_string(ms_between(r.noticed, r.aborted)) +
         " ms, re-formed " + std::to_string(ms_between(r.noticed, r.reformed)) +
         " ms, state sent " + std::to_string(ms_between(r.noticed, r.state_sent)) +
         " ms, first step " + std::to_string(ms_between(r.noticed, r.first_step)) +
         " ms after it was noticed; " + std::to_string(r.kept) + " kept, " +
         std::to_string(r.restarted) + " restarted, resumed at step " + std::to_string(r.step);
}

std::string Agent::recovery_summary() const {
  std::string text;
  for (const auto& r : recoveries_) text += "  " + describe_recovery(r) + "\n";
  return text;
}

void Agent::stop_then_finish(int exit_status) {
  recovering_ = false;
  if (group_.running_count() > 0) {
    begin_stop(agent_signal_.value_or(SIGTERM), StopReason::kSignal,
               [this, exit_status] { finish(exit_status); });
    return;
  }
  finish(exit_status);
}

}  // namespace ddp::launcher
